"""What the instructor API, the instructor pages and certificate verification share: the
loaded case set, the audit verdict, the acting instructor, certificate URLs and enqueueing a
rerun. Only the running app's state; the use cases are :mod:`grader.instructor.console`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from flask import url_for

from grader.core.casesets import CaseSet
from grader.db.engine import session_scope
from grader.db.tables import Role, UserRow
from grader.exceptions import CaseSetError
from grader.instructor import console
from grader.instructor.certificates import DEFAULT_COURSE, sign_certificate_id
from grader.instructor.regrades import RerunPlan
from grader.instructor.roster import RosterEntry
from grader.instructor.students import load_roster
from grader.worker.enqueue import enqueue_grading

from . import shapes
from .auth import current_user
from .state import state


def load_case_set() -> tuple[CaseSet | None, str | None]:
    """The current case set, or None with the loading error (the console still works)."""
    try:
        return state().case_sets.get(), None
    except CaseSetError as exc:
        return None, str(exc)


def audit_failing(case_set: CaseSet | None) -> bool:
    """Whether the current case set's evaluator audit fails (every proposal needs review)."""
    return state().audits.failing(case_set)


@dataclass(frozen=True)
class Current:
    """The case set now (or why it cannot be loaded) and its audit verdict."""

    case_set: CaseSet | None
    problem: str | None
    audit_failed: bool

    @property
    def version(self) -> str | None:
        return self.case_set.version if self.case_set else None


def current() -> Current:
    case_set, problem = load_case_set()
    return Current(case_set, problem, audit_failing(case_set))


def roster_now(now: Current) -> list[RosterEntry]:
    """Every student's roster line against the current case set."""
    with session_scope(state().engine) as session:
        return load_roster(
            session=session, current_version=now.version, audit_failed=now.audit_failed
        )


def student_json(name: str, now: Current) -> dict[str, Any]:
    """A student's record as the API sends it and the page shows it (StudentNotFound)."""
    with session_scope(state().engine) as session:
        record = console.student_record(
            session=session, name=name, current_version=now.version, audit_failed=now.audit_failed
        )
    urls = certificate_urls(row.id for row in record.certificates)
    return shapes.student_record(record, now.version, urls)


def instructor() -> UserRow:
    """The signed-in instructor (the routes' decorators have checked the role)."""
    user = current_user()
    assert user is not None and user.role == Role.INSTRUCTOR.value
    return user


def course_name() -> str:
    """The course a certificate names (``GRADER_COURSE_NAME``, else a default)."""
    return state().settings.course_name or DEFAULT_COURSE


def certificate_url(certificate_id: str) -> str:
    """The signed public verification URL of a certificate."""
    token = sign_certificate_id(certificate_id, secret_key=state().settings.resolved_secret_key())
    return url_for("certificates.verify", token=token, _external=True)


def certificate_urls(certificate_ids: Iterable[str]) -> dict[str, str]:
    return {certificate_id: certificate_url(certificate_id) for certificate_id in certificate_ids}


def enqueue_rerun(plan: RerunPlan) -> list[str]:
    """Enqueue a committed rerun's jobs; the submissions Redis did not take (it was down: the
    reconciler enqueues queued submissions later)."""
    server = state()
    not_enqueued = []
    for submission_id, job_id in plan.jobs:
        try:
            enqueue_grading(server.queue, submission_id, job_id, server.settings)
        except Exception:  # Redis down: the reconciler enqueues queued submissions
            not_enqueued.append(submission_id)
    return not_enqueued
