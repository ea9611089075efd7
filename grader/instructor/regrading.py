"""Regrades: from recorded answers (in one transaction) or by rerunning agents (enqueued).

Neither overwrites anything: each regraded submission gets a new result set (the next version
number; trigger ``regrade`` from answers, whatever the worker records for a rerun) and its
current pointer moves to it; earlier result sets and their eval records stay as they were. Every regrade is recorded (``regrade_runs``/``regrade_items``)
with what it changed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from grader.core.casesets import CaseSet
from grader.core.models import Decision, GradeReport, Versions
from grader.core.views import student_view
from grader.db import repository as repo
from grader.db.instructor import RegradeItemRow, RegradeRunRow
from grader.db.tables import (
    EvalRecordRow,
    GradingRow,
    GradingTrigger,
    SubmissionRow,
    SubmissionStatus,
    UserRow,
    as_utc,
    utcnow,
)

from .regrade import RecordedCase, regrade_recorded
from .repository import rows


class RegradeMode(StrEnum):
    ANSWERS = "answers"
    RERUN = "rerun"


@dataclass(frozen=True)
class SubmissionChange:
    """What a regrade from answers did (or, in a preview, would do) to one submission."""

    submission_id: str
    student: str
    old_version: int
    new_version: int | None
    old_decision: Decision
    new_decision: Decision
    old_passed: int
    new_passed: int
    total: int
    dropped: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return self.old_decision is not self.new_decision

    def as_dict(self) -> dict[str, Any]:
        return {
            "submission_id": self.submission_id,
            "student": self.student,
            "old_version": self.old_version,
            "new_version": self.new_version,
            "old_decision": self.old_decision.value,
            "new_decision": self.new_decision.value,
            "decision_changed": self.changed,
            "old_passed": self.old_passed,
            "new_passed": self.new_passed,
            "total": self.total,
            "dropped_cases": list(self.dropped),
            "missing_cases": list(self.missing),
        }


@dataclass
class RegradeResult:
    run_id: int | None
    case_set_version: str
    dry_run: bool
    changes: list[SubmissionChange] = field(default_factory=list)
    #: Submissions already graded on this case-set version (left alone).
    up_to_date: int = 0
    seconds: float = 0.0

    @property
    def decisions_changed(self) -> list[SubmissionChange]:
        return [change for change in self.changes if change.changed]

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "mode": RegradeMode.ANSWERS.value,
            "dry_run": self.dry_run,
            "case_set_version": self.case_set_version,
            "regraded": len(self.changes),
            "up_to_date": self.up_to_date,
            "decisions_changed": len(self.decisions_changed),
            "seconds": round(self.seconds, 3),
            "changes": [change.as_dict() for change in self.changes],
        }


def _selected_submissions(
    session: Session, submission_ids: Sequence[str] | None, *, lock: bool
) -> list[tuple[SubmissionRow, GradingRow]]:
    query = (
        select(SubmissionRow, GradingRow)
        .join(GradingRow, col(GradingRow.id) == col(SubmissionRow.current_grading_id))
        .where(col(SubmissionRow.status) == SubmissionStatus.GRADED.value)
        .order_by(col(SubmissionRow.created_at), col(SubmissionRow.id))
    )
    if submission_ids is not None:
        query = query.where(col(SubmissionRow.id).in_(list(submission_ids)))
    if lock:  # PostgreSQL: no worker or other regrade may move these pointers meanwhile
        query = query.with_for_update(of=SubmissionRow)
    return [(row[0], row[1]) for row in session.exec(query).all()]


@dataclass(frozen=True)
class _Recorded:
    """The stored cases of one result set: what a regrade needs, and the answers' JSON."""

    cases: list[RecordedCase] = field(default_factory=list)
    answers: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    passed: int = 0


