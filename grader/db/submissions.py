"""Submissions: intake under the daily limits, and the grading lifecycle.

State changes of a submission are compare-and-set updates guarded by its ``job_id`` (a fencing
token): a worker whose lease was taken over — because it stalled and the reconciler re-queued
the submission — can no longer claim, heartbeat, fail or record results for it, so each
submission ends with exactly one current result set whatever the timing.

Every function takes the session as a keyword and never commits (the caller owns the
transaction).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from grader.core.models import GradeReport

from .results import add_grading
from .tables import (
    FailureKind,
    GradingRow,
    GradingTrigger,
    SubmissionRow,
    SubmissionStatus,
    UserRow,
    utcnow,
)
from .usage import WINDOW, LimitReached, UploadLimits, check_upload, usage
from .users import lock_user

#: The daily quota is a rolling window of this length.
QUOTA_WINDOW = WINDOW


# --------------------------------------------------------------------------------------------
# Intake and quota


def new_id() -> str:
    return uuid.uuid4().hex


def quota_used(*, session: Session, user_id: int, now: datetime) -> tuple[int, datetime | None]:
    """Submissions counting toward the quota in the window ending ``now``, and the oldest one's
    time (statuses queued, running, graded; failed never counts)."""
    used = usage(session=session, user_id=user_id, now=now)
    return used.submissions, used.oldest_submission


def create_submission(
    *,
    session: Session,
    user: UserRow,
    filename: str,
    agent_name: str,
    package_sha256: str,
    package_bytes: int,
    daily_limit: int | None,
    storage_budget: int | None = None,
    failed_start_limit: int | None = None,
    now: datetime | None = None,
) -> SubmissionRow | LimitReached:
    """Insert a ``queued`` submission, or return the :class:`LimitReached` it would break.

    The user's row is locked first (``UPDATE`` on it: a row lock on PostgreSQL, the write lock
    on SQLite), so two concurrent uploads by one student cannot both take the last slot of the
    daily quota, the storage budget or the failed-start cap.
    """
    now = now or utcnow()
    assert user.id is not None
    lock_user(session=session, user_id=user.id)
    limits = UploadLimits(
        submissions=daily_limit, storage_bytes=storage_budget, failed_starts=failed_start_limit
    )
    reached = check_upload(
        session=session, user_id=user.id, limits=limits, upload_bytes=package_bytes, now=now
    )
    if reached is not None:
        return reached
    submission = SubmissionRow(
        id=new_id(),
        user_id=user.id,
        status=SubmissionStatus.QUEUED.value,
        filename=filename,
        agent_name=agent_name,
        package_sha256=package_sha256,
        package_bytes=package_bytes,
        created_at=now,
        job_id=new_id(),
    )
    session.add(submission)
    session.flush()
    return submission


def get_submission(*, session: Session, submission_id: str) -> SubmissionRow | None:
    if len(submission_id) > 64:
        return None
    return session.get(SubmissionRow, submission_id)


def get_submission_with_grading(
    *, session: Session, submission_id: str
) -> tuple[SubmissionRow, GradingRow | None] | None:
    """A submission and its current result set, in one query (the status-poll path)."""
    if len(submission_id) > 64:
        return None
    row = session.exec(
        select(SubmissionRow, GradingRow)
        .join(
            GradingRow,
            col(GradingRow.id) == col(SubmissionRow.current_grading_id),
            isouter=True,
        )
        .where(SubmissionRow.id == submission_id)
    ).first()
    return None if row is None else (row[0], row[1])


def list_submissions(
    *, session: Session, user_id: int, limit: int = 200
) -> Sequence[tuple[SubmissionRow, str | None]]:
    """A user's submissions, newest first, each with its current decision (or None)."""
    rows = session.exec(
        select(SubmissionRow, GradingRow.decision)
        .join(
            GradingRow,
            col(GradingRow.id) == col(SubmissionRow.current_grading_id),
            isouter=True,
        )
        .where(SubmissionRow.user_id == user_id)
        .order_by(col(SubmissionRow.created_at).desc(), col(SubmissionRow.id))
        .limit(limit)
    ).all()
    return [(row[0], row[1]) for row in rows]


# --------------------------------------------------------------------------------------------
# Grading lifecycle (compare-and-set on status and job id)


def compare_and_set(
    session: Session, submission_id: str, *, where: Sequence[Any], values: dict[str, Any]
) -> bool:
    result = session.exec(
        sa.update(SubmissionRow)
        .where(col(SubmissionRow.id) == submission_id, *where)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)


def leased_to(job_id: str) -> list[Any]:
    """Conditions: the submission is running under ``job_id``'s lease."""
    return [
        col(SubmissionRow.status) == SubmissionStatus.RUNNING.value,
        col(SubmissionRow.job_id) == job_id,
    ]


def claim_submission(
    *, session: Session, submission_id: str, job_id: str, worker: str, now: datetime | None = None
) -> bool:
    """``queued`` → ``running`` for the job that holds the lease; False if anything else."""
    now = now or utcnow()
    return compare_and_set(
        session,
        submission_id,
        where=[
            col(SubmissionRow.status) == SubmissionStatus.QUEUED.value,
            col(SubmissionRow.job_id) == job_id,
        ],
        values={
            "status": SubmissionStatus.RUNNING.value,
            "started_at": now,
            "heartbeat_at": now,
            "attempts": SubmissionRow.attempts + 1,
            "worker": worker,
        },
    )


