"""Instructor reads and writes: roster, certificate decisions, certificates, eval-record export.

Like :mod:`grader.db.repository`, every function takes the session as a keyword and never
commits; the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from grader.core.models import Decision
from grader.db.instructor import CertificateDecisionRow, CertificateRow
from grader.db.tables import EvalRecordRow, GradingRow, Role, SubmissionRow, UserRow, as_utc, utcnow

from .certificates import CertificateStatus, PublicCertificate, new_certificate_id
from .decisions import (
    CertificateState,
    DecisionAction,
    DecisionError,
    DecisionSource,
    clean_reason,
    next_state,
)
from .exports import eval_record_dict
from .roster import LastDecision, ResultSummary, RosterEntry, build_entry


class StudentNotFound(LookupError):
    """No student of that name."""


def rows(session: Session, statement: sa.Executable) -> Sequence[Any]:
    """The rows of a Core ``SELECT`` of several columns, in the session's transaction."""
    return sa.orm.Session.execute(session, statement).all()


def _utc(value: datetime | None) -> datetime:
    stamp = as_utc(value)
    assert stamp is not None
    return stamp


# --------------------------------------------------------------------------------------------
# Roster


def get_student(*, session: Session, name: str) -> UserRow | None:
    """The student called ``name`` (instructors are not students)."""
    user = session.exec(select(UserRow).where(UserRow.name == name)).first()
    return user if user is not None and user.role == Role.STUDENT.value else None


def list_students(*, session: Session, student_id: int | None = None) -> Sequence[UserRow]:
    query = select(UserRow).where(UserRow.role == Role.STUDENT.value)
    if student_id is not None:
        query = query.where(UserRow.id == student_id)
    return session.exec(query.order_by(col(UserRow.name))).all()


def current_results(
    *, session: Session, student_id: int | None = None
) -> dict[int, list[ResultSummary]]:
    """Every submission's current result set with its pass counts, by student id."""
    current_ids = select(SubmissionRow.current_grading_id).where(
        col(SubmissionRow.current_grading_id).is_not(None)
    )
    if student_id is not None:
        current_ids = current_ids.where(SubmissionRow.user_id == student_id)
    counts = (
        sa.select(
            col(EvalRecordRow.grading_id).label("grading_id"),
            sa.func.count().label("total"),
            sa.func.sum(sa.case((col(EvalRecordRow.passed), 1), else_=0)).label("passed"),
        )
        .where(col(EvalRecordRow.grading_id).in_(current_ids))
        .group_by(col(EvalRecordRow.grading_id))
        .subquery()
    )
    query = (
        sa.select(
            col(SubmissionRow.id),
            col(SubmissionRow.user_id),
            col(SubmissionRow.agent_name),
            col(SubmissionRow.created_at),
            col(GradingRow.id),
            col(GradingRow.version),
            col(GradingRow.created_at),
            col(GradingRow.decision),
            col(GradingRow.reasons),
            col(GradingRow.case_set_version),
            counts.c.total,
            counts.c.passed,
        )
        .join(GradingRow, col(GradingRow.id) == col(SubmissionRow.current_grading_id))
        .join(counts, counts.c.grading_id == col(GradingRow.id), isouter=True)
    )
    if student_id is not None:
        query = query.where(col(SubmissionRow.user_id) == student_id)
    results: dict[int, list[ResultSummary]] = {}
    for row in rows(session, query):
        results.setdefault(row[1], []).append(
            ResultSummary(
                submission_id=row[0],
                grading_id=row[4],
                grading_version=row[5],
                agent_name=row[2],
                submitted_at=_utc(row[3]),
                graded_at=_utc(row[6]),
                decision=Decision(row[7]),
                reasons=tuple(row[8] or ()),
                passed=int(row[11] or 0),
                total=int(row[10] or 0),
                case_set_version=row[9],
            )
        )
    return results


def submission_counts(*, session: Session, student_id: int | None = None) -> dict[int, int]:
    query = sa.select(col(SubmissionRow.user_id), sa.func.count()).group_by(
        col(SubmissionRow.user_id)
    )
    if student_id is not None:
        query = query.where(col(SubmissionRow.user_id) == student_id)
    return {int(user_id): int(count) for user_id, count in rows(session, query)}


def _user_names(session: Session) -> dict[int, str]:
    found = rows(session, sa.select(col(UserRow.id), col(UserRow.name)))
    return {int(user_id): str(name) for user_id, name in found}


def decision_rows(
    *, session: Session, student_id: int | None = None
) -> Sequence[CertificateDecisionRow]:
    """Instructor decisions, oldest first (the audit trail)."""
    query = select(CertificateDecisionRow)
    if student_id is not None:
        query = query.where(CertificateDecisionRow.student_id == student_id)
    return session.exec(
        query.order_by(col(CertificateDecisionRow.created_at), col(CertificateDecisionRow.id))
    ).all()


