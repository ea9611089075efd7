"""Repository functions: every read and write of the tables goes through here.

All functions take the session as a keyword (``*, session``) and never commit: the caller owns
the transaction (see :func:`grader.db.engine.session_scope`), so several calls can form one.

State changes of a submission are compare-and-set updates guarded by its ``job_id`` (a fencing
token): a worker whose lease was taken over — because it stalled and the reconciler re-queued
the submission — can no longer claim, heartbeat, fail or record results for it, so each
submission ends with exactly one current result set whatever the timing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from grader.core.models import (
    Answer,
    CaseKind,
    CaseResult,
    CertificateDecision,
    Decision,
    Diagnosis,
    ErrorKind,
    Gate,
    GradeReport,
    Versions,
)

from .tables import (
    EvalRecordRow,
    FailureKind,
    GradingRow,
    GradingTrigger,
    Role,
    SubmissionRow,
    SubmissionStatus,
    UserRow,
    utcnow,
)
from .usage import WINDOW, LimitReached, UploadLimits, check_upload, usage

TOKEN_PREFIX = "grd_"
#: The daily quota is a rolling window of this length.
QUOTA_WINDOW = WINDOW


class UserExists(Exception):
    """A user of that name already exists."""


# --------------------------------------------------------------------------------------------
# Users and tokens


def new_token() -> str:
    """A fresh bearer token: 256 random bits, URL-safe."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """What is stored for a token: hex SHA-256 (enough for a high-entropy random token)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_user(*, session: Session, name: str, role: Role) -> tuple[UserRow, str]:
    """Add a user and return it with its token (the only time the token exists in clear)."""
    if session.exec(select(UserRow).where(UserRow.name == name)).first() is not None:
        raise UserExists(name)
    token = new_token()
    user = UserRow(name=name, role=role.value, token_hash=hash_token(token))
    session.add(user)
    session.flush()
    return user, token


def rotate_token(*, session: Session, user: UserRow) -> str:
    """Give ``user`` a new token; the old one (and sessions signed for it) stop working."""
    token = new_token()
    user.token_hash = hash_token(token)
    session.add(user)
    session.flush()
    return token


def end_sessions(*, session: Session, user_id: int) -> None:
    """Bump the user's session generation: every page session signed before it stops working."""
    session.exec(
        sa.update(UserRow)
        .where(col(UserRow.id) == user_id)
        .values(session_generation=UserRow.session_generation + 1)
    )


def find_user_by_token(*, session: Session, token: str) -> UserRow | None:
    """The active user holding ``token``, compared in constant time, or None."""
    if not token or len(token) > 200:
        return None
    digest = hash_token(token)
    user = session.exec(select(UserRow).where(UserRow.token_hash == digest)).first()
    if user is None or not user.active or not hmac.compare_digest(user.token_hash, digest):
        return None
    return user


def get_user(*, session: Session, user_id: int) -> UserRow | None:
    return session.get(UserRow, user_id)


def get_user_by_name(*, session: Session, name: str) -> UserRow | None:
    return session.exec(select(UserRow).where(UserRow.name == name)).first()


def list_users(*, session: Session) -> Sequence[UserRow]:
    return session.exec(select(UserRow).order_by(col(UserRow.name))).all()


# --------------------------------------------------------------------------------------------
# Submissions: intake and quota


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
    session.exec(sa.update(UserRow).where(col(UserRow.id) == user.id).values(active=UserRow.active))
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
# Submissions: grading lifecycle (compare-and-set on status and job id)


def _cas(
    session: Session, submission_id: str, *, where: Sequence[Any], values: dict[str, Any]
) -> bool:
    result = session.exec(
        sa.update(SubmissionRow)
        .where(col(SubmissionRow.id) == submission_id, *where)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)


