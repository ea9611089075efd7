"""What a student used in the last 24 hours, and the daily limits an upload is checked against.

Three limits, each over a rolling 24-hour window of upload times:

* the daily **quota** (the policy's ``max_submissions_per_day``): submissions that are queued,
  running or graded — a failed run never counts;
* the **storage budget** (``GRADER_STORAGE_BYTES_PER_DAY``): the archive bytes of every upload,
  whatever its outcome, since each one was stored;
* the **failed-start cap** (``GRADER_FAILED_STARTS_PER_DAY``): uploads that ended ``failed``
  because the agent never got to answer — :data:`FAILED_START_KINDS`.

:func:`check_upload` is called under the row lock of
:func:`grader.db.submissions.create_submission`, so parallel uploads by one student cannot
overshoot any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

import sqlalchemy as sa
from sqlmodel import Session, col, select

from grader.core.disclosure import round_up_time

from .tables import QUOTA_STATUSES, FailureKind, SubmissionRow, SubmissionStatus, as_utc

#: Every daily limit is a rolling window of this length.
WINDOW = timedelta(hours=24)

#: Failures that are a failed start: the agent could not start (import error, setup crash or
#: setup timeout — a hanging setup costs a worker the whole setup timeout), or its grading was
#: abandoned after ``GRADER_MAX_ATTEMPTS`` interrupted attempts (an agent that keeps taking its
#: worker down). Infrastructure and package failures are the grader's and never count.
FAILED_START_KINDS = (FailureKind.AGENT_START, FailureKind.ABANDONED)


class LimitKind(StrEnum):
    QUOTA = "quota"
    STORAGE = "storage"
    FAILED_STARTS = "failed_starts"


@dataclass(frozen=True)
class Usage:
    """One student's figures in the window ending at a given time."""

    #: Submissions counting toward the quota, and the upload time of the oldest of them.
    submissions: int
    oldest_submission: datetime | None
    #: Archive bytes uploaded.
    bytes: int
    #: Failed starts, and the upload time of the oldest of them.
    failed_starts: int
    oldest_failed_start: datetime | None


@dataclass(frozen=True)
class UploadLimits:
    """The limits to check (None: not checked)."""

    submissions: int | None = None
    storage_bytes: int | None = None
    failed_starts: int | None = None


@dataclass(frozen=True)
class LimitReached:
    """The outcome of an upload over one of the daily limits."""

    kind: LimitKind
    limit: int
    used: int
    #: When enough of the window has passed for this upload to fit (None: it never will).
    next_slot_at: datetime | None


def usage(*, session: Session, user_id: int, now: datetime, hold_seconds: float = 0.0) -> Usage:
    """The student's quota, storage and failed-start figures in the window ending ``now``.

    With ``hold_seconds`` (the feedback time quantum, for what the student is shown), a failed
    submission whose rounded finishing time has not come yet still counts as it did while it
    ran — in the quota, not as a failed start — so these figures cannot tell a failure, or its
    real finishing time, before the submission's own status does.
    """
    counted = col(SubmissionRow.status).in_([status.value for status in QUOTA_STATUSES])
    failed_start = sa.and_(
        col(SubmissionRow.status) == SubmissionStatus.FAILED.value,
        col(SubmissionRow.failure_kind).in_([kind.value for kind in FAILED_START_KINDS]),
    )
    created = col(SubmissionRow.created_at)
    query = sa.select(
        sa.func.coalesce(sa.func.sum(sa.case((counted, 1), else_=0)), 0),
        sa.func.min(sa.case((counted, created), else_=None)),
        sa.func.coalesce(sa.func.sum(SubmissionRow.package_bytes), 0),
        sa.func.coalesce(sa.func.sum(sa.case((failed_start, 1), else_=0)), 0),
        sa.func.min(sa.case((failed_start, created), else_=None)),
    ).where(col(SubmissionRow.user_id) == user_id, created > now - WINDOW)
    row = session.connection().execute(query).one()
    used = Usage(
        submissions=int(row[0]),
        oldest_submission=as_utc(row[1]),
        bytes=int(row[2]),
        failed_starts=int(row[3]),
        oldest_failed_start=as_utc(row[4]),
    )
    return _with_held_failures(session, user_id, now, hold_seconds, used) if hold_seconds else used


def _with_held_failures(
    session: Session, user_id: int, now: datetime, hold_seconds: float, used: Usage
) -> Usage:
    failed = session.connection().execute(
        sa.select(
            col(SubmissionRow.created_at),
            col(SubmissionRow.finished_at),
            col(SubmissionRow.failure_kind),
        ).where(
            col(SubmissionRow.user_id) == user_id,
            col(SubmissionRow.status) == SubmissionStatus.FAILED.value,
            col(SubmissionRow.created_at) > now - WINDOW,
        )
    )
    held: list[datetime] = []
    starts: list[datetime] = []
    for created_at, finished_at, kind in failed:
        created, finished = as_utc(created_at), as_utc(finished_at)
        if created is None:
            continue
        if finished is None or round_up_time(created, finished, hold_seconds) > now:
            held.append(created)
        elif kind in [k.value for k in FAILED_START_KINDS]:
            starts.append(created)
    counted = [t for t in (used.oldest_submission, *held) if t is not None]
    return replace(
        used,
        submissions=used.submissions + len(held),
        oldest_submission=min(counted) if counted else None,
        failed_starts=len(starts),
        oldest_failed_start=min(starts) if starts else None,
    )


def check_upload(
    *, session: Session, user_id: int, limits: UploadLimits, upload_bytes: int, now: datetime
) -> LimitReached | None:
    """The first limit an upload of ``upload_bytes`` would break, or None when it fits."""
    used = usage(session=session, user_id=user_id, now=now)
    if limits.submissions is not None and used.submissions >= limits.submissions:
        oldest = used.oldest_submission
        return LimitReached(
            LimitKind.QUOTA, limits.submissions, used.submissions, oldest and oldest + WINDOW
        )
    if limits.failed_starts is not None and used.failed_starts >= limits.failed_starts:
        oldest = used.oldest_failed_start
        return LimitReached(
            LimitKind.FAILED_STARTS,
            limits.failed_starts,
            used.failed_starts,
            oldest and oldest + WINDOW,
        )
    budget = limits.storage_bytes
    if budget is not None and used.bytes + upload_bytes > budget:
        frees_at = None
        if upload_bytes <= budget:
            frees_at = _storage_frees_at(
                session, user_id, now=now, excess=used.bytes + upload_bytes - budget
            )
        return LimitReached(LimitKind.STORAGE, budget, used.bytes, frees_at)
    return None


def _storage_frees_at(session: Session, user_id: int, *, now: datetime, excess: int) -> datetime:
    """When the oldest uploads in the window have left it with ``excess`` bytes between them."""
    rows = session.exec(
        select(SubmissionRow.created_at, SubmissionRow.package_bytes)
        .where(SubmissionRow.user_id == user_id, col(SubmissionRow.created_at) > now - WINDOW)
        .order_by(col(SubmissionRow.created_at))
    ).all()
    freed = 0
    for created_at, size in rows:
        freed += size
        if freed >= excess:
            stamp = as_utc(created_at)
            assert stamp is not None
            return stamp + WINDOW
    return now + WINDOW  # only reached if rows changed under us; a safe upper bound
