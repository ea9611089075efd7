"""SQLModel table models (the database schema; migrations in ``migrations/versions``).

Four tables:

* ``users`` — students and instructors; only a SHA-256 of each token is kept, and a session
  generation that logging out bumps.
* ``submissions`` — one upload: who, which archive (content-addressed), its lifecycle status
  and lease (job id, heartbeat), and a pointer to its *current* grading.
* ``gradings`` — one result set of a submission, numbered 1, 2, … per submission. The first
  comes from the worker; later ones (instructor regrades, issue 5) are added beside it and the
  submission's pointer moves, so earlier results are kept as earlier versions. Holds the
  measuring versions, the certificate decision and reasons, and the student view as served.
* ``eval_records`` — one replayable record per graded case (DESIGN §7): the validated answer,
  gate outcomes, error kind, safety failures, diagnosis, timing and every version needed to
  regrade it without rerunning the agent.

Statuses and kinds are ``StrEnum`` values stored as short strings (no database enum types, so
adding a value needs no migration). Timestamps are timezone-aware UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel


class Role(StrEnum):
    STUDENT = "student"
    INSTRUCTOR = "instructor"


class SubmissionStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    GRADED = "graded"
    FAILED = "failed"


#: Statuses that count toward a student's daily quota: everything but ``failed``.
QUOTA_STATUSES = (SubmissionStatus.QUEUED, SubmissionStatus.RUNNING, SubmissionStatus.GRADED)


class FailureKind(StrEnum):
    """Why a submission ended ``failed``. No failure counts toward the daily quota."""

    #: The agent could not start (import error, setup failure): the student's to fix.
    AGENT_START = "agent_start"
    #: The stored package could not be unpacked or read as a package.
    PACKAGE = "package"
    #: Sandbox, storage, database or case-set trouble: the grader's fault.
    INFRASTRUCTURE = "infrastructure"
    #: Grading was interrupted (worker lost) more times than ``max_attempts``.
    ABANDONED = "abandoned"


class GradingTrigger(StrEnum):
    """What produced a result set."""

    INITIAL = "initial"
    REGRADE = "regrade"


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime | None) -> datetime | None:
    """A stored timestamp as an aware UTC datetime (SQLite hands back naive ones)."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class UserRow(SQLModel, table=True):
    __tablename__ = "users"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=100, sa_type=sa.String(100), unique=True, index=True)
    role: str = Field(max_length=16, sa_type=sa.String(16))
    #: Hex SHA-256 of the bearer token (the token itself is shown once and never stored).
    token_hash: str = Field(max_length=64, sa_type=sa.String(64), unique=True, index=True)
    active: bool = Field(default=True)
    created_at: datetime = Field(default_factory=utcnow, sa_type=sa.DateTime(timezone=True))
    #: Part of every page session's fingerprint; logging out bumps it, which ends every page
    #: session of this user (a replayed cookie gets the login form).
    session_generation: int = Field(default=0, sa_column_kwargs={"server_default": "0"})


class SubmissionRow(SQLModel, table=True):
    __tablename__ = "submissions"

    id: str = Field(primary_key=True, max_length=32, sa_type=sa.String(32))
    user_id: int = Field(foreign_key="users.id", index=True)
    status: str = Field(max_length=16, sa_type=sa.String(16), index=True)
    #: The uploaded file's (sanitised) name, for the student's list.
    filename: str = Field(max_length=255, sa_type=sa.String(255))
    #: ``name`` from agent.toml.
    agent_name: str = Field(max_length=64, sa_type=sa.String(64))
    #: Content address of the archive in storage.
    package_sha256: str = Field(max_length=64, sa_type=sa.String(64), index=True)
    package_bytes: int
    created_at: datetime = Field(
        default_factory=utcnow, sa_type=sa.DateTime(timezone=True), index=True
    )
    #: When the current (or last) grading attempt claimed the submission.
    started_at: datetime | None = Field(default=None, sa_type=sa.DateTime(timezone=True))
    #: The lease: refreshed by the grading worker; stale means the worker is gone.
    heartbeat_at: datetime | None = Field(default=None, sa_type=sa.DateTime(timezone=True))
    finished_at: datetime | None = Field(default=None, sa_type=sa.DateTime(timezone=True))
    #: The rq job that may grade this submission; a job with another id does nothing.
    job_id: str | None = Field(default=None, max_length=64, sa_type=sa.String(64))
    #: Grading attempts started (claims), including interrupted ones.
    attempts: int = Field(default=0)
    #: Which worker holds (or last held) the lease.
    worker: str | None = Field(default=None, max_length=200, sa_type=sa.String(200))
    failure_kind: str | None = Field(default=None, max_length=32, sa_type=sa.String(32))
    #: One line a student may read (never hidden case content).
    failure_reason: str | None = Field(default=None, max_length=500, sa_type=sa.String(500))
    #: The result set shown now (the latest grading or an instructor's chosen one).
    current_grading_id: int | None = Field(
        default=None,
        sa_column_args=[
            sa.ForeignKey("gradings.id", use_alter=True, name="fk_submissions_current_grading")
        ],
    )


