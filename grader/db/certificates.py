"""Certificates and the instructors' certificate decisions (the append-only audit trail).

Every function takes the session as a keyword and never commits (the caller owns the
transaction). The rules — which action leads where — are pure, in
:mod:`grader.instructor.decisions`; this module only reads and writes the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlmodel import Session, col, select

from .tables import CertificateDecisionRow, CertificateRow


def decision_rows(
    *, session: Session, student_id: int | None = None
) -> Sequence[CertificateDecisionRow]:
    """Instructor decisions (of every student, or one), oldest first: the audit trail."""
    query = select(CertificateDecisionRow)
    if student_id is not None:
        query = query.where(CertificateDecisionRow.student_id == student_id)
    return session.exec(
        query.order_by(col(CertificateDecisionRow.created_at), col(CertificateDecisionRow.id))
    ).all()


def add_decision(*, session: Session, row: CertificateDecisionRow) -> CertificateDecisionRow:
    """Append a decision to the audit trail (rows are never updated or deleted)."""
    session.add(row)
    session.flush()
    return row


def active_certificates(
    *, session: Session, student_id: int | None = None
) -> dict[int, CertificateRow]:
    """Each student's certificate in force (issued, not revoked), by student id."""
    query = select(CertificateRow).where(col(CertificateRow.revoked_at).is_(None))
    if student_id is not None:
        query = query.where(CertificateRow.student_id == student_id)
    return {row.student_id: row for row in session.exec(query).all()}


def student_certificates(*, session: Session, student_id: int) -> Sequence[CertificateRow]:
    """Every certificate a student was issued, valid or revoked, oldest first."""
    return session.exec(
        select(CertificateRow)
        .where(CertificateRow.student_id == student_id)
        .order_by(col(CertificateRow.issued_at))
    ).all()


def get_certificate(*, session: Session, certificate_id: str) -> CertificateRow | None:
    if len(certificate_id) > 32:
        return None
    return session.get(CertificateRow, certificate_id)


def issue_certificate(*, session: Session, certificate: CertificateRow) -> CertificateRow:
    session.add(certificate)
    session.flush()
    return certificate


def revoke_certificate(
    *, session: Session, certificate: CertificateRow, actor_id: int, now: datetime
) -> None:
    certificate.revoked_at = now
    certificate.revoked_by = actor_id
    session.add(certificate)
    session.flush()
