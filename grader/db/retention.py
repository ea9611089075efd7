"""Which stored archives submissions still need (read by the storage gc, :mod:`grader.storage_gc`).

An archive (content-addressed, so shared by every submission of the same bytes) is needed while
any submission naming it is:

* queued or running (about to be graded, or re-run by an instructor);
* graded and uploaded after ``graded_since`` (the retention period), or failed and uploaded
  after ``failed_since``;
* the basis of a certificate or of an instructor's certificate decision, kept for good;
* one of ``keep`` (the caller's choice: each student's best and latest graded submission).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Session, col

from .tables import CertificateDecisionRow, CertificateRow, SubmissionRow, SubmissionStatus


def archives_in_use(
    *,
    session: Session,
    graded_since: datetime,
    failed_since: datetime,
    keep: Collection[str] = (),
) -> set[str]:
    """The SHA-256 of every archive a submission still needs (see the module docstring)."""
    status = col(SubmissionRow.status)
    created = col(SubmissionRow.created_at)
    certified: sa.CompoundSelect[tuple[str | None]] = sa.union(
        sa.select(col(CertificateRow.submission_id)),
        sa.select(col(CertificateDecisionRow.basis_submission_id)).where(
            col(CertificateDecisionRow.basis_submission_id).is_not(None)
        ),
    )
    conditions = [
        status.in_([SubmissionStatus.QUEUED.value, SubmissionStatus.RUNNING.value]),
        sa.and_(status == SubmissionStatus.GRADED.value, created > graded_since),
        sa.and_(status == SubmissionStatus.FAILED.value, created > failed_since),
        col(SubmissionRow.id).in_(certified),
    ]
    if keep:
        conditions.append(col(SubmissionRow.id).in_(sorted(keep)))
    query = sa.select(col(SubmissionRow.package_sha256)).distinct().where(sa.or_(*conditions))
    return {row[0] for row in session.connection().execute(query)}


def referenced_archives(*, session: Session) -> set[str]:
    """The SHA-256 of every archive any submission names (needed or not)."""
    query = sa.select(col(SubmissionRow.package_sha256)).distinct()
    return {row[0] for row in session.connection().execute(query)}
