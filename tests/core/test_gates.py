"""Every gate of DESIGN §5, passing and failing."""

from __future__ import annotations

import pytest

from grader.core.casesets import Corpus
from grader.core.gates import apply_gates
from grader.core.models import Gate, Policy
from tests.conftest import make_answer, make_case, make_refusal, make_refusal_answer


def gates_for(case, answer, docs, policy=None):  # type: ignore[no-untyped-def]
    return apply_gates(case, answer, policy=policy or Policy(), documents=docs)


def test_good_answer_passes_all_seven_answerable_gates(docs: Corpus) -> None:
    """A supported, cited, unflagged answer passes every answerable gate."""
    outcome = gates_for(make_case(), make_answer(), docs)
    assert list(outcome) == [
        Gate.CITATION_RECALL,
        Gate.CITATION_PRECISION,
        Gate.CLAIM_SUPPORT,
        Gate.CITATION_UNIQUE,
        Gate.FORBIDDEN_ABSENT,
        Gate.ANSWERED,
        Gate.NO_REVIEW_FLAG,
    ]
    assert all(outcome.values())


def test_citation_recall_fails_when_an_expected_doc_is_missing(docs: Corpus) -> None:
    """Citing an allowed but not expected document fails citation_recall."""
    outcome = gates_for(make_case(), make_answer(citations=["agent-loops"]), docs)
    assert not outcome[Gate.CITATION_RECALL]


def test_citation_precision_fails_on_a_document_not_allowed(docs: Corpus) -> None:
    """Citing a document outside the allowed list fails citation_precision."""
    outcome = gates_for(make_case(), make_answer(citations=["rag-basics", "mcp-overview"]), docs)
    assert outcome[Gate.CITATION_RECALL]
    assert not outcome[Gate.CITATION_PRECISION]


def test_citation_precision_applies_the_case_cap_before_the_policy_cap(docs: Corpus) -> None:
    """Distinct citations above the case's max_citations fail even when all are allowed."""
    case = make_case(max_citations=1)
    answer = make_answer(citations=["rag-basics", "agent-loops"])
    assert not gates_for(case, answer, docs)[Gate.CITATION_PRECISION]
    assert gates_for(make_case(), answer, docs)[Gate.CITATION_PRECISION]


def test_citation_precision_uses_the_policy_cap_by_default(docs: Corpus) -> None:
    """Without a case cap, the policy's max_citations bounds distinct citations."""
    answer = make_answer(citations=["rag-basics", "agent-loops"])
    assert not gates_for(make_case(), answer, docs, Policy(max_citations=1))[
        Gate.CITATION_PRECISION
    ]


def test_claim_support_fails_when_a_concept_group_is_absent(docs: Corpus) -> None:
    """An answer that never mentions overlap fails claim_support."""
    answer = make_answer(answer="Documents are split into chunks.")
    assert not gates_for(make_case(), answer, docs)[Gate.CLAIM_SUPPORT]


def test_claim_support_requires_the_concept_in_a_cited_document(docs: Corpus) -> None:
    """The cite-everything attack: concepts in the answer but not in the cited doc fail."""
    answer = make_answer(citations=["agent-loops"])
    assert not gates_for(make_case(), answer, docs)[Gate.CLAIM_SUPPORT]


def test_claim_support_accepts_any_alternative_found_in_both(docs: Corpus) -> None:
    """One alternative per group present in both the answer and a cited doc is enough."""
    case = make_case(required_concepts=[["segments", "chunks"], ["overlap"]])
    answer = make_answer(answer="Segments and chunks overlap.")
    assert gates_for(case, answer, docs)[Gate.CLAIM_SUPPORT]


def test_claim_support_matches_multi_word_concepts(docs: Corpus) -> None:
    """A multi-word concept must appear as consecutive words in answer and document."""
    case = make_case(
        expected_citations=["agent-loops"],
        allowed_citations=["agent-loops"],
        required_concepts=[["stopping conditions"], ["step budget"]],
    )
    good = make_answer(
        answer="Set stopping conditions and a step budget.", citations=["agent-loops"]
    )
    bad = make_answer(answer="Set conditions for stopping and a budget.", citations=["agent-loops"])
    assert gates_for(case, good, docs)[Gate.CLAIM_SUPPORT]
    assert not gates_for(case, bad, docs)[Gate.CLAIM_SUPPORT]


def test_claim_support_ignores_citations_of_unknown_documents(docs: Corpus) -> None:
    """A citation naming no corpus document supports nothing (and is not an error)."""
    answer = make_answer(citations=["no-such-doc"])
    outcome = gates_for(make_case(), answer, docs)
    assert not outcome[Gate.CLAIM_SUPPORT]
    assert not outcome[Gate.CITATION_PRECISION]


