"""Publishing the public practice set: validate, leak-check, then write it all or nothing.

``publish_practice_set`` loads the public set with the same loader as hidden grading, loads the
private set, and runs :func:`grader.practice.leakcheck.check_leaks`. Only a clean set is
written, and it is written into a temporary folder beside ``out`` that is renamed into place at
the end, so a refusal, a bad input or a crash leaves ``out`` exactly as it was.

A published folder holds ``cases.jsonl`` (the public cases, byte for byte), ``policy.toml``
(the public policy without its ``corpus`` key), ``corpus/`` (a copy of the documents, so the
folder stands alone), ``README.md`` for students and ``manifest.json`` (version hash, counts by
kind and slice, grader version, publication date, file hashes and the leak check's figures).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grader import __version__
from grader.audit.report import AuditReport, run_audit
from grader.core.casesets import (
    CASES_FILE,
    DEFAULT_CORPUS,
    DOCUMENT_SUFFIXES,
    POLICY_FILE,
    CaseSet,
    load_case_set,
)
from grader.exceptions import CaseSetError, PublishError

from .leakcheck import DEFAULT_THRESHOLDS, METHOD, LeakReport, LeakThresholds, check_leaks

__all__ = [
    "MANIFEST_FILE",
    "MANIFEST_FORMAT",
    "README_FILE",
    "AuditRefused",
    "LeakRefused",
    "PublishError",
    "PublishedSet",
    "public_policy_text",
    "publish_practice_set",
]

MANIFEST_FILE = "manifest.json"
README_FILE = "README.md"
MANIFEST_FORMAT = 1

PUBLISHED_CORPUS_COMMENT = "# The corpus is the corpus/ folder beside this file."
_CORPUS_LINE = re.compile(r"^\s*corpus\s*=")


class LeakRefused(PublishError):
    """The leak check found public cases that give away private ones; nothing was written."""

    def __init__(self, report: LeakReport) -> None:
        offending = report.offending_public_ids()
        super().__init__(
            f"practice set refused: {len(offending)} public case(s) give away private cases; "
            "nothing was written"
        )
        self.report = report


class AuditRefused(PublishError):
    """The practice set's evaluator audit fails (DESIGN §9); nothing was written."""

    def __init__(self, report: AuditReport) -> None:
        failing = len(report.failures())
        super().__init__(
            f"practice set refused: its evaluator audit fails ({failing} of "
            f"{len(report.canaries)} canaries that deserve zero score; see grader audit "
            "--cases DIR); nothing was written"
        )
        self.report = report


@dataclass(frozen=True)
class PublishedSet:
    """Where a practice set was published, and its manifest."""

    path: Path
    manifest: dict[str, Any]
    leak_report: LeakReport


def public_policy_text(policy_text: str) -> str:
    """``policy.toml`` without its ``corpus`` key, comments kept; the published corpus is beside it.

    Raises :class:`PublishError` when the key cannot be removed line-wise (e.g. it sits in an
    inline table), rather than publishing a policy that points outside the folder.
    """
    kept: list[str] = []
    for line in policy_text.splitlines():
        if not _CORPUS_LINE.match(line):
            kept.append(line)
            continue
        while kept and kept[-1].lstrip().startswith("#"):
            kept.pop()  # the comment above the key describes the folder it pointed to
        kept.append(PUBLISHED_CORPUS_COMMENT)
    text = "\n".join(kept) + ("\n" if kept else "")
    try:
        original = tomllib.loads(policy_text)
        rewritten = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PublishError(
            f"{POLICY_FILE}: not valid TOML after removing 'corpus' ({exc})"
        ) from None
    original.pop("corpus", None)
    if rewritten != original:
        raise PublishError(
            f"{POLICY_FILE}: cannot remove the 'corpus' key cleanly; put it on a line of its own"
        )
    return text


def _load(root: Path, which: str) -> CaseSet:
    try:
        return load_case_set(root)
    except CaseSetError as exc:
        raise PublishError(f"{which} set: {exc}") from None


def _is_within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _check_out_dir(out_dir: Path, *, protected: tuple[Path, ...], replace: bool) -> None:
    resolved = out_dir.resolve()
    for folder in protected:
        if _is_within(resolved, folder) or _is_within(folder, resolved):
            raise PublishError(f"--out {out_dir} overlaps an input folder ({folder})")
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise PublishError(f"--out {out_dir} exists and is not a folder")
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    if not replace:
        raise PublishError(
            f"--out {out_dir} already exists and is not empty (choose a new folder or --replace)"
        )
    if not (out_dir / MANIFEST_FILE).is_file():
        raise PublishError(
            f"--out {out_dir} is not a published practice set (no {MANIFEST_FILE}); "
            "--replace only replaces a previous publication"
        )


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy_corpus(source: Path, target: Path) -> None:
    target.mkdir()
    for path in sorted(source.iterdir()):
        if path.suffix in DOCUMENT_SUFFIXES and path.is_file():
            shutil.copyfile(path, target / path.name)


def _counts(case_set: CaseSet) -> dict[str, Any]:
    slices = Counter(name for case in case_set.cases for name in case.slices)
    return {
        "cases": len(case_set.cases),
        "by_kind": case_set.counts(),
        "by_slice": dict(sorted(slices.items())),
        "safety_cases": sum(case.safety for case in case_set.cases),
        "documents": len(case_set.corpus),
    }


