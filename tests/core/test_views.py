"""The student and instructor views (DESIGN §8, §11)."""

from __future__ import annotations

import json

from grader.core.casesets import Corpus
from grader.core.models import (
    CaseResult,
    CertificateDecision,
    Decision,
    ErrorKind,
    Feedback,
    GradeReport,
    Policy,
    Versions,
)
from grader.core.scoring import decide, grade_case
from grader.core.views import instructor_view, student_view
from tests.conftest import make_answer, make_case, make_refusal, make_refusal_answer

SECRET_QUESTION = "How does chunking work in the zebra-quartz pipeline?"


def report(docs: Corpus) -> GradeReport:
    case = make_case(
        id="secret-id-42",
        question=SECRET_QUESTION,
        slices=["topic:zebra"],
        forbidden_terms=["quartzcanary"],
    )
    results: list[CaseResult] = [
        grade_case(
            case, make_answer(answer="chunks overlap zebra"), policy=Policy(), documents=docs
        ),
        grade_case(
            make_refusal(id="r-secret"), make_refusal_answer(), policy=Policy(), documents=docs
        ),
        grade_case(
            make_case(id="t-secret"), None, ErrorKind.TIMEOUT, policy=Policy(), documents=docs
        ),
    ]
    versions = Versions(case_set="v1", cases="c", policy="p", corpus="k", grader="0")
    return GradeReport(
        versions=versions, results=tuple(results), decision=decide(results, Policy())
    )


def test_student_view_has_the_contract_keys(docs: Corpus) -> None:
    """The student view carries every key of DESIGN §11 with counts by kind and gate."""
    view = student_view(report(docs))
    assert view["status"] == "graded"
    assert view["case_set_version"] == "v1"
    assert view["overall"] == {"passed": 2, "total": 3}
    assert view["by_kind"]["answerable"]["gates"]["claim_support"] == {"passed": 1, "total": 2}
    assert view["by_kind"]["refusal"] == {
        "passed": 1,
        "total": 1,
        "gates": {
            g: {"passed": 1, "total": 1}
            for g in (
                "review_flag",
                "no_citations",
                "calibrated_confidence",
                "refusal_language",
                "citation_unique",
                "forbidden_absent",
            )
        },
    }
    assert view["errors"] == {"timeout": 1, "crashed": 0, "invalid_output": 0, "oom": 0}
    assert view["safety_failures"] == 0
    assert view["certificate"]["decision"] == "not_awarded"


def test_student_view_reveals_no_case_content(docs: Corpus) -> None:
    """No case id, question, slice, label or answer text is in the student view."""
    text = json.dumps(student_view(report(docs)))
    for secret in (
        "secret-id-42",
        "r-secret",
        "t-secret",
        "zebra",
        "quartz",
        "rag-basics",
        "overlap",
        "How does chunking",
        "topic:",
    ):
        assert secret not in text, secret


def test_pass_fail_feedback_hides_counts(docs: Corpus) -> None:
    """feedback = pass_fail says per gate whether all cases passed, without counts."""
    view = student_view(report(docs), feedback=Feedback.PASS_FAIL)
    assert view["by_kind"]["answerable"]["gates"]["claim_support"] == {"all_passed": False}


def test_none_feedback_shows_only_status_errors_and_decision(docs: Corpus) -> None:
    """feedback = none leaves out per-gate counts and hints."""
    view = student_view(report(docs), feedback=Feedback.NONE)
    assert "by_kind" not in view and "overall" not in view and "hints" not in view
    assert view["certificate"]["decision"] == "not_awarded"


def test_instructor_view_has_every_case_in_full(docs: Corpus) -> None:
    """The instructor view lists each case with gates, error, answer and question."""
    graded = report(docs)
    cases = {"secret-id-42": make_case(id="secret-id-42", question=SECRET_QUESTION)}
    view = instructor_view(graded, cases=cases)
    first, _, third = view["cases"]
    assert first["case_id"] == "secret-id-42" and first["question"] == SECRET_QUESTION
    assert first["answer"]["answer"] == "chunks overlap zebra"
    assert third["error"] == "timeout" and third["answer"] is None
    assert set(first) >= {
        "case_id",
        "kind",
        "passed",
        "gates",
        "error",
        "safety_failure",
        "answer",
        "diagnosis",
    }


def test_blocked_decision_reaches_the_student(docs: Corpus) -> None:
    """The decision and its reasons are part of the student view."""
    graded = report(docs).model_copy(
        update={
            "decision": CertificateDecision(
                decision=Decision.BLOCKED, reasons=("1 case with a safety failure",)
            )
        }
    )
    assert student_view(graded)["certificate"] == {
        "decision": "blocked",
        "reasons": ["1 case with a safety failure"],
    }


def test_claim_support_failures_are_counted_by_reason_never_by_case(docs: Corpus) -> None:
    """The student view counts claim_support failures per reason with a hint for each reason
    seen, and names no case; the instructor view names the failing sub-check per case."""
    case = make_case(id="secret-claim-7", question=SECRET_QUESTION)
    answers = {
        "missing": "Chunks are small.",
        "unsupported": "Chunks overlap zebra quartz giraffe.",
        "long": "Chunks overlap a little. " * 40,
    }
    results = [
        grade_case(case, make_answer(answer=text), policy=Policy(), documents=docs)
        for text in answers.values()
    ]
    graded = GradeReport(
        versions=Versions(case_set="v1", cases="c", policy="p", corpus="k", grader="0"),
        results=tuple(results),
        decision=decide(results, Policy()),
    )
    view = student_view(graded)
    assert view["by_kind"]["answerable"]["claim_support_reasons"] == {
        "missing_concept": 1,
        "too_long": 1,
        "unsupported_sentence": 1,
    }
    reasons = {hint.get("reason") for hint in view["hints"] if hint["gate"] == "claim_support"}
    assert reasons >= {"missing_concept", "too_long", "unsupported_sentence"}
    assert "secret-claim-7" not in json.dumps(view) and "zebra" not in json.dumps(view)
    assert "claim_support_reasons" not in json.dumps(
        student_view(graded, feedback=Feedback.PASS_FAIL)
    )
    rows = instructor_view(graded)["cases"]
    assert [row["claim_support_failure"] for row in rows] == [
        "missing_concept",
        "unsupported_sentence",
        "too_long",
    ]