def heartbeat(
    *, session: Session, submission_id: str, job_id: str, now: datetime | None = None
) -> bool:
    """Refresh the lease; False when this job no longer holds it."""
    return compare_and_set(
        session,
        submission_id,
        where=leased_to(job_id),
        values={"heartbeat_at": now or utcnow()},
    )


def mark_failed(
    *,
    session: Session,
    submission_id: str,
    job_id: str | None,
    kind: FailureKind,
    reason: str,
    now: datetime | None = None,
) -> bool:
    """End a submission as ``failed`` with a student-safe one-line reason.

    With a ``job_id`` only a running submission leased to that job is changed; without one
    (the reconciler giving up) any queued or running one is.
    """
    where: list[Any] = [
        col(SubmissionRow.status).in_(
            [SubmissionStatus.RUNNING.value]
            if job_id is not None
            else [SubmissionStatus.QUEUED.value, SubmissionStatus.RUNNING.value]
        )
    ]
    if job_id is not None:
        where.append(col(SubmissionRow.job_id) == job_id)
    return compare_and_set(
        session,
        submission_id,
        where=where,
        values={
            "status": SubmissionStatus.FAILED.value,
            "failure_kind": kind.value,
            "failure_reason": " ".join(reason.split())[:500],
            "finished_at": now or utcnow(),
        },
    )


def keep_earlier_results(*, session: Session, submission_id: str, job_id: str) -> bool:
    """A rerun that cannot run (its archive was collected): back to ``graded`` with the result
    set that was current before, if ``job_id`` still holds the lease and there is one."""
    return compare_and_set(
        session,
        submission_id,
        where=[
            *leased_to(job_id),
            col(SubmissionRow.current_grading_id).is_not(None),
        ],
        values={"status": SubmissionStatus.GRADED.value},
    )


def requeue(
    *,
    session: Session,
    submission_id: str,
    expected_status: SubmissionStatus,
    old_job_id: str | None,
    new_job_id: str,
) -> bool:
    """Hand the submission to a new job (``queued``), if it is still as the caller saw it."""
    where: list[Any] = [col(SubmissionRow.status) == expected_status.value]
    where.append(
        col(SubmissionRow.job_id).is_(None)
        if old_job_id is None
        else col(SubmissionRow.job_id) == old_job_id
    )
    return compare_and_set(
        session,
        submission_id,
        where=where,
        values={
            "status": SubmissionStatus.QUEUED.value,
            "job_id": new_job_id,
            "started_at": None,
            "heartbeat_at": None,
        },
    )


def queued_submissions(*, session: Session, older_than: datetime) -> Sequence[SubmissionRow]:
    return session.exec(
        select(SubmissionRow)
        .where(
            SubmissionRow.status == SubmissionStatus.QUEUED.value,
            col(SubmissionRow.created_at) < older_than,
        )
        .order_by(col(SubmissionRow.created_at))
    ).all()


def stale_running_submissions(
    *, session: Session, heartbeat_before: datetime
) -> Sequence[SubmissionRow]:
    """Running submissions whose lease has not been refreshed since ``heartbeat_before``."""
    return session.exec(
        select(SubmissionRow)
        .where(
            SubmissionRow.status == SubmissionStatus.RUNNING.value,
            sa.or_(
                col(SubmissionRow.heartbeat_at).is_(None),
                col(SubmissionRow.heartbeat_at) < heartbeat_before,
            ),
        )
        .order_by(col(SubmissionRow.created_at))
    ).all()


def submission_counts(*, session: Session, student_id: int | None = None) -> dict[int, int]:
    """How many submissions each student (or one) uploaded, by user id."""
    query = sa.select(col(SubmissionRow.user_id), sa.func.count()).group_by(
        col(SubmissionRow.user_id)
    )
    if student_id is not None:
        query = query.where(col(SubmissionRow.user_id) == student_id)
    return {int(uid): int(n) for uid, n in session.connection().execute(query)}


def record_grading(
    *,
    session: Session,
    submission_id: str,
    job_id: str,
    report: GradeReport,
    student_view: dict[str, Any],
    seconds: float,
    worker: str | None = None,
    now: datetime | None = None,
) -> GradingRow | None:
    """Write a worker's results and mark the submission ``graded`` — or nothing.

    Returns None (and writes nothing the caller will commit) when ``job_id`` no longer holds
    the submission's lease; the caller must then roll back.
    """
    now = now or utcnow()
    # A rerun (instructor regrade) finds the earlier result set still current.
    earlier = session.get(SubmissionRow, submission_id)
    trigger = (
        GradingTrigger.REGRADE
        if earlier is not None and earlier.current_grading_id is not None
        else GradingTrigger.INITIAL
    )
    grading = add_grading(
        session=session,
        submission_id=submission_id,
        report=report,
        student_view=student_view,
        seconds=seconds,
        trigger=trigger,
        worker=worker,
        now=now,
    )
    won = compare_and_set(
        session,
        submission_id,
        where=leased_to(job_id),
        values={
            "status": SubmissionStatus.GRADED.value,
            "current_grading_id": grading.id,
            "finished_at": now,
            "failure_kind": None,
            "failure_reason": None,
        },
    )
    return grading if won else None
