"""Regrade runs and items, and the bulk reads and writes a regrade from answers needs.

Every function takes the session as a keyword and never commits (the caller owns the
transaction). What a regrade decides — the new results of each submission — is computed in
:mod:`grader.instructor.regrades`; here it is read and written in few round trips (chunked
``IN`` lists, one batched ``INSERT`` per table, one ``executemany`` ``UPDATE``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from grader.core.models import GradeReport

from .results import CHUNK, eval_record_values
from .tables import (
    EvalRecordRow,
    GradingRow,
    RegradeItemRow,
    RegradeRunRow,
    SubmissionRow,
    SubmissionStatus,
)


def create_run(
    *, session: Session, mode: str, actor_id: int, case_set_version: str, now: datetime
) -> RegradeRunRow:
    """Record a regrade run (flushed, so it has its id)."""
    run = RegradeRunRow(
        mode=mode, actor_id=actor_id, created_at=now, case_set_version=case_set_version
    )
    session.add(run)
    session.flush()
    return run


def save_run(*, session: Session, run: RegradeRunRow) -> None:
    session.add(run)
    session.flush()


def graded_submissions(
    *, session: Session, submission_ids: Sequence[str] | None, lock: bool
) -> list[tuple[SubmissionRow, GradingRow]]:
    """Graded submissions (all, or the named ones) with their current result set, oldest first.

    ``lock``: on PostgreSQL no worker or other regrade may move these pointers meanwhile.
    """
    query = (
        select(SubmissionRow, GradingRow)
        .join(GradingRow, col(GradingRow.id) == col(SubmissionRow.current_grading_id))
        .where(col(SubmissionRow.status) == SubmissionStatus.GRADED.value)
        .order_by(col(SubmissionRow.created_at), col(SubmissionRow.id))
    )
    if submission_ids is not None:
        query = query.where(col(SubmissionRow.id).in_(list(submission_ids)))
    if lock:
        query = query.with_for_update(of=SubmissionRow)
    return [(row[0], row[1]) for row in session.exec(query).all()]


@dataclass(frozen=True)
class StoredCase:
    """What an eval record keeps of one case, read as plain columns (no ORM object)."""

    case_id: str
    answer: dict[str, Any] | None
    error_kind: str | None
    seconds: float | None
    passed: bool
    #: The case's model-gateway calls as stored (null without a gateway).
    model_calls: list[dict[str, Any]] | None = None


def stored_cases(*, session: Session, grading_ids: Sequence[int]) -> dict[int, list[StoredCase]]:
    """The eval records of each result set, in their original order."""
    grouped: dict[int, list[StoredCase]] = {}
    for start in range(0, len(grading_ids), CHUNK):
        chunk = list(grading_ids[start : start + CHUNK])
        query = (
            sa.select(
                col(EvalRecordRow.grading_id),
                col(EvalRecordRow.case_id),
                col(EvalRecordRow.answer),
                col(EvalRecordRow.error_kind),
                col(EvalRecordRow.seconds),
                col(EvalRecordRow.passed),
                col(EvalRecordRow.model_calls),
            )
            .where(col(EvalRecordRow.grading_id).in_(chunk))
            .order_by(col(EvalRecordRow.grading_id), col(EvalRecordRow.position))
        )
        for grading_id, *values in session.connection().execute(query):
            grouped.setdefault(grading_id, []).append(StoredCase(*values))
    return grouped


def latest_versions(*, session: Session, submission_ids: Sequence[str]) -> dict[str, int]:
    """The highest result-set version number of each submission."""
    found: dict[str, int] = {}
    for start in range(0, len(submission_ids), CHUNK):
        chunk = list(submission_ids[start : start + CHUNK])
        query = (
            sa.select(col(GradingRow.submission_id), sa.func.max(col(GradingRow.version)))
            .where(col(GradingRow.submission_id).in_(chunk))
            .group_by(col(GradingRow.submission_id))
        )
        for submission_id, version in session.connection().execute(query):
            found[str(submission_id)] = int(version)
    return found


@dataclass(frozen=True)
class RegradedSubmission:
    """One submission's new result set from a regrade from answers, ready to be written."""

    submission_id: str
    #: The result set current before (kept as an earlier version).
    old_grading_id: int
    #: The new result set (not yet added to the session).
    grading: GradingRow
    report: GradeReport
    #: The stored answer JSON by case id: written again exactly as it was.
    answers: Mapping[str, dict[str, Any] | None] = field(default_factory=dict)
    old_decision: str | None = None
    dropped: Sequence[str] = ()
    missing: Sequence[str] = ()


