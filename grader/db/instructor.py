"""Instructor tables: certificate decisions (the audit trail), certificates and regrades.

* ``certificate_decisions`` — append-only: one row per instructor action on a student's
  certificate (who, when, from, to, why), with the policy's proposal and the result set the
  decision was based on, so a newer result can be flagged for review instead of replacing it.
* ``certificates`` — one row per issued certificate (an awarded, instructor-confirmed
  decision): its public id, the case-set version it was earned on, when it was issued and, once
  withdrawn, when and by whom it was revoked. Verification URLs are signed certificate ids.
* ``regrade_runs`` and ``regrade_items`` — every regrade an instructor started (from recorded
  answers or by rerunning agents) and, per submission, which result set it replaced, which it
  produced and what changed (decision, dropped cases, cases with no recorded answer).

Actions and states are ``StrEnum`` values (see :mod:`grader.instructor.decisions`) stored as
short strings, as in :mod:`grader.db.tables`.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from .tables import utcnow


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
