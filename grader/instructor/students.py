"""Students as the instructor sees them: the roster, certificate decisions and certificates.

Each function composes reads and writes of :mod:`grader.db` with the pure rules of
:mod:`.roster` and :mod:`.decisions`; none holds a query of its own. Every one takes the
session as a keyword and never commits: the caller owns the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session

from grader.core.models import Decision
from grader.db import certificates as certificate_rows
from grader.db.disclosures import bits_by_student
from grader.db.results import current_results
from grader.db.submissions import submission_counts
from grader.db.tables import (
    CertificateDecisionRow,
    CertificateRow,
    Role,
    UserRow,
    as_utc,
    utcnow,
)
from grader.db.users import get_student, get_user, list_students, lock_user, user_names
from grader.exceptions import DecisionError, StudentNotFound

from .certificates import CertificateStatus, PublicCertificate, new_certificate_id
from .decisions import CertificateState, DecisionAction, clean_reason, next_state
from .roster import LastDecision, RosterEntry, build_entry


def _utc(value: datetime | None) -> datetime:
    stamp = as_utc(value)
    assert stamp is not None
    return stamp


def last_decisions(*, session: Session, student_id: int | None = None) -> dict[int, LastDecision]:
    """Each student's newest instructor decision."""
    names = user_names(session=session)
    last: dict[int, LastDecision] = {}
    for row in certificate_rows.decision_rows(session=session, student_id=student_id):
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
    certificates = certificate_rows.active_certificates(session=session, student_id=student_id)
    bits = (
        bits_by_student(session=session, case_set_version=current_version, user_id=student_id)
        if current_version
        else {}
    )
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
                feedback_bits=bits.get(student.id, 0.0),
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
    """One student's roster line."""
    assert student.id is not None
    entries = load_roster(
        session=session,
        current_version=current_version,
        student_id=student.id,
        audit_failed=audit_failed,
    )
    return entries[0]


def find_student(*, session: Session, name: str) -> UserRow:
    """The student called ``name``; :class:`StudentNotFound` otherwise."""
    student = get_student(session=session, name=name)
    if student is None or student.id is None:
        raise StudentNotFound(f"no student named {name!r}")
    return student


@dataclass(frozen=True)
class DecisionOutcome:
    """A recorded decision: its audit row, the certificate held after it, the new roster line."""

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
    The student's row is locked first, so two instructors deciding at once are applied one
    after the other, each seeing the state the other left.
    """
    if actor.role != Role.INSTRUCTOR.value or actor.id is None:
        raise DecisionError("only instructors decide certificates")
    reason = clean_reason(reason)
    student = find_student(session=session, name=student_name)
    assert student.id is not None
    lock_user(session=session, user_id=student.id)
    now = now or utcnow()
    entry = roster_entry(session=session, student=student, current_version=current_version)
    to_state = next_state(action, current=entry.current.state, proposal=entry.proposal)
    best = entry.best
    certificate = certificate_rows.active_certificates(session=session, student_id=student.id).get(
        student.id
    )
    if to_state is CertificateState.AWARDED:
        if certificate is None:
            assert best is not None  # next_state refuses award/confirm without a result
            certificate = certificate_rows.issue_certificate(
                session=session,
                certificate=CertificateRow(
                    id=new_certificate_id(),
                    student_id=student.id,
                    submission_id=best.submission_id,
                    grading_id=best.grading_id,
                    case_set_version=best.case_set_version,
                    issued_at=now,
                    issued_by=actor.id,
                ),
            )
    elif certificate is not None:
        certificate_rows.revoke_certificate(
            session=session, certificate=certificate, actor_id=actor.id, now=now
        )
        certificate = None
    row = certificate_rows.add_decision(
        session=session,
        row=CertificateDecisionRow(
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
        ),
    )
    after = roster_entry(session=session, student=student, current_version=current_version)
    return DecisionOutcome(row=row, certificate=certificate, entry=after)


def public_certificate(
    *, session: Session, certificate_id: str, course: str
) -> PublicCertificate | None:
    """What a verification page shows for ``certificate_id``, or None when it does not exist."""
    row = certificate_rows.get_certificate(session=session, certificate_id=certificate_id)
    if row is None:
        return None
    student = get_user(session=session, user_id=row.student_id)
    return PublicCertificate(
        certificate_id=row.id,
        name=student.name if student else "",
        course=course,
        case_set_version=row.case_set_version,
        issued_at=_utc(row.issued_at),
        status=CertificateStatus.REVOKED if row.revoked_at else CertificateStatus.VALID,
    )