def _records_by_grading(session: Session, grading_ids: Sequence[int]) -> dict[int, _Recorded]:
    """The recorded cases of each result set, read as plain columns (no ORM objects)."""
    grouped: dict[int, _Recorded] = {}
    passed: dict[int, int] = {}
    for start in range(0, len(grading_ids), 500):
        chunk = list(grading_ids[start : start + 500])
        for grading_id, case_id, answer, error_kind, seconds, was_passed in rows(
            session,
            sa.select(
                col(EvalRecordRow.grading_id),
                col(EvalRecordRow.case_id),
                col(EvalRecordRow.answer),
                col(EvalRecordRow.error_kind),
                col(EvalRecordRow.seconds),
                col(EvalRecordRow.passed),
            )
            .where(col(EvalRecordRow.grading_id).in_(chunk))
            .order_by(col(EvalRecordRow.grading_id), col(EvalRecordRow.position)),
        ):
            recorded = grouped.setdefault(grading_id, _Recorded())
            recorded.cases.append(RecordedCase.from_stored(case_id, answer, error_kind, seconds))
            recorded.answers[case_id] = answer
            passed[grading_id] = passed.get(grading_id, 0) + bool(was_passed)
    return {
        grading_id: _Recorded(recorded.cases, recorded.answers, passed.get(grading_id, 0))
        for grading_id, recorded in grouped.items()
    }


def _versions_of(grading: GradingRow) -> Versions:
    return Versions(
        case_set=grading.case_set_version,
        cases=grading.cases_version,
        policy=grading.policy_version,
        corpus=grading.corpus_version,
        grader=grading.grader_version,
        sandbox=grading.sandbox,
        sandbox_image=grading.sandbox_image,
        package_sha256=grading.package_sha256,
    )


