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
from grader.exceptions import GraderError, StudentNotFound, SubmissionNotFound
from grader.instructor import console
from grader.instructor.decisions import DecisionAction
from grader.instructor.regrades import RerunPlan, get_run, list_runs, regrade_from_answers
from grader.instructor.roster import RosterFilter, filter_roster, roster_counts

from . import shapes
from .auth import current_user, login_required
from .instructor_context import (
    current,
    enqueue_rerun,
    instructor,
    load_case_set,
    roster_now,
    student_json,
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


def _not_found(message: str) -> ResponseReturnValue:
    return render_template("error.html", status=404, message=message), 404


@bp.get("/")
@instructor_page
def roster() -> ResponseReturnValue:
    try:
        wanted = RosterFilter(request.args.get("filter", RosterFilter.ALL.value))
    except ValueError:
        wanted = RosterFilter.ALL
    now = current()
    entries = roster_now(now)
    return _render(
        "instructor/roster.html",
        audit_ok=not now.audit_failed if now.case_set else None,
        entries=filter_roster(entries, wanted),
        counts=roster_counts(entries),
        wanted=wanted,
        filters=FILTER_LABELS,
        case_set=now.case_set,
        case_set_error=now.problem,
    )


@bp.get("/students/<name>")
@instructor_page
def student(name: str) -> ResponseReturnValue:
    now = current()
    try:
        record = student_json(name, now)
    except StudentNotFound:
        return _not_found("No such student.")
    return _render(
        "instructor/student.html",
        record=record,
        entry=record["student"],
        actions=ACTION_LABELS,
        case_set=now.case_set,
        case_set_error=now.problem,
    )


@bp.post("/students/<name>/decision")
@instructor_page
def decide(name: str) -> ResponseReturnValue:
    case_set, _ = load_case_set()
    try:
        with session_scope(state().engine) as session:
            outcome = console.decide(
                session=session,
                actor=instructor(),
                student=name,
                action=request.form.get("action"),
                reason=request.form.get("reason"),
                current_version=case_set.version if case_set else None,
            )
    except StudentNotFound:
        return _not_found("No such student.")
    except GraderError as exc:
        flash(f"Not recorded: {exc}", "error")
    else:
        state_ = outcome.row.to_state
        flash(f"Recorded: {outcome.row.action} → {DECISION_LABELS.get(state_, state_)}.", "ok")
    return redirect(url_for("instructor_pages.student", name=name), 303)


@bp.get("/submissions/<submission_id>")
@instructor_page
def submission(submission_id: str) -> ResponseReturnValue:
    case_set, problem = load_case_set()
    version = request.args.get("version", type=int)
    try:
        with session_scope(state().engine) as session:
            view = shapes.grading_view(
                console.grading_view(
                    session=session, submission_id=submission_id, version=version, case_set=case_set
                )
            )
    except SubmissionNotFound:
        return _not_found("No such result set.")
    return _render(
        "instructor/submission.html",
        sub=view,
        grading=view["grading"],
        gate_order=GATE_ORDER,
        case_set=case_set,
        case_set_error=problem,
    )


def _rerun(submission_ids: list[str] | None) -> RerunPlan:
    """Plan and enqueue a rerun (of the named submissions, or of every outdated one)."""
    case_set = console.require_case_set(*load_case_set())
    with session_scope(state().engine) as session:
        plan = console.plan_rerun(
            session=session,
            case_set=case_set,
            actor=instructor(),
            submission_ids=submission_ids,
            outdated=submission_ids is None,
            archive_exists=state().store.exists,
        )
    enqueue_rerun(plan)
    return plan


@bp.post("/submissions/<submission_id>/rerun")
@instructor_page
def rerun(submission_id: str) -> ResponseReturnValue:
    try:
        plan = _rerun([submission_id])
    except GraderError as exc:
        flash(f"Not queued: {exc}", "error")
    else:
        if plan.jobs:
            flash(
                "Queued: the agent runs again; the current results stay until it is graded.", "ok"
            )
        else:
            flash("Not queued: only a graded submission can be rerun", "error")
    return redirect(url_for("instructor_pages.submission", submission_id=submission_id), 303)


@bp.get("/regrade")
@instructor_page
def regrade_form() -> ResponseReturnValue:
    case_set, problem = load_case_set()
    with session_scope(state().engine) as session:
        runs = [shapes.regrade_run(record) for record in list_runs(session=session)]
        standing = console.standing(session=session, version=case_set.version if case_set else None)
    return _render(
        "instructor/regrade.html",
        runs=runs,
        preview=None,
        case_set=case_set,
        case_set_error=problem,
        graded=standing.graded,
        outdated=len(standing.outdated),
    )


@bp.post("/regrade")
@instructor_page
def regrade() -> ResponseReturnValue:
    if request.form.get("mode") == "rerun":
        try:
            plan = _rerun(None)
        except GraderError as exc:
            flash(f"Nothing queued: {exc}", "error")
            return redirect(url_for("instructor_pages.regrade_form"), 303)
        flash(f"Queued {len(plan.jobs)} submissions to run again.", "ok")
        return redirect(url_for("instructor_pages.regrade_run", run_id=plan.run_id), 303)
    preview = request.form.get("preview") == "1"
    case_set, problem = load_case_set()
    try:
        with session_scope(state().engine) as session:
            result = regrade_from_answers(
                session=session,
                case_set=console.require_case_set(case_set, problem),
                actor=instructor(),
                submission_ids=None,
                dry_run=preview,
                include_up_to_date=request.form.get("include_up_to_date") == "1",
            )
    except GraderError as exc:
        flash(f"Not regraded: {exc}", "error")
        return redirect(url_for("instructor_pages.regrade_form"), 303)
    body = result.as_dict()
    if preview:
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
        record = get_run(session=session, run_id=run_id)
        run = shapes.regrade_run(record, with_items=True) if record else None
    if run is None:
        return _not_found("No such regrade.")
    return _render("instructor/regrade_run.html", run=run)


@bp.get("/audit")
@instructor_page
def audit() -> ResponseReturnValue:
    case_set, problem = load_case_set()
    report = state().audits.report(case_set).as_dict() if case_set else None
    return _render(
        "instructor/audit.html", report=report, case_set=case_set, case_set_error=problem
    )
