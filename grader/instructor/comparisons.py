"""Comparing result sets stored in the database (DESIGN §7): two submissions pairwise, and the
same submissions before and after a regrade. Plain functions of a session that raise
:class:`~grader.exceptions.GraderError`s; no Flask, no commit.

By default each side is the submission's *current* result set, so after a regrade the current
results are compared; ``baseline_version``/``candidate_version`` pick earlier ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session

from grader.core.casesets import CaseSet
from grader.core.compare import DEFAULT_ALPHA, Comparison, Metric, compare_results
from grader.core.models import GATES_BY_KIND, Case, CaseKind, CaseResult, GradeReport
from grader.db.results import list_gradings, load_report, load_reports
from grader.db.submissions import get_submission
from grader.db.tables import GradingRow, SubmissionRow, timestamp
from grader.db.users import student_name_of
from grader.exceptions import ComparisonRefused, SubmissionNotFound

from .regrades import RunRecord


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a submission and one of its result sets."""

    submission: SubmissionRow
    student: str | None
    grading: GradingRow
    report: GradeReport

    def as_dict(self) -> dict[str, Any]:
        return {
            "submission": self.submission.id,
            "student": self.student,
            "agent_name": self.submission.agent_name,
            "uploaded_at": timestamp(self.submission.created_at),
            "grading_version": self.grading.version,
            "current": self.grading.id == self.submission.current_grading_id,
            "decision": self.grading.decision,
        }


@dataclass(frozen=True)
class SubmissionComparison:
    baseline: Side
    candidate: Side
    comparison: Comparison
    #: The case set's cases when it is the version compared (questions, slices), else empty.
    cases: Mapping[str, Case]

    def as_dict(self) -> dict[str, Any]:
        """The instructor's JSON: the comparison, both sides, and each flipped case with its
        question and both answers side by side."""
        data = self.comparison.as_dict()
        data["baseline"] = self.baseline.as_dict()
        data["candidate"] = self.candidate.as_dict()
        base = {r.case_id: r for r in self.baseline.report.results}
        cand = {r.case_id: r for r in self.candidate.report.results}
        for flip in data["flipped"]:
            case = self.cases.get(flip["case_id"])
            flip["question"] = case.question if case else None
            flip["baseline_answer"] = _answer(base.get(flip["case_id"]))
            flip["candidate_answer"] = _answer(cand.get(flip["case_id"]))
            flip["baseline_failed_gates"] = _failed(base.get(flip["case_id"]))
            flip["candidate_failed_gates"] = _failed(cand.get(flip["case_id"]))
        return data


def _answer(result: CaseResult | None) -> dict[str, Any] | None:
    if result is None:
        return None
    if result.answer is None:
        return {"error": result.error.value if result.error else None}
    return result.answer.model_dump(mode="json")


def _failed(result: CaseResult | None) -> list[str]:
    if result is None:
        return []
    return [gate.value for gate, passed in result.gates.items() if not passed]


def load_side(
    *, session: Session, submission_id: str, version: int | None, owner_id: int | None = None
) -> Side:
    """A submission's result set ``version`` (its current one for None). With ``owner_id``,
    another user's submission is indistinguishable from none."""
    submission = get_submission(session=session, submission_id=submission_id)
    if submission is None or (owner_id is not None and submission.user_id != owner_id):
        raise SubmissionNotFound(f"no such submission: {submission_id[:40]}")
    gradings = list_gradings(session=session, submission_id=submission.id)
    if version is None:
        grading = next((g for g in gradings if g.id == submission.current_grading_id), None)
        if grading is None:
            raise ComparisonRefused(f"submission {submission.id} has no results yet")
    else:
        grading = next((g for g in gradings if g.version == version), None)
        if grading is None:
            raise SubmissionNotFound(f"submission {submission.id} has no result set v{version}")
    assert grading.id is not None
    report = load_report(session=session, grading_id=grading.id)
    assert report is not None
    return Side(
        submission, student_name_of(session=session, submission=submission), grading, report
    )


