"""The one grading path (grader.grading) and the guards it applies before running anything."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from grader.core.casesets import load_case_set
from grader.core.models import CaseKind, Gate
from grader.core.text import TokenText
from grader.exceptions import SandboxUnavailable
from grader.grading import grade_agent
from grader.sandbox import make_sandbox
from tests.conftest import EXAMPLES, PRIVATE_CASES, write_case_set


def test_bwrap_refuses_a_case_set_its_agents_could_read() -> None:
    """A case set under /usr (bound into the bwrap sandbox) is refused before any agent runs."""
    root = Path(tempfile.mkdtemp(prefix="grader-test-", dir="/usr/local/share"))
    try:
        case_set = load_case_set(
            write_case_set(root, [{"id": "r", "kind": "refusal", "question": "Score?"}])
        )
        with pytest.raises(SandboxUnavailable, match="under /usr"):
            grade_agent(
                EXAMPLES / "refuse_all",
                entrypoint="agent:answer",
                setup=None,
                case_set=case_set,
                sandbox=make_sandbox("bwrap"),
            )
    finally:
        shutil.rmtree(root)


TWO_SENTENCE_AGENT = """
import os, re
from pathlib import Path

def _words(text):
    return [w for w in re.findall(r"\\w+", text.lower()) if len(w) > 3]

def answer(question):
    root = Path(os.environ["CORPUS_DIR"])
    asked = set(_words(question))
    docs = {p.stem: p.read_text() for p in sorted(root.glob("*.md"))}
    best = max(sorted(docs), key=lambda d: len(asked & set(_words(docs[d]))))
    body = " ".join(l for l in docs[best].splitlines() if l and not l.startswith("#"))
    sentences = re.split(r"(?<=[.!?])\\s+", body)
    ranked = sorted(range(len(sentences)), key=lambda i: -len(asked & set(_words(sentences[i]))))
    picked = sorted(ranked[:2])
    return {"answer": " ".join(sentences[i] for i in picked), "citations": [best],
            "confidence": 0.7, "needs_human_review": False}
"""


def test_concise_two_sentence_agent_passes_the_cases_its_sentences_answer(
    agent_factory: Callable[..., Path],
) -> None:
    """An agent quoting the two sentences of the best document that share most words with the
    question passes claim_support on every case whose concepts those sentences contain."""
    case_set = load_case_set(PRIVATE_CASES)
    report = grade_agent(
        agent_factory(TWO_SENTENCE_AGENT),
        entrypoint="agent:answer",
        setup=None,
        case_set=case_set,
        sandbox=make_sandbox("bwrap"),
    )
    cases = case_set.by_id()
    contained = 0
    for result in report.results:
        case = cases[result.case_id]
        if case.kind is not CaseKind.ANSWERABLE or result.answer is None:
            continue
        text = TokenText(result.answer.answer)
        if set(case.expected_citations) <= set(result.answer.citations) and all(
            text.found(group) for group in case.required_concepts
        ):
            contained += 1
            assert result.gates[Gate.CLAIM_SUPPORT], result.case_id
            assert len(result.answer.answer.split()) <= case_set.policy.max_answer_words
    assert contained >= 6