def last_decisions(*, session: Session, student_id: int | None = None) -> dict[int, LastDecision]:
    """Each student's newest instructor decision."""
    names = _user_names(session)
    last: dict[int, LastDecision] = {}
    for row in decision_rows(session=session, student_id=student_id):
        last[row.student_id] = LastDecision(
            action=DecisionAction(row.action),
            from_state=CertificateState(row.from_state),
            to_state=CertificateState(row.to_state),
            reason=row.reason,
            actor=names.get(row.actor_id, f"user {row.actor_id}"),
            created_at=_utc(row.created_at),
            basis_grading_id=row.basis_grading_id,
            proposal=Decision(row.proposal) if row.proposal else None,
            certificate_id=row.certificate_id,
        )
    return last


def active_certificates(
    *, session: Session, student_id: int | None = None
) -> dict[int, CertificateRow]:
    """Each student's certificate in force (issued, not revoked)."""
    query = select(CertificateRow).where(col(CertificateRow.revoked_at).is_(None))
    if student_id is not None:
        query = query.where(CertificateRow.student_id == student_id)
    return {row.student_id: row for row in session.exec(query).all()}


def load_roster(
    *,
    session: Session,
    current_version: str | None,
    student_id: int | None = None,
    audit_failed: bool = False,
) -> list[RosterEntry]:
    """Every student (or one), alphabetically, with results, proposal and decision.

    ``audit_failed``: the current case set's evaluator audit fails; every proposal is flagged.
    """
    results = current_results(session=session, student_id=student_id)
    counts = submission_counts(session=session, student_id=student_id)
    last = last_decisions(session=session, student_id=student_id)
    certificates = active_certificates(session=session, student_id=student_id)
    entries = []
    for student in list_students(session=session, student_id=student_id):
        assert student.id is not None
        certificate = certificates.get(student.id)
        entries.append(
            build_entry(
                student_id=student.id,
                student=student.name,
                submissions=counts.get(student.id, 0),
                results=results.get(student.id, []),
                last=last.get(student.id),
                certificate_id=certificate.id if certificate else None,
                current_version=current_version,
                audit_failed=audit_failed,
            )
        )
    return entries


def roster_entry(
    *,
    session: Session,
    student: UserRow,
    current_version: str | None,
    audit_failed: bool = False,
) -> RosterEntry:
    assert student.id is not None
    entries = load_roster(
        session=session,
        current_version=current_version,
        student_id=student.id,
        audit_failed=audit_failed,
    )
    return entries[0]


# --------------------------------------------------------------------------------------------
# Decisions and certificates


@dataclass(frozen=True)
class DecisionOutcome:
    row: CertificateDecisionRow
    certificate: CertificateRow | None
    entry: RosterEntry


def record_decision(
    *,
    session: Session,
    actor: UserRow,
    student_name: str,
    action: DecisionAction,
    reason: str,
    current_version: str | None = None,
    now: datetime | None = None,
) -> DecisionOutcome:
    """Apply an instructor's action to a student's certificate and append its audit row.

    Raises :class:`StudentNotFound` or :class:`~grader.instructor.decisions.DecisionError`.
    The student's row is locked first (an ``UPDATE``: a row lock on PostgreSQL, the write lock
    on SQLite), so two instructors deciding at once are applied one after the other, each
    seeing the state the other left.
    """
    if actor.role != Role.INSTRUCTOR.value or actor.id is None:
        raise DecisionError("only instructors decide certificates")
    reason = clean_reason(reason)
    student = get_student(session=session, name=student_name)
    if student is None or student.id is None:
        raise StudentNotFound(student_name)
    session.exec(
        sa.update(UserRow).where(col(UserRow.id) == student.id).values(active=UserRow.active)
    )
    now = now or utcnow()
    entry = roster_entry(session=session, student=student, current_version=current_version)
    to_state = next_state(action, current=entry.current.state, proposal=entry.proposal)
    best = entry.best
    certificate = active_certificates(session=session, student_id=student.id).get(student.id)
    if to_state is CertificateState.AWARDED:
        if certificate is None:
            assert best is not None  # next_state refuses award/confirm without a result
            certificate = CertificateRow(
                id=new_certificate_id(),
                student_id=student.id,
                submission_id=best.submission_id,
                grading_id=best.grading_id,
                case_set_version=best.case_set_version,
                issued_at=now,
                issued_by=actor.id,
            )
            session.add(certificate)
    elif certificate is not None:
        certificate.revoked_at = now
        certificate.revoked_by = actor.id
        session.add(certificate)
        certificate = None
    row = CertificateDecisionRow(
        student_id=student.id,
        actor_id=actor.id,
        created_at=now,
        action=action.value,
        from_state=entry.current.state.value,
        from_source=entry.current.source.value,
        to_state=to_state.value,
        reason=reason,
        proposal=entry.proposal.value if entry.proposal else None,
        basis_submission_id=best.submission_id if best else None,
        basis_grading_id=best.grading_id if best else None,
        case_set_version=best.case_set_version if best else None,
        certificate_id=certificate.id if certificate else None,
    )
    session.add(row)
    session.flush()
    after = roster_entry(session=session, student=student, current_version=current_version)
    return DecisionOutcome(row=row, certificate=certificate, entry=after)