def _leased_to(job_id: str) -> list[Any]:
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
    return _cas(
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
    return _cas(
        session,
        submission_id,
        where=_leased_to(job_id),
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
    return _cas(
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
    return _cas(
        session,
        submission_id,
        where=[
            *_leased_to(job_id),
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
    return _cas(
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


# --------------------------------------------------------------------------------------------
# Result sets and eval records


def version_columns(versions: Versions) -> dict[str, Any]:
    """The measuring-setup columns shared by result sets and eval records."""
    return {
        "case_set_version": versions.case_set,
        "cases_version": versions.cases,
        "policy_version": versions.policy,
        "corpus_version": versions.corpus,
        "grader_version": versions.grader,
        "sandbox": versions.sandbox,
        "sandbox_image": versions.sandbox_image,
        "package_sha256": versions.package_sha256,
    }


def add_grading(
    *,
    session: Session,
    submission_id: str,
    report: GradeReport,
    student_view: dict[str, Any],
    seconds: float,
    trigger: GradingTrigger,
    worker: str | None = None,
    now: datetime | None = None,
) -> GradingRow:
    """Insert a result set (next version number) with one eval record per case."""
    latest = session.exec(
        select(sa.func.max(GradingRow.version)).where(GradingRow.submission_id == submission_id)
    ).one()
    versions = version_columns(report.versions)
    grading = GradingRow(
        submission_id=submission_id,
        version=(latest or 0) + 1,
        trigger=trigger.value,
        created_at=now or utcnow(),
        decision=report.decision.decision.value,
        reasons=list(report.decision.reasons),
        student_view=student_view,
        retrieval=report.retrieval,
        restarts=report.restarts,
        seconds=round(seconds, 4),
        worker=worker,
        **versions,
    )
    session.add(grading)
    session.flush()
    assert grading.id is not None
    session.add_all(
        EvalRecordRow(
            grading_id=grading.id,
            submission_id=submission_id,
            position=position,
            case_id=result.case_id,
            kind=result.kind.value,
            safety=result.safety,
            passed=result.passed,
            answer=result.answer.model_dump(mode="json") if result.answer else None,
            gates={gate.value: passed for gate, passed in result.gates.items()},
            error_kind=result.error.value if result.error else None,
            safety_failures=[gate.value for gate in result.safety_failures],
            diagnosis=result.diagnosis.value if result.diagnosis else None,
            seconds=result.seconds,
            **versions,
        )
        for position, result in enumerate(report.results)
    )
    session.flush()
    return grading


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
    won = _cas(
        session,
        submission_id,
        where=_leased_to(job_id),
        values={
            "status": SubmissionStatus.GRADED.value,
            "current_grading_id": grading.id,
            "finished_at": now,
            "failure_kind": None,
            "failure_reason": None,
        },
    )
    return grading if won else None


def get_grading(*, session: Session, grading_id: int) -> GradingRow | None:
    return session.get(GradingRow, grading_id)


def list_gradings(*, session: Session, submission_id: str) -> Sequence[GradingRow]:
    return session.exec(
        select(GradingRow)
        .where(GradingRow.submission_id == submission_id)
        .order_by(col(GradingRow.version))
    ).all()


def eval_records(*, session: Session, grading_id: int) -> Sequence[EvalRecordRow]:
    return session.exec(
        select(EvalRecordRow)
        .where(EvalRecordRow.grading_id == grading_id)
        .order_by(col(EvalRecordRow.position))
    ).all()


def report_from_records(grading: GradingRow, records: Sequence[EvalRecordRow]) -> GradeReport:
    """Rebuild the :class:`GradeReport` of a result set from its stored rows."""
    versions = Versions(
        case_set=grading.case_set_version,
        cases=grading.cases_version,
        policy=grading.policy_version,
        corpus=grading.corpus_version,
        grader=grading.grader_version,
        sandbox=grading.sandbox,
        sandbox_image=grading.sandbox_image,
        package_sha256=grading.package_sha256,
    )
    results = tuple(
        CaseResult(
            case_id=record.case_id,
            kind=CaseKind(record.kind),
            safety=record.safety,
            gates={Gate(name): passed for name, passed in record.gates.items()},
            error=ErrorKind(record.error_kind) if record.error_kind else None,
            answer=Answer.from_json_value(record.answer) if record.answer is not None else None,
            safety_failures=tuple(Gate(name) for name in record.safety_failures),
            diagnosis=Diagnosis(record.diagnosis) if record.diagnosis else None,
            seconds=record.seconds,
        )
        for record in records
    )
    return GradeReport(
        versions=versions,
        results=results,
        decision=CertificateDecision(
            decision=Decision(grading.decision), reasons=tuple(grading.reasons)
        ),
        retrieval=grading.retrieval,
        restarts=grading.restarts,
    )


def load_report(*, session: Session, grading_id: int) -> GradeReport | None:
    grading = get_grading(session=session, grading_id=grading_id)
    if grading is None:
        return None
    return report_from_records(grading, eval_records(session=session, grading_id=grading_id))


# --------------------------------------------------------------------------------------------
# Figures for /metrics


def status_counts(*, session: Session) -> dict[SubmissionStatus, int]:
    rows = session.exec(
        select(SubmissionRow.status, sa.func.count()).group_by(col(SubmissionRow.status))
    ).all()
    counts = dict.fromkeys(SubmissionStatus, 0)
    for status, count in rows:
        counts[SubmissionStatus(status)] = int(count)
    return counts


def grading_duration_histogram(
    *, session: Session, buckets: Sequence[float]
) -> tuple[list[int], int, float]:
    """Cumulative counts of first gradings with ``seconds <= bucket``, the count, and the sum."""
    columns = [
        sa.func.coalesce(sa.func.sum(sa.case((col(GradingRow.seconds) <= bound, 1), else_=0)), 0)
        for bound in buckets
    ]
    query = sa.select(
        *columns,
        sa.func.count(),
        sa.func.coalesce(sa.func.sum(GradingRow.seconds), 0.0),
    ).where(col(GradingRow.trigger) == GradingTrigger.INITIAL.value)
    row = session.connection().execute(query).one()
    values = list(row)
    return [int(value) for value in values[:-2]], int(values[-2]), float(values[-1])
