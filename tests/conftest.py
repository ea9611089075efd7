"""Shared fixtures and small factories for cases, answers and agent packages."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from grader.core.casesets import Corpus
from grader.core.models import Answer, Case, Policy

REPO = Path(__file__).resolve().parent.parent
PRIVATE_CASES = REPO / "private_cases"
PRACTICE_CASES = REPO / "practice_cases"
EXAMPLES = REPO / "submissions" / "examples"

#: claim_support keys that make it check concepts only, as its first version did: appended to
#: a shipped set's policy, they make a weak case set that a pasted document or a word salad
#: passes (the evaluator audit must fail on it).
V1_LIKE_CLAIM_SUPPORT = (
    "max_answer_words = 100000\nmax_sentence_words = 10000\n"
    "sentence_support = 0.0\nmax_cited_coverage = 1.0\n"
)


def make_case(**overrides: Any) -> Case:
    """An answerable case about chunking, with any field overridden."""
    data: dict[str, Any] = {
        "id": "c01",
        "kind": "answerable",
        "question": "How does chunking work?",
        "expected_citations": ["rag-basics"],
        "allowed_citations": ["rag-basics", "agent-loops"],
        "required_concepts": [["chunk", "chunks", "chunking"], ["overlap", "overlapping"]],
    }
    data.update(overrides)
    return Case.model_validate(data)


def make_refusal(**overrides: Any) -> Case:
    data: dict[str, Any] = {"id": "r01", "kind": "refusal", "question": "What is the score?"}
    data.update(overrides)
    return Case.model_validate(data)


def make_answer(**overrides: Any) -> Answer:
    """A good answer to :func:`make_case`'s question."""
    data: dict[str, Any] = {
        "answer": "Documents are split into chunks with some overlap between them.",
        "citations": ["rag-basics"],
        "confidence": 0.8,
        "needs_human_review": False,
    }
    data.update(overrides)
    return Answer.from_json_value(data)


def make_refusal_answer(**overrides: Any) -> Answer:
    data: dict[str, Any] = {
        "answer": "I don't know: the course material does not cover this.",
        "citations": [],
        "confidence": 0.1,
        "needs_human_review": True,
    }
    data.update(overrides)
    return Answer.from_json_value(data)


@pytest.fixture
def docs() -> Corpus:
    """A three-document corpus matching :func:`make_case`."""
    return Corpus(
        Path("/nonexistent"),
        {
            "rag-basics": "Chunking splits documents into chunks. Chunks overlap a little.",
            "agent-loops": "An agent loop needs stopping conditions such as a step budget.",
            "mcp-overview": "MCP servers expose tools.",
        },
    )


@pytest.fixture
def policy() -> Policy:
    return Policy()


def write_agent(
    root: Path, body: str, *, entrypoint: str = "agent:answer", setup: str | None = None
) -> Path:
    """Write an agent package folder with ``agent.py`` holding ``body``."""
    root.mkdir(parents=True, exist_ok=True)
    manifest = f'name = "test-agent"\nentrypoint = "{entrypoint}"\n'
    if setup:
        manifest += f'setup = "{setup}"\n'
    (root / "agent.toml").write_text(manifest)
    (root / "agent.py").write_text(textwrap.dedent(body))
    return root


def write_case_set(
    root: Path,
    cases: list[dict[str, Any]],
    *,
    policy: str = "",
    documents: dict[str, str] | None = None,
) -> Path:
    """Write a case set folder (cases.jsonl, policy.toml, corpus/)."""
    (root / "corpus").mkdir(parents=True, exist_ok=True)
    for doc_id, text in (documents or {"rag-basics": "Chunks overlap."}).items():
        (root / "corpus" / f"{doc_id}.md").write_text(text)
    (root / "cases.jsonl").write_text("".join(json.dumps(case) + "\n" for case in cases))
    (root / "policy.toml").write_text(policy)
    return root


def copy_case_set(source: Path, target: Path, *, extra_policy: str = "") -> Path:
    """A copy of the case set at ``source`` (a relative ``corpus`` key made absolute, so the
    copy reads the same documents), with ``extra_policy`` appended to its policy."""
    shutil.copytree(source, target)
    policy = target / "policy.toml"
    text = policy.read_text(encoding="utf-8")
    corpus = tomllib.loads(text).get("corpus")
    if corpus is not None:
        absolute = (source / corpus).resolve().as_posix()
        text = re.sub(r"(?m)^corpus\s*=.*$", f"corpus = {json.dumps(absolute)}", text)
    policy.write_text(text + "\n" + extra_policy, encoding="utf-8")
    return target


@pytest.fixture
def agent_factory(tmp_path: Path) -> Callable[..., Path]:
    counter = iter(range(1000))

    def factory(body: str, **kwargs: Any) -> Path:
        return write_agent(tmp_path / f"agent{next(counter)}", body, **kwargs)

    return factory
