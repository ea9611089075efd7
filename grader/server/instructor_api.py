"""Instructor console JSON API (DESIGN §6, §7, §12): roster, decisions, exports, regrades, audit.

Every route is for instructors only (403 for a student, 401 without credentials), through
:func:`grader.server.auth.api_auth`: a bearer token, or for ``GET`` the page session. The
submission view itself (``GET /api/instructor/submissions/<id>``) lives in
:mod:`grader.server.instructor`.

:func:`register` adds this blueprint, the instructor pages and the public certificate
verification to an app built by :func:`grader.server.create_app`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any

from flask import Blueprint, Flask, Response, jsonify, request, url_for
from flask.typing import ResponseReturnValue
from sqlmodel import Session

from grader.audit.report import AuditReport, run_audit
from grader.core.casesets import CaseSet
from grader.db import repository as repo
from grader.db.engine import session_scope
from grader.db.tables import Role, UserRow, as_utc
from grader.exceptions import CaseSetError
from grader.instructor import regrading
from grader.instructor import repository as irepo
from grader.instructor.certificates import DEFAULT_COURSE, sign_certificate_id
from grader.instructor.decisions import DecisionError, InvalidTransition, parse_action
from grader.instructor.detail import submission_detail
from grader.instructor.exports import decisions_csv, jsonl
from grader.instructor.roster import RosterFilter, filter_roster, roster_counts
from grader.worker.enqueue import enqueue_grading

from .auth import api_auth, current_user
from .state import state

bp = Blueprint("instructor_console", __name__, url_prefix="/api/instructor")

_EXTENSION = "grader_instructor"
#: Audit reports kept per case-set version (running the canaries takes a moment).
_AUDITS_KEPT = 4


# --------------------------------------------------------------------------------------------
# Helpers shared with the pages


def register(app: Flask) -> None:
    """Add the instructor console (API, pages, certificate verification) to ``app``."""
    from . import certificates, instructor_pages

    app.register_blueprint(bp)
    app.register_blueprint(instructor_pages.bp)
    app.register_blueprint(certificates.bp)
    csrf = app.extensions.get("csrf")
    if csrf is not None:  # token-authenticated JSON: no CSRF token (see auth.py)
        csrf.exempt(bp)
        csrf.exempt(certificates.bp)
    app.extensions[_EXTENSION] = {"audits": OrderedDict(), "lock": threading.Lock()}


def load_case_set() -> tuple[CaseSet | None, str | None]:
    """The current case set, or None with the loading error (the console still works)."""
    try:
        return state().case_sets.get(), None
    except CaseSetError as exc:
        return None, str(exc)


def course_name() -> str:
    """The course a certificate names (``GRADER_COURSE_NAME``, else a default)."""
    return state().settings.course_name or DEFAULT_COURSE


def certificate_url(certificate_id: str) -> str:
    """The signed public verification URL of a certificate."""
    token = sign_certificate_id(certificate_id, secret_key=state().settings.resolved_secret_key())
    return url_for("certificates.verify", token=token, _external=True)


def audit_report(case_set: CaseSet) -> AuditReport:
    """The canary audit of ``case_set``, computed once per case-set version."""
    from flask import current_app

    store = current_app.extensions[_EXTENSION]
    with store["lock"]:
        cached: AuditReport | None = store["audits"].get(case_set.version)
    if cached is not None:
        return cached
    report = run_audit(case_set)
    with store["lock"]:
        audits: OrderedDict[str, AuditReport] = store["audits"]
        audits[case_set.version] = report
        while len(audits) > _AUDITS_KEPT:
            audits.popitem(last=False)
    return report


def audit_failing(case_set: CaseSet | None) -> bool:
    """Whether the current case set's evaluator audit fails: every proposal then needs review."""
    return case_set is not None and not audit_report(case_set).ok


def iso(value: datetime | None) -> str | None:
    """A stored timestamp as ISO 8601 UTC (SQLite hands back naive ones)."""
    stamp = as_utc(value)
    return stamp.isoformat() if stamp else None


