"""SQLModel table models: the whole database schema (migrations in ``migrations/versions``).

Grading tables:

* ``users`` — students and instructors; only a SHA-256 of each token is kept, and a session
  generation that logging out bumps.
* ``submissions`` — one upload: who, which archive (content-addressed), its lifecycle status
  and lease (job id, heartbeat), and a pointer to its *current* grading.
* ``gradings`` — one result set of a submission, numbered 1, 2, … per submission. The first
  comes from the worker; later ones (instructor regrades) are added beside it and the
  submission's pointer moves, so earlier results are kept as earlier versions. Holds the
  measuring versions, the certificate decision and reasons, and the student view as served.
* ``eval_records`` — one replayable record per graded case (DESIGN §7): the validated answer,
  gate outcomes, error kind, safety failures, diagnosis, timing and every version needed to
  regrade it without rerunning the agent.

Instructor tables:

* ``certificate_decisions`` — append-only: one row per instructor action on a student's
  certificate (who, when, from, to, why), with the policy's proposal and the result set the
  decision was based on, so a newer result can be flagged for review instead of replacing it.
* ``certificates`` — one row per issued certificate (an awarded, instructor-confirmed
  decision): its public id, the case-set version it was earned on, when it was issued and, once
  withdrawn, when and by whom it was revoked. Verification URLs are signed certificate ids.
* ``regrade_runs`` and ``regrade_items`` — every regrade an instructor started (from recorded
  answers or by rerunning agents) and, per submission, which result set it replaced, which it
  produced and what changed (decision, dropped cases, cases with no recorded answer).

Statuses, kinds, actions and states are ``StrEnum`` values stored as short strings (no
database enum types, so adding a value needs no migration). Timestamps are timezone-aware UTC.
:func:`version_columns` and :func:`versions_of` are the one mapping between
:class:`~grader.core.models.Versions` and the version columns of ``gradings`` and
``eval_records``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from grader.core.models import Versions


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


def timestamp(value: datetime | None) -> str | None:
    """The one text form of a timestamp in every response and export: RFC 3339, UTC, whole
    seconds, ``Z`` (``2026-12-01T03:20:00Z``); None stays None."""
    stamp = as_utc(value)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ") if stamp else None


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
    #: The case's calls through the model gateway (instructors only); null without a gateway.
    model_calls: list[dict[str, Any]] | None = Field(default=None, sa_type=sa.JSON)


class CertificateDecisionRow(SQLModel, table=True):
    """One instructor action on a student's certificate; rows are never updated or deleted."""

    __tablename__ = "certificate_decisions"

    id: int | None = Field(default=None, primary_key=True)
    student_id: int = Field(foreign_key="users.id", index=True)
    actor_id: int = Field(foreign_key="users.id")
    created_at: datetime = Field(default_factory=utcnow, sa_type=sa.DateTime(timezone=True))
    #: confirm | award | withhold | revoke
    action: str = Field(max_length=16, sa_type=sa.String(16))
    #: The effective decision before and after (awarded | not_awarded | blocked | revoked).
    from_state: str = Field(max_length=16, sa_type=sa.String(16))
    #: Whether ``from_state`` was the policy's proposal or an earlier instructor decision.
    from_source: str = Field(max_length=16, sa_type=sa.String(16))
    to_state: str = Field(max_length=16, sa_type=sa.String(16))
    reason: str = Field(sa_type=sa.Text)
    #: The policy's proposal at the time (awarded | not_awarded | blocked), or null without one.
    proposal: str | None = Field(default=None, max_length=16, sa_type=sa.String(16))
    #: The result set the decision was based on (the student's best graded submission).
    basis_submission_id: str | None = Field(
        default=None, foreign_key="submissions.id", max_length=32, sa_type=sa.String(32)
    )
    basis_grading_id: int | None = Field(default=None, foreign_key="gradings.id")
    case_set_version: str | None = Field(default=None, max_length=64, sa_type=sa.String(64))
    #: The certificate held after this decision (issued or kept), if any.
    certificate_id: str | None = Field(default=None, max_length=32, sa_type=sa.String(32))


class CertificateRow(SQLModel, table=True):
    """An issued certificate; verification shows only name, course, version, date, status."""

    __tablename__ = "certificates"

    #: Public identifier printed on the certificate (random, not guessable).
    id: str = Field(primary_key=True, max_length=32, sa_type=sa.String(32))
    student_id: int = Field(foreign_key="users.id", index=True)
    submission_id: str = Field(foreign_key="submissions.id", max_length=32, sa_type=sa.String(32))
    grading_id: int = Field(foreign_key="gradings.id")
    case_set_version: str = Field(max_length=64, sa_type=sa.String(64))
    issued_at: datetime = Field(default_factory=utcnow, sa_type=sa.DateTime(timezone=True))
    issued_by: int = Field(foreign_key="users.id")
    revoked_at: datetime | None = Field(default=None, sa_type=sa.DateTime(timezone=True))
    revoked_by: int | None = Field(default=None, foreign_key="users.id")


class RegradeRunRow(SQLModel, table=True):
    """One regrade started by an instructor."""

    __tablename__ = "regrade_runs"

    id: int | None = Field(default=None, primary_key=True)
    #: answers (re-apply the gates to recorded answers) | rerun (run the agents again)
    mode: str = Field(max_length=16, sa_type=sa.String(16))
    actor_id: int = Field(foreign_key="users.id")
    created_at: datetime = Field(default_factory=utcnow, sa_type=sa.DateTime(timezone=True))
    #: The case set regraded against (for ``rerun``, the one current when it was started).
    case_set_version: str = Field(max_length=64, sa_type=sa.String(64))
    submissions: int = Field(default=0)
    #: Submissions whose certificate decision changed (``answers`` only).
    changed: int = Field(default=0)
    seconds: float = Field(default=0.0)


