"""Instructor console pages: roster, student (decisions and audit trail), submission detail,
regrades and the evaluator audit. Server-rendered HTML, no script; every form carries a CSRF
token. Instructors only: an anonymous visitor is sent to the login form, a student gets 403.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, ParamSpec, TypeVar

from flask import Blueprint, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from grader.core.models import GATES_BY_KIND
from grader.db.engine import session_scope
from grader.db.tables import Role
from grader.instructor import regrading
from grader.instructor import repository as irepo
from grader.instructor.decisions import DecisionAction
from grader.instructor.roster import RosterFilter, filter_roster, roster_counts

from .auth import current_user, login_required
from .instructor_api import (
    apply_decision,
    audit_failing,
    audit_report,
    grading_view,
    instructor,
    load_case_set,
    regrade_answers,
    regrade_rerun,
    student_record,
)
from .state import state

P = ParamSpec("P")
R = TypeVar("R")

bp = Blueprint(
    "instructor_pages",
    __name__,
    url_prefix="/instructor",
    static_folder="templates/instructor/static",
    static_url_path="/static",
)

DECISION_LABELS = {
    "awarded": "Awarded",
    "not_awarded": "Not awarded",
    "blocked": "Blocked",
    "revoked": "Revoked",
}
FILTER_LABELS = {
    RosterFilter.ALL: "All",
    RosterFilter.BLOCKED: "Blocked by safety",
    RosterFilter.NOT_AWARDED: "Not awarded",
    RosterFilter.AWARDED: "Awarded",
    RosterFilter.OVERRIDDEN: "Overridden",
    RosterFilter.REVIEW: "Needs review",
    RosterFilter.OUTDATED: "Older case set",
}
ACTION_LABELS = {
    DecisionAction.CONFIRM: "Confirm the policy's proposal",
    DecisionAction.AWARD: "Override: award",
    DecisionAction.WITHHOLD: "Override: withhold",
    DecisionAction.REVOKE: "Revoke the certificate",
}
GATE_ORDER = {kind.value: [gate.value for gate in gates] for kind, gates in GATES_BY_KIND.items()}


def instructor_page(view: Callable[P, R]) -> Callable[P, R]:
    """Pages for instructors: log in first; any other role gets 403."""

    @wraps(view)
    @login_required
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        user = current_user()
        if user is None or user.role != Role.INSTRUCTOR.value:
            page = render_template("error.html", status=403, message="Instructors only.")
            return (page, 403)  # type: ignore[return-value]
        return view(*args, **kwargs)

    return wrapper


def _render(template: str, **context: Any) -> str:
    return render_template(
        template,
        user=current_user(),
        decision_labels=DECISION_LABELS,
        **context,
    )


@bp.get("/")
@instructor_page
def roster() -> ResponseReturnValue:
    try:
        wanted = RosterFilter(request.args.get("filter", RosterFilter.ALL.value))
    except ValueError:
        wanted = RosterFilter.ALL
    case_set, problem = load_case_set()
    audit_failed = audit_failing(case_set)
    with session_scope(state().engine) as session:
        entries = irepo.load_roster(
            session=session,
            current_version=case_set.version if case_set else None,
            audit_failed=audit_failed,
        )
    return _render(
        "instructor/roster.html",
        audit_ok=not audit_failed if case_set else None,
        entries=filter_roster(entries, wanted),
        counts=roster_counts(entries),
        wanted=wanted,
        filters=FILTER_LABELS,
        case_set=case_set,
        case_set_error=problem,
    )


@bp.get("/students/<name>")
@instructor_page
def student(name: str) -> ResponseReturnValue:
    case_set, problem = load_case_set()
    audit_failed = audit_failing(case_set)
    with session_scope(state().engine) as session:
        try:
            record = student_record(
                session,
                name,
                case_set.version if case_set else None,
                audit_failed=audit_failed,
            )
        except irepo.StudentNotFound:
            return render_template("error.html", status=404, message="No such student."), 404
    return _render(
        "instructor/student.html",
        record=record,
        entry=record["student"],
        actions=ACTION_LABELS,
        case_set=case_set,
        case_set_error=problem,
    )


@bp.post("/students/<name>/decision")
@instructor_page
def decide(name: str) -> ResponseReturnValue:
    status, body = apply_decision(
        instructor(), name, request.form.get("action"), request.form.get("reason")
    )
    if status == 404:
        return render_template("error.html", status=404, message="No such student."), 404
    if status == 201:
        label = DECISION_LABELS.get(body["decision"], body["decision"])
        flash(f"Recorded: {body['action']} → {label}.", "ok")
    else:
        flash(f"Not recorded: {body['error']}", "error")
    return redirect(url_for("instructor_pages.student", name=name), 303)


@bp.get("/submissions/<submission_id>")
@instructor_page
def submission(submission_id: str) -> ResponseReturnValue:
    case_set, problem = load_case_set()
    version = request.args.get("version", type=int)
    view = grading_view(submission_id, version, case_set)
    if view is None:
        return render_template("error.html", status=404, message="No such result set."), 404
    return _render(
        "instructor/submission.html",
        sub=view,
        grading=view["grading"],
        gate_order=GATE_ORDER,
        case_set=case_set,
        case_set_error=problem,
    )


@bp.post("/submissions/<submission_id>/rerun")
@instructor_page
def rerun(submission_id: str) -> ResponseReturnValue:
    status, body = regrade_rerun(instructor(), submission_ids=[submission_id], outdated=False)
    if status == 202 and body["queued"]:
        flash("Queued: the agent runs again; the current results stay until it is graded.", "ok")
    else:
        flash(
            f"Not queued: {body.get('error') or 'only a graded submission can be rerun'}", "error"
        )
    return redirect(url_for("instructor_pages.submission", submission_id=submission_id), 303)


@bp.get("/regrade")
@instructor_page
def regrade_form() -> ResponseReturnValue:
    case_set, problem = load_case_set()
    with session_scope(state().engine) as session:
        runs = regrading.list_runs(session=session)
        results = [r for rows in irepo.current_results(session=session).values() for r in rows]
    outdated = (
        sum(result.case_set_version != case_set.version for result in results) if case_set else 0
    )
    return _render(
        "instructor/regrade.html",
        runs=runs,
        preview=None,
        case_set=case_set,
        case_set_error=problem,
        graded=len(results),
        outdated=outdated,
    )


@bp.post("/regrade")
@instructor_page
def regrade() -> ResponseReturnValue:
    mode = request.form.get("mode")
    if mode == "rerun":
        status, body = regrade_rerun(instructor(), submission_ids=None, outdated=True)
        if status == 202:
            flash(f"Queued {len(body['queued'])} submissions to run again.", "ok")
            return redirect(url_for("instructor_pages.regrade_run", run_id=body["run_id"]), 303)
        flash(f"Nothing queued: {body['error']}", "error")
        return redirect(url_for("instructor_pages.regrade_form"), 303)
    preview = request.form.get("preview") == "1"
    status, body = regrade_answers(
        instructor(),
        submission_ids=None,
        dry_run=preview,
        include_up_to_date=request.form.get("include_up_to_date") == "1",
    )
    if status >= 400:
        flash(f"Not regraded: {body['error']}", "error")
        return redirect(url_for("instructor_pages.regrade_form"), 303)
    if preview:
        case_set, problem = load_case_set()
        return _render(
            "instructor/regrade_preview.html",
            preview=body,
            case_set=case_set,
            case_set_error=problem,
        )
    changed = body["decisions_changed"]
    flash(
        f"Regraded {body['regraded']} submissions from recorded answers; "
        f"{changed} decision{'' if changed == 1 else 's'} changed.",
        "ok",
    )
    return redirect(url_for("instructor_pages.regrade_run", run_id=body["run_id"]), 303)


@bp.get("/regrades/<int:run_id>")
@instructor_page
def regrade_run(run_id: int) -> ResponseReturnValue:
    with session_scope(state().engine) as session:
        run = regrading.get_run(session=session, run_id=run_id)
    if run is None:
        return render_template("error.html", status=404, message="No such regrade."), 404
    return _render("instructor/regrade_run.html", run=run)


@bp.get("/audit")
@instructor_page
def audit() -> ResponseReturnValue:
    case_set, problem = load_case_set()
    report = audit_report(case_set).as_dict() if case_set else None
    return _render(
        "instructor/audit.html", report=report, case_set=case_set, case_set_error=problem
    )