def compare_submissions(
    *,
    session: Session,
    baseline: str,
    candidate: str,
    case_set: CaseSet | None,
    baseline_version: int | None = None,
    candidate_version: int | None = None,
    primary: str = Metric.ANSWERABLE_PASS_RATE.value,
    alpha: float = DEFAULT_ALPHA,
    owner_id: int | None = None,
    admit: Callable[[Side], None] | None = None,
) -> SubmissionComparison:
    """Compare two stored result sets (:class:`ComparisonRefused` across case-set versions).

    ``admit`` may refuse a side (by raising) before anything is computed, so a refusal takes
    the same time whatever the results hold.
    """
    base = load_side(
        session=session, submission_id=baseline, version=baseline_version, owner_id=owner_id
    )
    cand = load_side(
        session=session, submission_id=candidate, version=candidate_version, owner_id=owner_id
    )
    if admit is not None:
        admit(base)
        admit(cand)
    compared = base.report.versions.case_set
    cases = case_set.by_id() if case_set is not None and case_set.version == compared else {}
    comparison = compare_results(
        base.report.results,
        cand.report.results,
        baseline_version=compared,
        candidate_version=cand.report.versions.case_set,
        cases=cases,
        primary=primary,
        alpha=alpha,
    )
    return SubmissionComparison(base, cand, comparison, cases)


# --------------------------------------------------------------------------------------------
# Case-set comparison: the same submissions before and after a regrade


@dataclass
class GateShift:
    """One gate over every submission a regrade touched: outcomes before and after."""

    cases: int = 0
    passed_before: int = 0
    passed_after: int = 0
    to_failed: int = 0
    to_passed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "cases": self.cases,
            "passed_before": self.passed_before,
            "passed_after": self.passed_after,
            "to_failed": self.to_failed,
            "to_passed": self.to_passed,
        }


def gate_shifts(
    pairs: list[tuple[GradeReport, GradeReport]],
) -> dict[str, dict[str, GateShift]]:
    """Per kind and gate, summed over (before, after) result sets: cases paired by id."""
    shifts = {kind.value: {g.value: GateShift() for g in GATES_BY_KIND[kind]} for kind in CaseKind}
    for before, after in pairs:
        after_by_id = {r.case_id: r for r in after.results}
        for old in before.results:
            new = after_by_id.get(old.case_id)
            if new is None:
                continue
            for gate, was in old.gates.items():
                now = new.gates.get(gate)
                if now is None:
                    continue
                shift = shifts[old.kind.value][gate.value]
                shift.cases += 1
                shift.passed_before += was
                shift.passed_after += now
                shift.to_failed += was and not now
                shift.to_passed += now and not was
    return {kind: gates for kind, gates in shifts.items() if any(s.cases for s in gates.values())}


def regrade_comparison(*, session: Session, record: RunRecord) -> dict[str, Any]:
    """What a regrade moved: decisions changed (with the student), who ran it, and which gates
    moved across every submission it regraded (before vs after result sets)."""
    pairs: list[tuple[GradeReport, GradeReport]] = []
    decisions = []
    ids = [
        grading.id
        for outcome in record.items
        for grading in (outcome.item.before, outcome.item.after)
        if grading is not None and grading.id is not None
    ]
    reports = load_reports(session=session, grading_ids=ids)
    for outcome in record.items:
        before, after = outcome.item.before, outcome.item.after
        if before is None or after is None or before.id is None or after.id is None:
            continue
        old, new = reports.get(before.id), reports.get(after.id)
        if old is None or new is None:
            continue
        pairs.append((old, new))
        now_passed = {result.case_id: result.passed for result in new.results}
        flipped = sum(
            1
            for result in old.results
            if result.case_id in now_passed and now_passed[result.case_id] != result.passed
        )
        decisions.append(
            {
                "submission_id": outcome.item.item.submission_id,
                "student": outcome.student,
                "before_version": before.version,
                "after_version": after.version,
                "before_case_set": before.case_set_version,
                "after_case_set": after.case_set_version,
                "old_decision": before.decision,
                "new_decision": after.decision,
                "decision_changed": before.decision != after.decision,
                "cases_flipped": flipped,
            }
        )
    shifts = gate_shifts(pairs)
    return {
        "regrade": record.run.id,
        "mode": record.run.mode,
        "by": record.by,
        "at": timestamp(record.run.created_at),
        "case_set_version": record.run.case_set_version,
        "submissions": len(decisions),
        "decisions_changed": sum(1 for d in decisions if d["decision_changed"]),
        "decisions": decisions,
        "gates": {
            kind: {gate: shift.as_dict() for gate, shift in gates.items()}
            for kind, gates in shifts.items()
        },
        "gates_moved": sorted(
            f"{kind}:{gate}"
            for kind, gates in shifts.items()
            for gate, shift in gates.items()
            if shift.to_failed or shift.to_passed
        ),
    }