def decision_trail(*, session: Session, student_id: int | None = None) -> list[dict[str, Any]]:
    """The audit trail as plain rows: who, when, from, to, why, and what it was based on."""
    names = _user_names(session)
    trail = []
    for row in decision_rows(session=session, student_id=student_id):
        trail.append(
            {
                "id": row.id,
                "student": names.get(row.student_id),
                "at": _utc(row.created_at).isoformat(),
                "by": names.get(row.actor_id),
                "action": row.action,
                "from": row.from_state,
                "from_source": row.from_source,
                "to": row.to_state,
                "reason": row.reason,
                "proposal": row.proposal,
                "basis_submission_id": row.basis_submission_id,
                "basis_grading_id": row.basis_grading_id,
                "case_set_version": row.case_set_version,
                "certificate_id": row.certificate_id,
            }
        )
    return trail


def student_certificates(*, session: Session, student_id: int) -> Sequence[CertificateRow]:
    return session.exec(
        select(CertificateRow)
        .where(CertificateRow.student_id == student_id)
        .order_by(col(CertificateRow.issued_at))
    ).all()


def public_certificate(
    *, session: Session, certificate_id: str, course: str
) -> PublicCertificate | None:
    """What a verification page shows for ``certificate_id``, or None when it does not exist."""
    if len(certificate_id) > 32:
        return None
    row = session.get(CertificateRow, certificate_id)
    if row is None:
        return None
    student = session.get(UserRow, row.student_id)
    return PublicCertificate(
        certificate_id=row.id,
        name=student.name if student else "",
        course=course,
        case_set_version=row.case_set_version,
        issued_at=_utc(row.issued_at),
        status=CertificateStatus.REVOKED if row.revoked_at else CertificateStatus.VALID,
    )


# --------------------------------------------------------------------------------------------
# Eval records export


def iter_eval_records(
    *,
    session: Session,
    submission_id: str | None = None,
    current_only: bool = False,
    batch: int = 2000,
) -> Iterator[dict[str, Any]]:
    """Every eval record (of one submission, or all), oldest result set first, in batches."""
    names = _user_names(session)
    query = (
        sa.select(GradingRow, col(SubmissionRow.user_id), col(SubmissionRow.current_grading_id))
        .join(SubmissionRow, col(SubmissionRow.id) == col(GradingRow.submission_id))
        .order_by(col(GradingRow.submission_id), col(GradingRow.version))
    )
    if submission_id is not None:
        query = query.where(col(GradingRow.submission_id) == submission_id)
    if current_only:
        query = query.where(col(GradingRow.id) == col(SubmissionRow.current_grading_id))
    gradings = [(row[0], int(row[1]), row[2]) for row in rows(session, query)]
    for start in range(0, len(gradings), max(1, batch // 20)):
        chunk = gradings[start : start + max(1, batch // 20)]
        by_id = {grading.id: (grading, user_id, current) for grading, user_id, current in chunk}
        records = session.exec(
            select(EvalRecordRow)
            .where(col(EvalRecordRow.grading_id).in_(list(by_id)))
            .order_by(col(EvalRecordRow.grading_id), col(EvalRecordRow.position))
        ).all()
        grouped: dict[int, list[EvalRecordRow]] = {}
        for record in records:
            grouped.setdefault(record.grading_id, []).append(record)
        for grading, user_id, current in chunk:
            assert grading.id is not None
            for record in grouped.get(grading.id, []):
                yield eval_record_dict(
                    record,
                    grading=grading,
                    student=names.get(user_id, ""),
                    current=grading.id == current,
                )


def student_name_of(*, session: Session, submission: SubmissionRow) -> str | None:
    user = session.get(UserRow, submission.user_id)
    return user.name if user else None


__all__ = [
    "DecisionError",
    "DecisionOutcome",
    "DecisionSource",
    "StudentNotFound",
    "active_certificates",
    "current_results",
    "decision_trail",
    "iter_eval_records",
    "load_roster",
    "public_certificate",
    "record_decision",
]