def write_regrade(*, session: Session, run_id: int, regraded: Sequence[RegradedSubmission]) -> None:
    """Insert the new result sets and eval records, move the pointers, record the items."""
    session.add_all(item.grading for item in regraded)
    session.flush()  # one batched INSERT … RETURNING for the new ids
    record_rows: list[dict[str, Any]] = []
    for item in regraded:
        for position, case in enumerate(item.report.results):
            values = eval_record_values(case, position=position, grading=item.grading)
            # The answer is unchanged: its stored JSON is written again as it was.
            values["answer"] = item.answers.get(case.case_id) if case.answer else None
            record_rows.append(values)
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
            {"sid": item.submission_id, "old_id": item.old_grading_id, "new_id": item.grading.id}
            for item in regraded
        ],
    )
    items = RegradeItemRow.__table__  # type: ignore[attr-defined]
    session.exec(
        sa.insert(items),
        params=[
            {
                "run_id": run_id,
                "submission_id": item.submission_id,
                "from_grading_id": item.old_grading_id,
                "to_grading_id": item.grading.id,
                "old_decision": item.old_decision,
                "new_decision": item.grading.decision,
                "dropped_cases": list(item.dropped),
                "missing_cases": list(item.missing),
            }
            for item in regraded
        ],
    )
    session.flush()


def add_rerun_item(*, session: Session, run_id: int, submission: SubmissionRow) -> None:
    """Note a submission re-queued by a rerun, with the result set it may replace."""
    previous = (
        session.get(GradingRow, submission.current_grading_id)
        if submission.current_grading_id is not None
        else None
    )
    session.add(
        RegradeItemRow(
            run_id=run_id,
            submission_id=submission.id,
            from_grading_id=submission.current_grading_id,
            old_decision=previous.decision if previous else None,
        )
    )


def list_runs(*, session: Session, limit: int = 50) -> Sequence[RegradeRunRow]:
    """The newest regrade runs first."""
    return session.exec(
        select(RegradeRunRow).order_by(col(RegradeRunRow.id).desc()).limit(limit)
    ).all()


def get_run(*, session: Session, run_id: int) -> RegradeRunRow | None:
    return session.get(RegradeRunRow, run_id)


@dataclass(frozen=True)
class RunItem:
    """One item of a run with its submission and the result sets it went from and to."""

    item: RegradeItemRow
    submission: SubmissionRow
    before: GradingRow | None
    after: GradingRow | None


def run_items(*, session: Session, run_id: int) -> list[RunItem]:
    """A run's items; a rerun's ``after`` is the result set the worker recorded (if yet)."""
    found = session.exec(
        select(RegradeItemRow, SubmissionRow)
        .join(SubmissionRow, col(SubmissionRow.id) == col(RegradeItemRow.submission_id))
        .where(RegradeItemRow.run_id == run_id)
        .order_by(col(RegradeItemRow.id))
    ).all()
    items = []
    for item, submission in found:
        before = session.get(GradingRow, item.from_grading_id) if item.from_grading_id else None
        after = (
            _rerun_result(session, submission, before)
            if item.to_grading_id is None
            else session.get(GradingRow, item.to_grading_id)
        )
        items.append(RunItem(item, submission, before, after))
    return items


def _rerun_result(
    session: Session, submission: SubmissionRow, before: GradingRow | None
) -> GradingRow | None:
    """The result set a rerun produced: the first one newer than the one it replaced."""
    return session.exec(
        select(GradingRow)
        .where(
            GradingRow.submission_id == submission.id,
            col(GradingRow.version) > (before.version if before else 0),
        )
        .order_by(col(GradingRow.version))
    ).first()


def item_producing(
    *, session: Session, grading_id: int
) -> tuple[RegradeItemRow, GradingRow | None] | None:
    """The regrade item that produced result set ``grading_id``, with the one it replaced."""
    item = session.exec(
        select(RegradeItemRow).where(RegradeItemRow.to_grading_id == grading_id)
    ).first()
    if item is None:
        return None
    previous = session.get(GradingRow, item.from_grading_id) if item.from_grading_id else None
    return item, previous