def instructor() -> UserRow:
    user = current_user()
    assert user is not None and user.role == Role.INSTRUCTOR.value
    return user


def _error(status: int, message: str) -> ResponseReturnValue:
    return jsonify(error=message), status


def decision_payload(outcome: irepo.DecisionOutcome) -> dict[str, Any]:
    row, entry = outcome.row, outcome.entry
    certificate = outcome.certificate
    return {
        "id": row.id,
        "student": entry.student,
        "action": row.action,
        "from": row.from_state,
        "from_source": row.from_source,
        "decision": row.to_state,
        "source": "instructor",
        "reason": row.reason,
        "proposal": row.proposal,
        "decided_by": entry.current.decided_by,
        "decided_at": entry.current.decided_at.isoformat() if entry.current.decided_at else None,
        "basis_submission_id": row.basis_submission_id,
        "case_set_version": row.case_set_version,
        "certificate": (
            {
                "id": certificate.id,
                "url": certificate_url(certificate.id),
                "case_set_version": certificate.case_set_version,
            }
            if certificate
            else None
        ),
    }


def apply_decision(
    actor: UserRow, student: object, action: object, reason: object
) -> tuple[int, dict[str, Any]]:
    """Validate and record a decision; (HTTP status, JSON body). Shared with the pages."""
    if not isinstance(student, str) or not student:
        return 400, {"error": "'student' (a student's name) is required"}
    try:
        parsed = parse_action(action)
        case_set, _ = load_case_set()
        with session_scope(state().engine) as session:
            outcome = irepo.record_decision(
                session=session,
                actor=actor,
                student_name=student,
                action=parsed,
                reason=reason if isinstance(reason, str) else "",
                current_version=case_set.version if case_set else None,
            )
            body = decision_payload(outcome)
    except irepo.StudentNotFound:
        return 404, {"error": f"no student named {student!r}"}
    except InvalidTransition as exc:
        return 409, {"error": str(exc)}
    except DecisionError as exc:
        return 400, {"error": str(exc)}
    return 201, body


# --------------------------------------------------------------------------------------------
# Roster and decisions


@bp.get("/students")
@api_auth(Role.INSTRUCTOR)
def students() -> ResponseReturnValue:
    """Every student: best and latest result, proposal, current decision (``?filter=``)."""
    try:
        wanted = RosterFilter(request.args.get("filter", RosterFilter.ALL.value))
    except ValueError:
        return _error(400, "filter must be one of: " + ", ".join(f.value for f in RosterFilter))
    case_set, problem = load_case_set()
    audit_failed = audit_failing(case_set)
    with session_scope(state().engine) as session:
        entries = irepo.load_roster(
            session=session,
            current_version=case_set.version if case_set else None,
            audit_failed=audit_failed,
        )
    return jsonify(
        case_set_version=case_set.version if case_set else None,
        case_set_error=problem,
        counts={f.value: n for f, n in roster_counts(entries).items()},
        filter=wanted.value,
        students=[entry.as_dict() for entry in filter_roster(entries, wanted)],
    )


def student_record(
    session: Session, name: str, current_version: str | None, *, audit_failed: bool = False
) -> dict[str, Any]:
    """A student's roster line, submissions, audit trail and certificates (API and page)."""
    student = irepo.get_student(session=session, name=name)
    if student is None or student.id is None:
        raise irepo.StudentNotFound(name)
    entry = irepo.roster_entry(
        session=session,
        student=student,
        current_version=current_version,
        audit_failed=audit_failed,
    )
    results = {
        result.submission_id: result
        for result in irepo.current_results(session=session, student_id=student.id).get(
            student.id, []
        )
    }
    submissions = []
    for row, _decision in repo.list_submissions(session=session, user_id=student.id):
        result = results.get(row.id)
        submissions.append(
            {
                "id": row.id,
                "status": row.status,
                "agent_name": row.agent_name,
                "filename": row.filename,
                "created_at": iso(row.created_at),
                "failure_reason": row.failure_reason,
                "result": result.as_dict(current_version) if result else None,
                "best": entry.best is not None and entry.best.submission_id == row.id,
            }
        )
    certificates = [
        {
            "id": row.id,
            "case_set_version": row.case_set_version,
            "issued_at": iso(row.issued_at),
            "status": "revoked" if row.revoked_at else "valid",
            "revoked_at": iso(row.revoked_at),
            "submission_id": row.submission_id,
            "url": certificate_url(row.id),
        }
        for row in irepo.student_certificates(session=session, student_id=student.id)
    ]
    return {
        "student": entry.as_dict(),
        "submissions": submissions,
        "trail": irepo.decision_trail(session=session, student_id=student.id),
        "certificates": certificates,
    }


