"""Loading and validating a case set folder: ``cases.jsonl``, ``policy.toml`` and a corpus.

Every error is a :class:`~grader.exceptions.CaseSetError` whose one-line message names the file,
the line and the field, so an instructor can fix the set without reading a traceback.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from grader import __version__
from grader.exceptions import CaseSetError

from .gates import GATES_VERSION
from .models import Case, CaseKind, Policy, Versions
from .support import SupportIndex
from .text import TokenText

CASES_FILE = "cases.jsonl"
POLICY_FILE = "policy.toml"
DEFAULT_CORPUS = "corpus"
DOCUMENT_SUFFIXES = (".md", ".txt")


class Corpus(Mapping[str, str]):
    """The documents agents retrieve from: document id (file stem) → text."""

    def __init__(self, root: Path, documents: dict[str, str]) -> None:
        self.root = root
        self._documents = documents
        self._tokens: dict[str, TokenText] = {}
        self._support: dict[str, SupportIndex] = {}

    def __getitem__(self, doc_id: str) -> str:
        return self._documents[doc_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._documents)

    def __len__(self) -> int:
        return len(self._documents)

    def token_text(self, doc_id: str) -> TokenText:
        """The tokenised document, built once and reused by every answer that cites it."""
        cached = self._tokens.get(doc_id)
        if cached is None:
            cached = self._tokens[doc_id] = TokenText(self._documents[doc_id], remember=True)
        return cached

    def support_index(self, doc_id: str) -> SupportIndex:
        """Stemmed content-word positions of a document (claim_support), built once."""
        cached = self._support.get(doc_id)
        if cached is None:
            cached = self._support[doc_id] = SupportIndex(self._documents[doc_id])
        return cached


@dataclass(frozen=True)
class CaseSet:
    """A validated case set with its versions."""

    root: Path
    cases: tuple[Case, ...]
    policy: Policy
    corpus: Corpus
    versions: Versions
    warnings: tuple[str, ...] = field(default=())

    @property
    def version(self) -> str:
        return self.versions.case_set

    def by_id(self) -> dict[str, Case]:
        return {case.id: case for case in self.cases}

    def counts(self) -> dict[str, int]:
        counts = {kind.value: 0 for kind in CaseKind}
        for case in self.cases:
            counts[case.kind.value] += 1
        return counts


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _describe_validation_error(error: ValidationError) -> str:
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"])
    if first["type"] == "extra_forbidden":
        return f"unknown field '{location}'"
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"field '{location}': {message}" if location else message


def load_policy(path: Path) -> Policy:
    """Read ``policy.toml`` (a missing file means every default)."""
    if not path.exists():
        return Policy()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CaseSetError(f"{path}: not valid TOML ({exc})") from None
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        if first["type"] == "extra_forbidden":
            raise CaseSetError(f"{path}: unknown key '{key}'") from None
        raise CaseSetError(f"{path}: key '{key}': {first['msg']}") from None


def load_corpus(root: Path) -> Corpus:
    """Read every ``*.md`` and ``*.txt`` file of ``root``; the document id is the file stem."""
    if not root.is_dir():
        raise CaseSetError(f"corpus folder not found: {root}")
    documents: dict[str, str] = {}
    for path in sorted(root.iterdir()):
        if path.suffix not in DOCUMENT_SUFFIXES or not path.is_file():
            continue
        if path.stem in documents:
            raise CaseSetError(f"{path}: document id '{path.stem}' is used by two files")
        try:
            documents[path.stem] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise CaseSetError(f"{path}: not UTF-8 text") from None
    if not documents:
        raise CaseSetError(f"corpus folder {root} has no .md or .txt documents")
    return Corpus(root, documents)


def corpus_version(corpus: Corpus) -> str:
    digest = hashlib.sha256()
    for doc_id in sorted(corpus):
        digest.update(doc_id.encode() + b"\0" + _sha256(corpus[doc_id].encode()).encode() + b"\n")
    return digest.hexdigest()


def parse_cases(text: str, *, source: str, corpus: Mapping[str, str]) -> tuple[Case, ...]:
    """Parse and validate JSONL case lines; errors name ``source``, the line and the field."""
    cases: list[Case] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CaseSetError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise CaseSetError(f"{where}: a case must be a JSON object")
        try:
            case = Case.model_validate(data)
        except ValidationError as exc:
            raise CaseSetError(f"{where}: {_describe_validation_error(exc)}") from None
        if case.id in first_line:
            raise CaseSetError(
                f"{where}: field 'id': duplicate case id '{case.id}' (first on line "
                f"{first_line[case.id]})"
            )
        first_line[case.id] = number
        for name in ("expected_citations", "allowed_citations"):
            unknown = [doc for doc in getattr(case, name) if doc not in corpus]
            if unknown:
                raise CaseSetError(
                    f"{where}: field '{name}': document '{unknown[0]}' is not in the corpus"
                )
        cases.append(case)
    if not cases:
        raise CaseSetError(f"{source}: no cases")
    return tuple(cases)


def _unsupported_concepts(case: Case, corpus: Corpus) -> list[str]:
    """Concept groups no allowed document contains: such a case can never pass claim_support."""
    problems = []
    for group in case.required_concepts:
        if not any(corpus.token_text(doc).found(group) for doc in case.allowed_citations):
            problems.append(f"case {case.id}: no allowed document contains any of {list(group)}")
    return problems


def load_case_set(root: Path) -> CaseSet:
    """Load and validate a case set folder (DESIGN §3)."""
    if not root.is_dir():
        raise CaseSetError(f"case set folder not found: {root}")
    cases_path = root / CASES_FILE
    if not cases_path.is_file():
        raise CaseSetError(f"{cases_path}: file not found")
    policy_path = root / POLICY_FILE
    policy = load_policy(policy_path)
    corpus = load_corpus((root / (policy.corpus or DEFAULT_CORPUS)).resolve())
    try:
        cases_bytes = cases_path.read_bytes()
        cases_text = cases_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise CaseSetError(f"{cases_path}: not UTF-8 text") from None
    cases = parse_cases(cases_text, source=str(cases_path), corpus=corpus)
    policy_bytes = policy_path.read_bytes() if policy_path.exists() else b""
    cases_hash, policy_hash, corpus_hash = (
        _sha256(cases_bytes),
        _sha256(policy_bytes),
        corpus_version(corpus),
    )
    # The gates' version is part of the set's version: the same files graded under a changed
    # gate meaning are a different measuring setup (and older results become outdated).
    combined = _sha256(
        f"cases:{cases_hash}\npolicy:{policy_hash}\ncorpus:{corpus_hash}\n"
        f"gates:{GATES_VERSION}\n".encode()
    )
    versions = Versions(
        case_set=combined[:16],
        cases=cases_hash[:16],
        policy=policy_hash[:16],
        corpus=corpus_hash[:16],
        grader=__version__,
    )
    warnings = tuple(problem for case in cases for problem in _unsupported_concepts(case, corpus))
    return CaseSet(root, cases, policy, corpus, versions, warnings)