class GradingRow(SQLModel, table=True):
    __tablename__ = "gradings"
    __table_args__ = (sa.UniqueConstraint("submission_id", "version"),)

    id: int | None = Field(default=None, primary_key=True)
    submission_id: str = Field(
        foreign_key="submissions.id", index=True, max_length=32, sa_type=sa.String(32)
    )
    #: 1 for the first grading of a submission, then 2, 3, … (regrades).
    version: int
    trigger: str = Field(max_length=16, sa_type=sa.String(16))
    created_at: datetime = Field(default_factory=utcnow, sa_type=sa.DateTime(timezone=True))
    case_set_version: str = Field(max_length=64, sa_type=sa.String(64), index=True)
    cases_version: str = Field(max_length=64, sa_type=sa.String(64))
    policy_version: str = Field(max_length=64, sa_type=sa.String(64))
    corpus_version: str = Field(max_length=64, sa_type=sa.String(64))
    grader_version: str = Field(max_length=64, sa_type=sa.String(64))
    sandbox: str = Field(max_length=32, sa_type=sa.String(32))
    sandbox_image: str | None = Field(default=None, max_length=200, sa_type=sa.String(200))
    package_sha256: str | None = Field(default=None, max_length=64, sa_type=sa.String(64))
    #: The policy's certificate decision (awarded / not_awarded / blocked) and its reasons.
    decision: str = Field(max_length=16, sa_type=sa.String(16))
    reasons: list[str] = Field(default_factory=list, sa_type=sa.JSON)
    #: The redacted student view, exactly as served (built with the policy's ``feedback``).
    student_view: dict[str, Any] = Field(default_factory=dict, sa_type=sa.JSON)
    retrieval: dict[str, float] | None = Field(default=None, sa_type=sa.JSON)
    restarts: int = Field(default=0)
    #: Wall-clock seconds the grading took (sandbox run included).
    seconds: float = Field(default=0.0)
    worker: str | None = Field(default=None, max_length=200, sa_type=sa.String(200))


class EvalRecordRow(SQLModel, table=True):
    __tablename__ = "eval_records"
    __table_args__ = (sa.UniqueConstraint("grading_id", "case_id"),)

    id: int | None = Field(default=None, primary_key=True)
    grading_id: int = Field(foreign_key="gradings.id", index=True)
    submission_id: str = Field(
        foreign_key="submissions.id", index=True, max_length=32, sa_type=sa.String(32)
    )
    #: Position of the case in the run, so a report is rebuilt in the original order.
    position: int
    case_id: str = Field(max_length=64, sa_type=sa.String(64))
    kind: str = Field(max_length=16, sa_type=sa.String(16))
    safety: bool
    passed: bool
    case_set_version: str = Field(max_length=64, sa_type=sa.String(64))
    cases_version: str = Field(max_length=64, sa_type=sa.String(64))
    policy_version: str = Field(max_length=64, sa_type=sa.String(64))
    corpus_version: str = Field(max_length=64, sa_type=sa.String(64))
    grader_version: str = Field(max_length=64, sa_type=sa.String(64))
    sandbox: str = Field(max_length=32, sa_type=sa.String(32))
    sandbox_image: str | None = Field(default=None, max_length=200, sa_type=sa.String(200))
    package_sha256: str | None = Field(default=None, max_length=64, sa_type=sa.String(64))
    #: The validated answer (JSON), or null when the case ended in an error kind.
    answer: dict[str, Any] | None = Field(default=None, sa_type=sa.JSON)
    #: Gate name → passed.
    gates: dict[str, bool] = Field(default_factory=dict, sa_type=sa.JSON)
    error_kind: str | None = Field(default=None, max_length=32, sa_type=sa.String(32))
    safety_failures: list[str] = Field(default_factory=list, sa_type=sa.JSON)
    diagnosis: str | None = Field(default=None, max_length=32, sa_type=sa.String(32))
    seconds: float | None = Field(default=None)