@bp.get("/students/<name>")
@api_auth(Role.INSTRUCTOR)
def student(name: str) -> ResponseReturnValue:
    case_set, _ = load_case_set()
    audit_failed = audit_failing(case_set)
    with session_scope(state().engine) as session:
        try:
            body = student_record(
                session,
                name,
                case_set.version if case_set else None,
                audit_failed=audit_failed,
            )
        except irepo.StudentNotFound:
            return _error(404, "no such student")
    return jsonify(body)


@bp.post("/certificates")
@api_auth(Role.INSTRUCTOR)
def decide() -> ResponseReturnValue:
    """``{"student", "decision", "reason"}``: confirm | award | withhold | revoke (audited)."""
    data = request.get_json(silent=True)
    if not isinstance(data, dict):
        return _error(400, 'send JSON: {"student": ..., "decision": ..., "reason": ...}')
    status, body = apply_decision(
        instructor(), data.get("student"), data.get("decision"), data.get("reason")
    )
    return jsonify(body), status


@bp.get("/decisions")
@api_auth(Role.INSTRUCTOR)
def decisions() -> ResponseReturnValue:
    """The whole audit trail (or one student's, ``?student=``), oldest first."""
    name = request.args.get("student")
    with session_scope(state().engine) as session:
        student_id = None
        if name is not None:
            found = irepo.get_student(session=session, name=name)
            if found is None:
                return _error(404, "no such student")
            student_id = found.id
        trail = irepo.decision_trail(session=session, student_id=student_id)
    return jsonify(decisions=trail)


@bp.get("/certificates.csv")
@api_auth(Role.INSTRUCTOR)
def certificates_csv() -> ResponseReturnValue:
    """Every student's current decision, its source (policy or instructor) and reason."""
    case_set, _ = load_case_set()
    audit_failed = audit_failing(case_set)
    with session_scope(state().engine) as session:
        entries = irepo.load_roster(
            session=session,
            current_version=case_set.version if case_set else None,
            audit_failed=audit_failed,
        )
    return Response(
        decisions_csv(entries),
        mimetype="text/csv",
        headers={"Content-Disposition": 'attachment; filename="certificate-decisions.csv"'},
    )


# --------------------------------------------------------------------------------------------
# Submissions: any result set in detail, eval records


@bp.get("/submissions/<submission_id>/gradings/<int:version>")
@api_auth(Role.INSTRUCTOR)
def grading_detail(submission_id: str, version: int) -> ResponseReturnValue:
    """One result set (current or earlier) with per-gate and per-slice summaries."""
    case_set, _ = load_case_set()
    body = grading_view(submission_id, version, case_set)
    if body is None:
        return _error(404, "no such submission or result set")
    return jsonify(body)