class RegradeItemRow(SQLModel, table=True):
    """What one regrade did to one submission."""

    __tablename__ = "regrade_items"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="regrade_runs.id", index=True)
    submission_id: str = Field(
        foreign_key="submissions.id", index=True, max_length=32, sa_type=sa.String(32)
    )
    #: The result set that was current before the regrade (kept as an earlier version).
    from_grading_id: int | None = Field(default=None, foreign_key="gradings.id")
    #: The new result set (null for a rerun until the worker records it).
    to_grading_id: int | None = Field(default=None, foreign_key="gradings.id", index=True)
    old_decision: str | None = Field(default=None, max_length=16, sa_type=sa.String(16))
    new_decision: str | None = Field(default=None, max_length=16, sa_type=sa.String(16))
    #: Case ids recorded before but no longer in the case set (dropped from the new results).
    dropped_cases: list[str] = Field(default_factory=list, sa_type=sa.JSON)
    #: Case ids in the case set with no recorded answer (left out of the new results).
    missing_cases: list[str] = Field(default_factory=list, sa_type=sa.JSON)


# --------------------------------------------------------------------------------------------
# Versions <-> columns (result sets and eval records carry the same eight)


class ArchiveRow(SQLModel, table=True):
    """An archive kept by the database store (``GRADER_STORAGE_URL=postgresql+psycopg://…``)."""

    __tablename__ = "archives"

    sha256: str = Field(primary_key=True, max_length=64, sa_type=sa.String(64))
    size: int = Field(sa_type=sa.BigInteger)
    chunks: int
    #: POSIX time it was stored or last re-uploaded (the storage gc's grace period reads it).
    touched: float = Field(sa_type=sa.Float(precision=53))


class ArchiveChunkRow(SQLModel, table=True):
    """One piece (at most 1 MiB) of an archive in the database store, numbered from 0."""

    __tablename__ = "archive_chunks"

    sha256: str = Field(primary_key=True, max_length=64, sa_type=sa.String(64))
    seq: int = Field(primary_key=True)
    data: bytes = Field(sa_type=sa.LargeBinary)


def version_columns(versions: Versions) -> dict[str, Any]:
    """The measuring-setup columns of a result set or eval record, from its versions."""
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


def versions_of(row: GradingRow | EvalRecordRow) -> Versions:
    """The versions stored on a result set or eval record (inverse of :func:`version_columns`)."""
    return Versions(
        case_set=row.case_set_version,
        cases=row.cases_version,
        policy=row.policy_version,
        corpus=row.corpus_version,
        grader=row.grader_version,
        sandbox=row.sandbox,
        sandbox_image=row.sandbox_image,
        package_sha256=row.package_sha256,
    )


class FeedbackDisclosureRow(SQLModel, table=True):
    """What one result set showed its student and the bits it was charged (README, "Feedback
    and disclosure"); the sum per student and case-set version is the student's feedback used.
    """

    __tablename__ = "feedback_disclosures"
    __table_args__ = (
        sa.Index("ix_feedback_disclosures_user_version", "user_id", "case_set_version"),
    )

    id: int | None = Field(default=None, primary_key=True)
    grading_id: int = Field(foreign_key="gradings.id", unique=True)
    submission_id: str = Field(
        foreign_key="submissions.id", index=True, max_length=32, sa_type=sa.String(32)
    )
    user_id: int = Field(foreign_key="users.id")
    case_set_version: str = Field(max_length=64, sa_type=sa.String(64))
    #: The policy's ``feedback`` mode, and the view shown (counts, coarse, decision_only, …).
    mode: str = Field(max_length=16, sa_type=sa.String(16))
    shown: str = Field(max_length=16, sa_type=sa.String(16))
    released: bool
    #: Why the view is the decision only: no_improvement | budget (null when released).
    withheld: str | None = Field(default=None, max_length=16, sa_type=sa.String(16))
    #: The Ladder's score of this result set (the policy's metric).
    score: float | None = Field(default=None)
    view_bits: float
    timing_bits: float
    #: view_bits + timing_bits: this result set's charge.
    bits: float
    created_at: datetime = Field(default_factory=utcnow, sa_type=sa.DateTime(timezone=True))
    #: When the student may see the result: the finishing time rounded up to the policy's
    #: time quantum (the student reads this as the finishing time).
    release_at: datetime = Field(sa_type=sa.DateTime(timezone=True))


class ComparisonDisclosureRow(SQLModel, table=True):
    """What a student's comparison of two of their result sets disclosed beyond the two views
    (README, "Feedback and disclosure"): charged once per pair, counted in the student's
    feedback used alongside :class:`FeedbackDisclosureRow`."""

    __tablename__ = "comparison_disclosures"
    __table_args__ = (
        sa.UniqueConstraint("first_grading_id", "second_grading_id"),
        sa.Index("ix_comparison_disclosures_user_version", "user_id", "case_set_version"),
    )

    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(foreign_key="users.id")
    case_set_version: str = Field(max_length=64, sa_type=sa.String(64))
    #: The two result sets compared, the lower id first (either order costs the same).
    first_grading_id: int = Field(foreign_key="gradings.id")
    second_grading_id: int = Field(foreign_key="gradings.id")
    bits: float
    created_at: datetime = Field(default_factory=utcnow, sa_type=sa.DateTime(timezone=True))
