"""The instructor console's use cases, as plain functions of a database session.

The JSON API (:mod:`grader.server.instructor_api`), the pages
(:mod:`grader.server.instructor_pages`) and the command line call these; they return values
and raise :class:`~grader.exceptions.GraderError` subclasses, and the caller chooses the HTTP
status, the flash message or the exit code. None commits: the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session

from grader.core.casesets import CaseSet
from grader.db import certificates as certificate_rows
from grader.db.results import ResultSummary, current_results, list_gradings, load_report
from grader.db.submissions import get_submission, list_submissions
from grader.db.tables import (
    CertificateDecisionRow,
    CertificateRow,
    GradingRow,
    SubmissionRow,
    UserRow,
)
from grader.db.users import get_student, student_name_of, user_names
from grader.exceptions import (
    CaseSetUnavailable,
    DecisionError,
    NothingToRerun,
    StudentNotFound,
    SubmissionNotFound,
)

from . import regrades
from .decisions import parse_action
from .grading_detail import grading_detail
from .roster import RosterEntry
from .students import DecisionOutcome, find_student, record_decision, roster_entry


def require_case_set(case_set: CaseSet | None, problem: str | None) -> CaseSet:
    """``case_set``, or :class:`CaseSetUnavailable` carrying why it could not be loaded."""
    if case_set is None:
        raise CaseSetUnavailable(f"the case set cannot be loaded: {problem}")
    return case_set


# --------------------------------------------------------------------------------------------
# Case-set standing: the one place "outdated" submissions are counted


@dataclass(frozen=True)
class Standing:
    """Graded submissions and those whose current results come from another case-set version."""

    graded: int
    outdated: list[str]


def standing(*, session: Session, version: str | None) -> Standing:
    """How the current results stand against case-set ``version`` (None: nothing outdated)."""
    results = [result for rows in current_results(session=session).values() for result in rows]
    return Standing(
        graded=len(results),
        outdated=[result.submission_id for result in results if result.outdated(version)],
    )


# --------------------------------------------------------------------------------------------
# Students and decisions


@dataclass(frozen=True)
class StudentRecord:
    """A student's roster line, submissions (each with its current results), trail, certificates."""

    entry: RosterEntry
    submissions: list[tuple[SubmissionRow, ResultSummary | None]]
    trail: list[TrailEntry]
    certificates: Sequence[CertificateRow]


@dataclass(frozen=True)
class TrailEntry:
    """One row of the decision audit trail with the names it refers to."""

    row: CertificateDecisionRow
    student: str | None
    by: str | None


def student_record(
    *, session: Session, name: str, current_version: str | None, audit_failed: bool = False
) -> StudentRecord:
    """Everything the console shows about one student; :class:`StudentNotFound` otherwise."""
    student = find_student(session=session, name=name)
    assert student.id is not None
    entry = roster_entry(
        session=session,
        student=student,
        current_version=current_version,
        audit_failed=audit_failed,
    )
    results = {
        result.submission_id: result
        for result in current_results(session=session, student_id=student.id).get(student.id, [])
    }
    return StudentRecord(
        entry=entry,
        submissions=[
            (row, results.get(row.id))
            for row, _decision in list_submissions(session=session, user_id=student.id)
        ],
        trail=decision_trail(session=session, student_id=student.id),
        certificates=certificate_rows.student_certificates(session=session, student_id=student.id),
    )


def decision_trail(*, session: Session, student_id: int | None = None) -> list[TrailEntry]:
    """The audit trail (of everyone, or one student), oldest first."""
    names = user_names(session=session)
    return [
        TrailEntry(row, names.get(row.student_id), names.get(row.actor_id))
        for row in certificate_rows.decision_rows(session=session, student_id=student_id)
    ]


def student_trail(*, session: Session, name: str | None) -> list[TrailEntry]:
    """The whole trail, or the named student's (:class:`StudentNotFound` for an unknown name)."""
    if name is None:
        return decision_trail(session=session)
    student = get_student(session=session, name=name)
    if student is None:
        raise StudentNotFound(f"no student named {name!r}")
    return decision_trail(session=session, student_id=student.id)


def decide(
    *,
    session: Session,
    actor: UserRow,
    student: object,
    action: object,
    reason: object,
    current_version: str | None,
) -> DecisionOutcome:
    """Validate and record an instructor's decision (raw form or JSON values accepted)."""
    if not isinstance(student, str) or not student:
        raise DecisionError("'student' (a student's name) is required")
    return record_decision(
        session=session,
        actor=actor,
        student_name=student,
        action=parse_action(action),
        reason=reason if isinstance(reason, str) else "",
        current_version=current_version,
    )


# --------------------------------------------------------------------------------------------
# A submission's result sets


@dataclass(frozen=True)
class GradingView:
    """A submission, its result sets, and one of them in full (``detail``) if it has one."""

    submission: SubmissionRow
    student: str | None
    gradings: Sequence[GradingRow]
    grading: GradingRow | None
    detail: dict[str, Any] | None
    regrade: dict[str, Any] | None


def grading_view(
    *, session: Session, submission_id: str, version: int | None, case_set: CaseSet | None
) -> GradingView:
    """Result set ``version`` of a submission (the current one for None), in full."""
    submission = get_submission(session=session, submission_id=submission_id)
    if submission is None:
        raise SubmissionNotFound("no such submission")
    gradings = list_gradings(session=session, submission_id=submission.id)
    wanted = submission.current_grading_id if version is None else None
    grading = next(
        (g for g in gradings if (g.id == wanted if version is None else g.version == version)),
        None,
    )
    if version is not None and grading is None:
        raise SubmissionNotFound(f"submission {submission_id} has no result set v{version}")
    detail = notes = None
    if grading is not None and grading.id is not None:
        report = load_report(session=session, grading_id=grading.id)
        notes = regrades.regrade_notes(session=session, grading_id=grading.id)
        if report is not None:
            detail = grading_detail(
                report,
                cases=case_set.by_id() if case_set else {},
                current_version=case_set.version if case_set else None,
            )
    return GradingView(
        submission=submission,
        student=student_name_of(session=session, submission=submission),
        gradings=gradings,
        grading=grading,
        detail=detail,
        regrade=notes,
    )


# --------------------------------------------------------------------------------------------
# Regrades


def plan_rerun(
    *,
    session: Session,
    case_set: CaseSet,
    actor: UserRow,
    submission_ids: list[str] | None,
    outdated: bool,
    archive_exists: Callable[[str], bool],
) -> regrades.RerunPlan:
    """Re-queue the named submissions, or with ``outdated`` every one graded on another
    case-set version; the caller enqueues the plan's jobs after committing."""
    if outdated:
        submission_ids = standing(session=session, version=case_set.version).outdated
    if not submission_ids:
        raise NothingToRerun('name the submissions to rerun, or send "outdated": true')
    return regrades.start_rerun(
        session=session,
        actor=actor,
        case_set_version=case_set.version,
        submission_ids=submission_ids,
        archive_exists=archive_exists,
    )