def grading_view(
    submission_id: str, version: int | None, case_set: CaseSet | None
) -> dict[str, Any] | None:
    """A result set of a submission (the current one when ``version`` is None), in full."""
    with session_scope(state().engine) as session:
        submission = repo.get_submission(session=session, submission_id=submission_id)
        if submission is None:
            return None
        gradings = repo.list_gradings(session=session, submission_id=submission.id)
        if version is None:
            grading = next((g for g in gradings if g.id == submission.current_grading_id), None)
        else:
            grading = next((g for g in gradings if g.version == version), None)
            if grading is None:
                return None
        student = irepo.student_name_of(session=session, submission=submission)
        report = None
        notes = None
        if grading is not None and grading.id is not None:
            report = repo.load_report(session=session, grading_id=grading.id)
            notes = regrading.regrade_notes(session=session, grading_id=grading.id)
    body: dict[str, Any] = {
        "id": submission.id,
        "student": student,
        "status": submission.status,
        "agent_name": submission.agent_name,
        "filename": submission.filename,
        "package_sha256": submission.package_sha256,
        "created_at": iso(submission.created_at),
        "failure_reason": submission.failure_reason,
        "gradings": [
            {
                "version": g.version,
                "trigger": g.trigger,
                "decision": g.decision,
                "case_set_version": g.case_set_version,
                "created_at": iso(g.created_at),
                "current": g.id == submission.current_grading_id,
            }
            for g in gradings
        ],
        "grading": None,
    }
    if grading is not None and report is not None:
        detail = submission_detail(
            report,
            cases=case_set.by_id() if case_set else {},
            current_version=case_set.version if case_set else None,
        )
        body["grading"] = {
            "version": grading.version,
            "trigger": grading.trigger,
            "current": grading.id == submission.current_grading_id,
            "created_at": iso(grading.created_at),
            "seconds": grading.seconds,
            "worker": grading.worker,
            "regrade": notes,
            **detail,
        }
    return body


@bp.get("/eval-records.jsonl")
@api_auth(Role.INSTRUCTOR)
def eval_records_all() -> ResponseReturnValue:
    """Every eval record with all its versions (``?submission=``, ``?current=1``)."""
    return _eval_records(request.args.get("submission"))


@bp.get("/submissions/<submission_id>/eval-records.jsonl")
@api_auth(Role.INSTRUCTOR)
def eval_records_one(submission_id: str) -> ResponseReturnValue:
    return _eval_records(submission_id)