def _latest_versions(session: Session, submission_ids: Sequence[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for start in range(0, len(submission_ids), 500):
        chunk = list(submission_ids[start : start + 500])
        for submission_id, version in rows(
            session,
            sa.select(col(GradingRow.submission_id), sa.func.max(col(GradingRow.version)))
            .where(col(GradingRow.submission_id).in_(chunk))
            .group_by(col(GradingRow.submission_id)),
        ):
            found[str(submission_id)] = int(version)
    return found


def _names(session: Session) -> dict[int, str]:
    found = rows(session, sa.select(col(UserRow.id), col(UserRow.name)))
    return {int(user_id): str(name) for user_id, name in found}


def regrade_from_answers(
    *,
    session: Session,
    case_set: CaseSet,
    actor: UserRow,
    submission_ids: Sequence[str] | None = None,
    include_up_to_date: bool = False,
    dry_run: bool = False,
    now: datetime | None = None,
) -> RegradeResult:
    """Re-apply ``case_set``'s gates and policy to the recorded answers of graded submissions.

    By default only submissions whose current result set was graded on another case-set
    version are regraded (the others would not change). With ``dry_run`` nothing is written
    and the result previews the changes.
    """
    started = time.perf_counter()
    now = now or utcnow()
    assert actor.id is not None
    run: RegradeRunRow | None = None
    if not dry_run:
        # Written first: on SQLite this takes the write lock before anything is read.
        run = RegradeRunRow(
            mode=RegradeMode.ANSWERS.value,
            actor_id=actor.id,
            created_at=now,
            case_set_version=case_set.version,
        )
        session.add(run)
        session.flush()
    selected = _selected_submissions(session, submission_ids, lock=not dry_run)
    up_to_date = 0
    todo: list[tuple[SubmissionRow, GradingRow]] = []
    for submission, grading in selected:
        if grading.case_set_version == case_set.version and not include_up_to_date:
            up_to_date += 1
        else:
            todo.append((submission, grading))
    records = _records_by_grading(session, [grading.id for _, grading in todo if grading.id])
    latest = _latest_versions(session, [submission.id for submission, _ in todo])
    names = _names(session)
    feedback = case_set.policy.feedback
    result = RegradeResult(
        run_id=run.id if run else None, case_set_version=case_set.version, dry_run=dry_run
    )
    new_gradings: list[GradingRow] = []
    new_reports: list[GradeReport] = []
    stored_answers: list[dict[str, dict[str, Any] | None]] = []
    for submission, grading in todo:
        assert grading.id is not None
        recorded = records.get(grading.id, _Recorded())
        regraded = regrade_recorded(
            recorded.cases, case_set, versions=_versions_of(grading), restarts=grading.restarts
        )
        report = regraded.report
        new_version = latest.get(submission.id, grading.version) + 1
        result.changes.append(
            SubmissionChange(
                submission_id=submission.id,
                student=names.get(submission.user_id, ""),
                old_version=grading.version,
                new_version=None if dry_run else new_version,
                old_decision=Decision(grading.decision),
                new_decision=regraded.decision,
                old_passed=recorded.passed,
                new_passed=sum(r.passed for r in report.results),
                total=len(report.results),
                dropped=regraded.dropped,
                missing=regraded.missing,
            )
        )
        if dry_run:
            continue
        new_gradings.append(
            GradingRow(
                submission_id=submission.id,
                version=new_version,
                trigger=GradingTrigger.REGRADE.value,
                created_at=now,
                decision=report.decision.decision.value,
                reasons=list(report.decision.reasons),
                student_view=student_view(report, feedback=feedback),
                retrieval=report.retrieval,
                restarts=report.restarts,
                seconds=0.0,
                worker=f"regrade:{run.id if run else ''}",
                **repo.version_columns(report.versions),
            )
        )
        new_reports.append(report)
        stored_answers.append(recorded.answers)
    if run is not None and new_gradings:
        _write(session, run, todo, new_gradings, new_reports, stored_answers, result.changes)
    result.up_to_date = up_to_date
    result.seconds = time.perf_counter() - started
    if run is not None:
        run.submissions = len(result.changes)
        run.changed = len(result.decisions_changed)
        run.seconds = round(result.seconds, 4)
        session.add(run)
        session.flush()
    return result


def _write(
    session: Session,
    run: RegradeRunRow,
    todo: Sequence[tuple[SubmissionRow, GradingRow]],
    gradings: Sequence[GradingRow],
    reports: Sequence[GradeReport],
    answers: Sequence[dict[str, dict[str, Any] | None]],
    changes: Sequence[SubmissionChange],
) -> None:
    """Insert the new result sets and eval records, move the pointers, record the items."""
    session.add_all(gradings)
    session.flush()  # one batched INSERT … RETURNING for the new ids
    record_rows: list[dict[str, Any]] = []
    for grading, report, stored in zip(gradings, reports, answers, strict=True):
        versions = repo.version_columns(report.versions)
        for position, case in enumerate(report.results):
            record_rows.append(
                {
                    "grading_id": grading.id,
                    "submission_id": grading.submission_id,
                    "position": position,
                    "case_id": case.case_id,
                    "kind": case.kind.value,
                    "safety": case.safety,
                    "passed": case.passed,
                    # The answer is unchanged: its stored JSON is written again as it was.
                    "answer": stored.get(case.case_id) if case.answer else None,
                    "gates": {gate.value: passed for gate, passed in case.gates.items()},
                    "error_kind": case.error.value if case.error else None,
                    "safety_failures": [gate.value for gate in case.safety_failures],
                    "diagnosis": case.diagnosis.value if case.diagnosis else None,
                    "seconds": case.seconds,
                    **versions,
                }
            )
    table = EvalRecordRow.__table__  # type: ignore[attr-defined]
    for start in range(0, len(record_rows), 5000):
        session.exec(sa.insert(table), params=record_rows[start : start + 5000])
    submissions = SubmissionRow.__table__  # type: ignore[attr-defined]
    session.exec(
        sa.update(submissions)
        .where(
            submissions.c.id == sa.bindparam("sid"),
            submissions.c.current_grading_id == sa.bindparam("old_id"),
        )
        .values(current_grading_id=sa.bindparam("new_id")),
        params=[
            {"sid": submission.id, "old_id": old.id, "new_id": new.id}
            for (submission, old), new in zip(todo, gradings, strict=True)
        ],
    )
    items = RegradeItemRow.__table__  # type: ignore[attr-defined]
    assert run.id is not None
    session.exec(
        sa.insert(items),
        params=[
            {
                "run_id": run.id,
                "submission_id": submission.id,
                "from_grading_id": old.id,
                "to_grading_id": new.id,
                "old_decision": change.old_decision.value,
                "new_decision": change.new_decision.value,
                "dropped_cases": list(change.dropped),
                "missing_cases": list(change.missing),
            }
            for (submission, old), new, change in zip(todo, gradings, changes, strict=True)
        ],
    )
    session.flush()


# --------------------------------------------------------------------------------------------
# Rerunning agents


@dataclass(frozen=True)
class RerunPlan:
    """A recorded rerun: the submissions re-queued, each with the job id to enqueue it under."""

    run_id: int
    jobs: tuple[tuple[str, str], ...]
    skipped: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "mode": RegradeMode.RERUN.value,
            "queued": [submission_id for submission_id, _ in self.jobs],
            "skipped": list(self.skipped),
        }


def start_rerun(
    *,
    session: Session,
    actor: UserRow,
    case_set_version: str,
    submission_ids: Sequence[str],
    now: datetime | None = None,
) -> RerunPlan:
    """Re-queue graded submissions for a fresh run of their agents (enqueue after commit).

    A submission that is not graded (queued, running or failed) is skipped. The worker records
    the new result set as the next version and moves the current pointer; until then the
    previous results stay current.
    """
    assert actor.id is not None
    run = RegradeRunRow(
        mode=RegradeMode.RERUN.value,
        actor_id=actor.id,
        created_at=now or utcnow(),
        case_set_version=case_set_version,
    )
    session.add(run)
    session.flush()
    assert run.id is not None
    jobs: list[tuple[str, str]] = []
    skipped: list[str] = []
    for submission_id in dict.fromkeys(submission_ids):
        submission = repo.get_submission(session=session, submission_id=submission_id)
        if submission is None or submission.status != SubmissionStatus.GRADED.value:
            skipped.append(submission_id)
            continue
        job_id = repo.new_id()
        moved = repo.requeue(
            session=session,
            submission_id=submission.id,
            expected_status=SubmissionStatus.GRADED,
            old_job_id=submission.job_id,
            new_job_id=job_id,
        )
        if not moved:
            skipped.append(submission_id)
            continue
        session.add(
            RegradeItemRow(
                run_id=run.id,
                submission_id=submission.id,
                from_grading_id=submission.current_grading_id,
                old_decision=_decision_of(session, submission.current_grading_id),
            )
        )
        jobs.append((submission.id, job_id))
    run.submissions = len(jobs)
    session.add(run)
    session.flush()
    return RerunPlan(run_id=run.id, jobs=tuple(jobs), skipped=tuple(skipped))


def _decision_of(session: Session, grading_id: int | None) -> str | None:
    if grading_id is None:
        return None
    grading = session.get(GradingRow, grading_id)
    return grading.decision if grading else None


# --------------------------------------------------------------------------------------------
# History


def list_runs(*, session: Session, limit: int = 50) -> list[dict[str, Any]]:
    names = _names(session)
    runs = session.exec(
        select(RegradeRunRow).order_by(col(RegradeRunRow.id).desc()).limit(limit)
    ).all()
    return [_run_dict(run, names) for run in runs]


def _run_dict(run: RegradeRunRow, names: dict[int, str]) -> dict[str, Any]:
    created = as_utc(run.created_at)
    return {
        "id": run.id,
        "mode": run.mode,
        "by": names.get(run.actor_id),
        "at": created.isoformat() if created else None,
        "case_set_version": run.case_set_version,
        "submissions": run.submissions,
        "decisions_changed": run.changed,
        "seconds": run.seconds,
    }


def get_run(*, session: Session, run_id: int) -> dict[str, Any] | None:
    """A regrade with its items; a rerun's items show the result set the worker recorded."""
    run = session.get(RegradeRunRow, run_id)
    if run is None:
        return None
    names = _names(session)
    items = session.exec(
        select(RegradeItemRow, SubmissionRow)
        .join(SubmissionRow, col(SubmissionRow.id) == col(RegradeItemRow.submission_id))
        .where(RegradeItemRow.run_id == run_id)
        .order_by(col(RegradeItemRow.id))
    ).all()
    resolved = []
    for item, submission in items:
        to_grading = (
            _rerun_result(session, item, submission)
            if item.to_grading_id is None
            else session.get(GradingRow, item.to_grading_id)
        )
        from_grading = (
            session.get(GradingRow, item.from_grading_id) if item.from_grading_id else None
        )
        resolved.append((item, submission, from_grading, to_grading))
    passed = _pass_counts(
        session,
        [
            grading.id
            for _, _, *gradings in resolved
            for grading in gradings
            if grading is not None and grading.id is not None
        ],
    )

    def counts(grading: GradingRow | None) -> tuple[int, int] | None:
        if grading is None or grading.id is None:
            return None
        return passed.get(grading.id, (0, 0))

    entries = []
    for item, submission, from_grading, to_grading in resolved:
        new_decision = item.new_decision or (to_grading.decision if to_grading else None)
        old_counts, new_counts = counts(from_grading), counts(to_grading)
        entries.append(
            {
                "submission_id": item.submission_id,
                "student": names.get(submission.user_id),
                "status": submission.status,
                "old_version": from_grading.version if from_grading else None,
                "new_version": to_grading.version if to_grading else None,
                "old_decision": item.old_decision,
                "new_decision": new_decision,
                "decision_changed": new_decision is not None and new_decision != item.old_decision,
                "old_passed": old_counts[0] if old_counts else None,
                "new_passed": new_counts[0] if new_counts else None,
                "total": new_counts[1] if new_counts else None,
                "dropped_cases": item.dropped_cases,
                "missing_cases": item.missing_cases,
            }
        )
    return {**_run_dict(run, names), "items": entries}


def _pass_counts(session: Session, grading_ids: Sequence[int]) -> dict[int, tuple[int, int]]:
    """Cases passed and total per result set."""
    found: dict[int, tuple[int, int]] = {}
    for start in range(0, len(grading_ids), 500):
        chunk = list(grading_ids[start : start + 500])
        for grading_id, passed, total in rows(
            session,
            sa.select(
                col(EvalRecordRow.grading_id),
                sa.func.sum(sa.case((col(EvalRecordRow.passed), 1), else_=0)),
                sa.func.count(),
            )
            .where(col(EvalRecordRow.grading_id).in_(chunk))
            .group_by(col(EvalRecordRow.grading_id)),
        ):
            found[int(grading_id)] = (int(passed or 0), int(total))
    return found


def _rerun_result(
    session: Session, item: RegradeItemRow, submission: SubmissionRow
) -> GradingRow | None:
    """The result set a rerun produced: the first one newer than the one it replaced."""
    from_version = 0
    if item.from_grading_id is not None:
        previous = session.get(GradingRow, item.from_grading_id)
        from_version = previous.version if previous else 0
    return session.exec(
        select(GradingRow)
        .where(
            GradingRow.submission_id == submission.id,
            col(GradingRow.version) > from_version,
        )
        .order_by(col(GradingRow.version))
    ).first()


def regrade_notes(*, session: Session, grading_id: int) -> dict[str, Any] | None:
    """How a result set came from a regrade from answers (run, replaced version, notes)."""
    item = session.exec(
        select(RegradeItemRow).where(RegradeItemRow.to_grading_id == grading_id)
    ).first()
    if item is None:
        return None
    previous = session.get(GradingRow, item.from_grading_id) if item.from_grading_id else None
    return {
        "run_id": item.run_id,
        "from_version": previous.version if previous else None,
        "dropped_cases": item.dropped_cases,
        "missing_cases": item.missing_cases,
    }