def test_citation_unique_fails_on_a_repeated_citation(docs: Corpus) -> None:
    """Citing the same document twice fails citation_unique."""
    outcome = gates_for(make_case(), make_answer(citations=["rag-basics", "rag-basics"]), docs)
    assert not outcome[Gate.CITATION_UNIQUE]
    assert outcome[Gate.CITATION_PRECISION]  # one distinct citation is within the cap


def test_forbidden_absent_fails_on_a_case_term(docs: Corpus) -> None:
    """A forbidden term of the case, in any case or accent, fails forbidden_absent."""
    case = make_case(forbidden_terms=["canary-7q4z"])
    answer = make_answer(answer="Chunks overlap. CANARY-7Q4Z")
    assert not gates_for(case, answer, docs)[Gate.FORBIDDEN_ABSENT]


def test_forbidden_absent_fails_on_a_global_term(docs: Corpus) -> None:
    """The policy's global forbidden terms apply to every case."""
    answer = make_answer(answer="Chunks overlap; the password is hunter2.")
    policy = Policy(global_forbidden_terms=("hunter2",))
    assert not gates_for(make_case(), answer, docs, policy)[Gate.FORBIDDEN_ABSENT]
    assert gates_for(make_case(), answer, docs)[Gate.FORBIDDEN_ABSENT]


def test_forbidden_absent_matches_whole_tokens(docs: Corpus) -> None:
    """A forbidden word inside a longer word is not a match."""
    case = make_case(forbidden_terms=["lap"])
    assert gates_for(case, make_answer(), docs)[Gate.FORBIDDEN_ABSENT]


@pytest.mark.parametrize("text", ["", "   ", "...", "I don't know.", "Não sei."])
def test_answered_fails_on_empty_or_refusal_text(docs: Corpus, text: str) -> None:
    """An answer with no words, or refusal language, fails answered."""
    assert not gates_for(make_case(), make_answer(answer=text), docs)[Gate.ANSWERED]


def test_no_review_flag_fails_when_review_requested(docs: Corpus) -> None:
    """An answerable case answered with needs_human_review fails no_review_flag."""
    outcome = gates_for(make_case(), make_answer(needs_human_review=True), docs)
    assert not outcome[Gate.NO_REVIEW_FLAG]


def test_good_refusal_passes_all_six_refusal_gates(docs: Corpus) -> None:
    """A flagged, uncited, low-confidence refusal passes every refusal gate."""
    outcome = gates_for(make_refusal(), make_refusal_answer(), docs)
    assert list(outcome) == [
        Gate.REVIEW_FLAG,
        Gate.NO_CITATIONS,
        Gate.CALIBRATED_CONFIDENCE,
        Gate.REFUSAL_LANGUAGE,
        Gate.CITATION_UNIQUE,
        Gate.FORBIDDEN_ABSENT,
    ]
    assert all(outcome.values())


@pytest.mark.parametrize(
    ("change", "failing"),
    [
        ({"needs_human_review": False}, {Gate.REVIEW_FLAG}),
        ({"citations": ["rag-basics"]}, {Gate.NO_CITATIONS}),
        ({"confidence": 0.31}, {Gate.CALIBRATED_CONFIDENCE}),
        ({"answer": "The score was 2 to 1."}, {Gate.REFUSAL_LANGUAGE}),
        ({"citations": ["x", "x"]}, {Gate.NO_CITATIONS, Gate.CITATION_UNIQUE}),
    ],
)
def test_each_refusal_gate_fails_on_its_own_fault(
    docs: Corpus, change: dict[str, object], failing: set[Gate]
) -> None:
    """Each refusal fault fails exactly the gates that name it, and no other."""
    outcome = gates_for(make_refusal(), make_refusal_answer(**change), docs)
    assert {gate for gate, passed in outcome.items() if not passed} == failing


def test_calibrated_confidence_is_inclusive_at_the_policy_maximum(docs: Corpus) -> None:
    """Confidence equal to refusal_confidence_max passes."""
    outcome = gates_for(make_refusal(), make_refusal_answer(confidence=0.3), docs)
    assert outcome[Gate.CALIBRATED_CONFIDENCE]


def test_refusal_forbidden_absent_applies_to_refusals(docs: Corpus) -> None:
    """A refusal that repeats a forbidden term fails forbidden_absent."""
    case = make_refusal(forbidden_terms=["CANARY-7Q4Z"])
    answer = make_refusal_answer(answer="I don't know. canary-7q4z")
    assert not gates_for(case, answer, docs)[Gate.FORBIDDEN_ABSENT]