def _leak_check_summary(report: LeakReport, private: CaseSet) -> dict[str, Any]:
    thresholds = report.thresholds
    return {
        "method": METHOD,
        "thresholds": {
            "reworded_similarity": thresholds.reworded_similarity,
            "padded_min_tokens": thresholds.padded_min_tokens,
            "padded_min_share": thresholds.padded_min_share,
        },
        "private_case_set_version": private.version,
        "private_cases": report.private_count,
        "hits": len(report.hits),
        "closest_similarity": report.closest.similarity if report.closest else None,
    }


def _manifest(
    folder: Path, published: CaseSet, report: LeakReport, private: CaseSet, when: datetime
) -> dict[str, Any]:
    files = sorted(
        path for path in folder.rglob("*") if path.is_file() and path.name != MANIFEST_FILE
    )
    return {
        "format": MANIFEST_FORMAT,
        "version": published.version,
        "versions": {
            "cases": published.versions.cases,
            "policy": published.versions.policy,
            "corpus": published.versions.corpus,
        },
        "grader_version": __version__,
        "published_at": when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "counts": _counts(published),
        "leak_check": _leak_check_summary(report, private),
        "files": {path.relative_to(folder).as_posix(): _sha256(path) for path in files},
    }


def _readme(published: CaseSet, when: datetime) -> str:
    counts = published.counts()
    return f"""# Capstone practice set

Version `{published.version}`, published {when.astimezone(UTC):%Y-%m-%d} by grader {__version__}.

{len(published.cases)} public cases ({counts["answerable"]} answerable, {counts["refusal"]} \
refusal) over the course corpus in `corpus/` ({len(published.corpus)} documents). Build and
test your agent against them as much as you like: every case, label and expected citation is
here on purpose. Your certificate is decided on a **different, private** set graded with the
same gates, bars and limits (`policy.toml`), so an agent tuned to these exact questions
learns nothing the private set will reward.

## Grade your agent locally

```sh
grader practice run path/to/your-agent --practice path/to/this-folder
```

It runs your agent in the bubblewrap sandbox when it is available (else unsandboxed, with a
warning) and prints every case: the question, each gate, and your agent's answer. Add `--json`
for one JSON object.

## Files

- `cases.jsonl`: one case a line (`id`, `kind`, `question`, `expected_citations`,
  `allowed_citations`, `required_concepts`, `forbidden_terms`, `safety`, `slices`, …).
- `policy.toml`: pass bars, citation cap, safety gates and time/memory limits.
- `corpus/`: the documents your agent retrieves from (`CORPUS_DIR` in the sandbox).
- `manifest.json`: version, counts and a SHA-256 hash of every file.

An answerable case passes when all seven gates pass: citation_recall, citation_precision,
claim_support, citation_unique, forbidden_absent, answered, no_review_flag. A refusal case
passes when all six pass: review_flag, no_citations, calibrated_confidence,
refusal_language, citation_unique, forbidden_absent. Any safety failure blocks the certificate.
"""


def _write_folder(
    folder: Path, public: CaseSet, private: CaseSet, report: LeakReport, when: datetime
) -> dict[str, Any]:
    shutil.copyfile(public.root / CASES_FILE, folder / CASES_FILE)
    policy_path = public.root / POLICY_FILE
    policy_text = policy_path.read_text(encoding="utf-8") if policy_path.exists() else ""
    (folder / POLICY_FILE).write_text(public_policy_text(policy_text), encoding="utf-8")
    _copy_corpus(public.corpus.root, folder / DEFAULT_CORPUS)
    published = _load(folder, "published")
    (folder / README_FILE).write_text(_readme(published, when), encoding="utf-8")
    manifest = _manifest(folder, published, report, private, when)
    (folder / MANIFEST_FILE).write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    for path in (folder, *folder.rglob("*")):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return manifest


def _move_into_place(staged: Path, out_dir: Path) -> None:
    """Rename ``staged`` to ``out_dir``; an existing ``out_dir`` is swapped out, then removed."""
    if not out_dir.exists() or not any(out_dir.iterdir()):
        staged.rename(out_dir)  # rename(2) replaces an empty folder atomically
        return
    previous = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.previous-", dir=out_dir.parent))
    previous.rmdir()
    out_dir.rename(previous)
    try:
        staged.rename(out_dir)
    except OSError:
        previous.rename(out_dir)
        raise
    shutil.rmtree(previous)


def publish_practice_set(
    public_dir: Path,
    private_dir: Path,
    out_dir: Path,
    *,
    replace: bool = False,
    thresholds: LeakThresholds = DEFAULT_THRESHOLDS,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> PublishedSet:
    """Validate and leak-check ``public_dir`` against ``private_dir``; publish it to ``out_dir``.

    Raises :class:`LeakRefused` (with the report), :class:`AuditRefused` when a canary agent
    that deserves zero scores on the public set, or :class:`PublishError`; in every case
    nothing under ``out_dir`` has been created or changed.
    """
    public = _load(public_dir, "public")
    private = _load(private_dir, "private")
    out_dir = out_dir.absolute()
    _check_out_dir(
        out_dir,
        protected=tuple(
            folder.resolve()
            for folder in (public.root, private.root, public.corpus.root, private.corpus.root)
        ),
        replace=replace,
    )
    report = check_leaks(public.cases, private.cases, thresholds)
    if not report.clean:
        raise LeakRefused(report)
    audit = run_audit(public)
    if not audit.ok:
        raise AuditRefused(audit)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.publishing-", dir=out_dir.parent))
    try:
        manifest = _write_folder(staged, public, private, report, clock())
        _move_into_place(staged, out_dir)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return PublishedSet(out_dir, manifest, report)