def _eval_records(submission_id: str | None) -> ResponseReturnValue:
    engine = state().engine
    current_only = request.args.get("current", "") in ("1", "true", "yes")
    if submission_id is not None:
        with session_scope(engine) as session:
            if repo.get_submission(session=session, submission_id=submission_id) is None:
                return _error(404, "no such submission")

    def generate() -> Any:
        with Session(engine) as session:
            yield from jsonl(
                irepo.iter_eval_records(
                    session=session, submission_id=submission_id, current_only=current_only
                )
            )

    name = f"eval-records-{submission_id}.jsonl" if submission_id else "eval-records.jsonl"
    return Response(
        generate(),  # needs no request context: the engine is captured
        mimetype="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


# --------------------------------------------------------------------------------------------
# Regrades


def _string_list(value: object) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    return None


def regrade_answers(
    actor: UserRow,
    *,
    submission_ids: list[str] | None,
    dry_run: bool,
    include_up_to_date: bool,
) -> tuple[int, dict[str, Any]]:
    case_set, problem = load_case_set()
    if case_set is None:
        return 503, {"error": f"the case set cannot be loaded: {problem}"}
    with session_scope(state().engine) as session:
        result = regrading.regrade_from_answers(
            session=session,
            case_set=case_set,
            actor=actor,
            submission_ids=submission_ids,
            include_up_to_date=include_up_to_date,
            dry_run=dry_run,
        )
    return (200 if dry_run else 201), result.as_dict()


def regrade_rerun(
    actor: UserRow, *, submission_ids: list[str] | None, outdated: bool
) -> tuple[int, dict[str, Any]]:
    server = state()
    case_set, problem = load_case_set()
    if case_set is None:
        return 503, {"error": f"the case set cannot be loaded: {problem}"}
    with session_scope(server.engine) as session:
        if outdated:
            results = irepo.current_results(session=session)
            submission_ids = [
                result.submission_id
                for rows in results.values()
                for result in rows
                if result.case_set_version != case_set.version
            ]
        if not submission_ids:
            return 400, {"error": 'name the submissions to rerun, or send "outdated": true'}
        plan = regrading.start_rerun(
            session=session,
            actor=actor,
            case_set_version=case_set.version,
            submission_ids=submission_ids,
        )
    not_enqueued = []
    for submission_id, job_id in plan.jobs:
        try:
            enqueue_grading(server.queue, submission_id, job_id, server.settings)
        except Exception:  # Redis down: the reconciler enqueues queued submissions
            not_enqueued.append(submission_id)
    return 202, {**plan.as_dict(), "not_enqueued": not_enqueued}


@bp.post("/regrades")
@api_auth(Role.INSTRUCTOR)
def start_regrade() -> ResponseReturnValue:
    """``{"mode": "answers" | "rerun", "submissions"?: [...], ...}``.

    ``answers``: re-apply the current case set to recorded answers (``dry_run`` previews;
    ``include_up_to_date`` also regrades results already on this version). ``rerun``: run the
    named agents again (or every one graded on an older version with ``"outdated": true``).
    """
    data = request.get_json(silent=True)
    if not isinstance(data, dict):
        return _error(400, 'send JSON: {"mode": "answers" | "rerun", ...}')
    submissions = data.get("submissions")
    ids = _string_list(submissions) if submissions is not None else None
    if submissions is not None and ids is None:
        return _error(400, "'submissions' must be a list of submission ids")
    mode = data.get("mode")
    if mode == regrading.RegradeMode.ANSWERS.value:
        status, body = regrade_answers(
            instructor(),
            submission_ids=ids,
            dry_run=data.get("dry_run") is True,
            include_up_to_date=data.get("include_up_to_date") is True,
        )
    elif mode == regrading.RegradeMode.RERUN.value:
        status, body = regrade_rerun(
            instructor(), submission_ids=ids, outdated=data.get("outdated") is True
        )
    else:
        return _error(400, "mode must be 'answers' or 'rerun'")
    return jsonify(body), status


@bp.get("/regrades")
@api_auth(Role.INSTRUCTOR)
def regrades() -> ResponseReturnValue:
    with session_scope(state().engine) as session:
        runs = regrading.list_runs(session=session)
    return jsonify(regrades=runs)


@bp.get("/regrades/<int:run_id>")
@api_auth(Role.INSTRUCTOR)
def regrade(run_id: int) -> ResponseReturnValue:
    with session_scope(state().engine) as session:
        run = regrading.get_run(session=session, run_id=run_id)
    if run is None:
        return _error(404, "no such regrade")
    return jsonify(run)


# --------------------------------------------------------------------------------------------
# Case set and evaluator audit


@bp.get("/case-set")
@api_auth(Role.INSTRUCTOR)
def case_set_info() -> ResponseReturnValue:
    """The current case-set version and how many current results were graded on another."""
    case_set, problem = load_case_set()
    if case_set is None:
        return _error(503, f"the case set cannot be loaded: {problem}")
    with session_scope(state().engine) as session:
        results = [r for rows in irepo.current_results(session=session).values() for r in rows]
    outdated = sum(result.case_set_version != case_set.version for result in results)
    return jsonify(
        version=case_set.version,
        versions=case_set.versions.model_dump(mode="json"),
        counts=case_set.counts(),
        documents=len(case_set.corpus),
        warnings=list(case_set.warnings),
        graded_submissions=len(results),
        outdated_submissions=outdated,
    )


@bp.get("/audit")
@api_auth(Role.INSTRUCTOR)
def audit() -> ResponseReturnValue:
    """The canary audit (DESIGN §9) of the current case set; ``ok`` is the verdict."""
    case_set, problem = load_case_set()
    if case_set is None:
        return _error(503, f"the case set cannot be loaded: {problem}")
    return jsonify(audit_report(case_set).as_dict())
