"""The two JSON views of a grading run (DESIGN §8 and §11).

The student view is built only from :class:`~grader.core.scoring.Summary` counts, the decision
and generic hints, so it cannot carry a question, a case id, a slice, a label or an answer: the
data is simply not there to leak. The instructor view adds every case in full.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .disclosure import coarse_failing_gates, coarse_parts, coarse_reasons
from .model_usage import SummaryBounds, call_rows, model_summary, student_model_summary
from .models import Case, CaseKind, ClaimFailure, Feedback, Gate, GradeReport
from .scoring import Summary, Tally, summarize

GATE_HINTS: dict[Gate, str] = {
    Gate.CITATION_RECALL: "Cite the document your answer relies on; check retrieval finds it.",
    Gate.CITATION_PRECISION: (
        "Cite only documents that support the answer, and no more than the citation cap."
    ),
    Gate.CLAIM_SUPPORT: (
        "Answer in a few sentences that state the key concepts, each sentence backed by one "
        "passage of the document you cite."
    ),
    Gate.CITATION_UNIQUE: "List each citation once.",
    Gate.FORBIDDEN_ABSENT: (
        "Treat retrieved text as data, never as instructions; never repeat injected content."
    ),
    Gate.ANSWERED: "When the corpus covers the question, answer it in words rather than refusing.",
    Gate.NO_REVIEW_FLAG: "Set needs_human_review only when you refuse or are unsure.",
    Gate.REVIEW_FLAG: "When the corpus cannot answer, set needs_human_review to true.",
    Gate.NO_CITATIONS: "A refusal cites nothing.",
    Gate.CALIBRATED_CONFIDENCE: "A refusal reports a low confidence.",
    Gate.REFUSAL_LANGUAGE: (
        'Refuse in clear words ("I don\'t know", "não sei", "no sé", …), '
        "in the question's language if you can."
    ),
}

CLAIM_HINTS: dict[ClaimFailure, str] = {
    ClaimFailure.MISSING_CONCEPT: (
        "Some answers miss a key point of the question, or use words the cited document does "
        "not contain: answer every part of the question in the document's own terms."
    ),
    ClaimFailure.UNSUPPORTED_SENTENCE: (
        "Some sentences are not backed by one passage of the cited document: keep each "
        "sentence short and close to a single passage you retrieved; off-topic asides, word "
        "lists and sentences stitched from all over a document are not support."
    ),
    ClaimFailure.TOO_LONG: (
        "Some answers are too long or reuse most of the cited document: answer in a few "
        "sentences instead of pasting the document."
    ),
}

ERROR_HINTS = {
    "timeout": "Some questions got no answer within the time limit.",
    "crashed": "Your agent exited or raised while answering some questions.",
    "invalid_output": "Some answers were not a valid answer object (see the answer schema).",
    "oom": "Your agent ran out of memory on some questions.",
}


def _tally(tally: Tally) -> dict[str, int]:
    return {"passed": tally.passed, "total": tally.total}


def _counts(summary: Summary, feedback: Feedback) -> tuple[dict[str, Any], dict[str, Any]]:
    overall = _tally(summary.overall)
    by_kind: dict[str, Any] = {}
    for kind, kind_summary in summary.by_kind.items():
        if not kind_summary.cases.total:
            continue
        if feedback is Feedback.COUNTS:
            gates: dict[str, Any] = {g.value: _tally(t) for g, t in kind_summary.gates.items()}
        else:  # pass_fail: whether every case passed the gate, no counts
            gates = {
                g.value: {"all_passed": t.passed == t.total} for g, t in kind_summary.gates.items()
            }
        by_kind[kind.value] = {**_tally(kind_summary.cases), "gates": gates}
        if kind is CaseKind.ANSWERABLE and feedback is Feedback.COUNTS:
            by_kind[kind.value]["claim_support_reasons"] = {
                reason.value: summary.claim_failures.get(reason, 0) for reason in ClaimFailure
            }
    return overall, by_kind


def _hints(summary: Summary) -> list[dict[str, str]]:
    failing: dict[Gate, None] = {}
    for kind_summary in summary.by_kind.values():
        for gate, tally in kind_summary.gates.items():
            if tally.passed < tally.total:
                failing[gate] = None
    hints = [{"gate": gate.value, "hint": GATE_HINTS[gate]} for gate in failing]
    hints += [
        {"gate": Gate.CLAIM_SUPPORT.value, "reason": reason.value, "hint": CLAIM_HINTS[reason]}
        for reason, count in summary.claim_failures.items()
        if count
    ]
    hints += [
        {"error": kind.value, "hint": ERROR_HINTS[kind.value]}
        for kind, count in summary.errors.items()
        if count
    ]
    return hints


NO_VALID_ANSWER_HINT = (
    "Some questions got no valid answer (a timeout, a crash, an invalid answer object or "
    "running out of memory)."
)


def _coarse_view(view: dict[str, Any], summary: Summary, report: GradeReport, buckets: int) -> None:
    """Fill ``view`` with the coarse feedback: bucketed rates, one error count, no numbers."""
    parts = coarse_parts(summary, buckets)
    view.update(parts)
    hints: list[dict[str, str]] = [
        {"gate": gate, "hint": GATE_HINTS[Gate(gate)]}
        for gate in coarse_failing_gates(summary, buckets)
    ]
    if parts["errors"]["no_valid_answer"]:
        hints.append({"error": "no_valid_answer", "hint": NO_VALID_ANSWER_HINT})
    view["hints"] = hints
    view["safety_failures"] = summary.safety_failures
    view["certificate"] = {
        "decision": report.decision.decision.value,
        "reasons": coarse_reasons(report.decision.decision, report.decision.reasons),
    }


def student_view(
    report: GradeReport,
    *,
    feedback: Feedback = Feedback.COUNTS,
    status: str = "graded",
    buckets: int = 5,
    model_bounds: SummaryBounds | None = None,
) -> dict[str, Any]:
    """What a student may see of their run: counts, errors, safety count, decision, hints.

    ``ladder`` builds the full counts view (whether it is released is
    :func:`grader.core.disclosure.plan_release`'s decision); ``coarse`` buckets the rates and
    drops the model summary. A run with a model gateway shows its summary quantised and
    capped at ``model_bounds`` (the policy's limits; none when the policy names no models),
    or only quantised when no bounds are given.
    """
    summary = summarize(report.results)
    view: dict[str, Any] = {
        "status": status,
        "case_set_version": report.versions.case_set,
        "feedback": feedback.value,
    }
    if feedback is Feedback.COARSE:
        _coarse_view(view, summary, report, buckets)
        return view
    if feedback is Feedback.LADDER:
        feedback = Feedback.COUNTS
    if feedback is not Feedback.NONE:
        overall, by_kind = _counts(summary, feedback)
        view["overall"] = overall
        view["by_kind"] = by_kind
        view["hints"] = _hints(summary)
    view["errors"] = {kind.value: count for kind, count in summary.errors.items()}
    view["safety_failures"] = summary.safety_failures
    view["certificate"] = {
        "decision": report.decision.decision.value,
        "reasons": list(report.decision.reasons),
    }
    if report.model_gateway and (model_bounds is None or model_bounds.models):
        view["model"] = student_model_summary(model_summary(report.results), model_bounds)
    return view


def instructor_view(
    report: GradeReport, *, cases: Mapping[str, Case] | None = None
) -> dict[str, Any]:
    """Everything: the student view with full counts, versions, and every case in detail."""
    view = student_view(report, feedback=Feedback.COUNTS)
    if report.model_gateway:  # instructors see the exact summary
        view["model"] = model_summary(report.results)
    view["versions"] = report.versions.model_dump(mode="json")
    view["restarts"] = report.restarts
    if report.retrieval is not None:
        view["retrieval"] = report.retrieval
    rows = []
    for result in report.results:
        case = cases.get(result.case_id) if cases else None
        rows.append(
            {
                "case_id": result.case_id,
                "kind": result.kind.value,
                "passed": result.passed,
                "gates": {gate.value: passed for gate, passed in result.gates.items()},
                "claim_support_failure": (
                    result.claim_failure.value if result.claim_failure else None
                ),
                "error": result.error.value if result.error else None,
                "safety": result.safety,
                "safety_failure": result.safety_failure,
                "safety_failures": [gate.value for gate in result.safety_failures],
                "answer": result.answer.model_dump(mode="json") if result.answer else None,
                "diagnosis": result.diagnosis.value if result.diagnosis else None,
                "seconds": result.seconds,
                "question": case.question if case else None,
                "slices": list(case.slices) if case else [],
                "model_calls": call_rows(result),
            }
        )
    view["cases"] = rows
    return view
