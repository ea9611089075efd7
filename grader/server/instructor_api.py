"""Instructor JSON API under ``/api/instructor`` (DESIGN §6, §7, §12): roster, decisions,
exports, submissions, regrades, case set and evaluator audit.

Routes only: each parses the request, calls a use case of :mod:`grader.instructor.console`
and shapes the answer with :mod:`.shapes`. Every route is for instructors only (403 for a
student, 401 without credentials) through :func:`grader.server.auth.api_auth`: a bearer token,
or for ``GET`` the page session. Domain errors become statuses in :func:`domain_error`.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request
from flask.typing import ResponseReturnValue
from sqlmodel import Session

from grader.core.views import instructor_view
from grader.db.engine import session_scope
from grader.db.results import iter_eval_record_rows, list_gradings, load_report
from grader.db.submissions import get_submission
from grader.db.tables import Role, SubmissionStatus
from grader.db.users import get_user, user_names
from grader.exceptions import (
    CaseSetUnavailable,
    GraderError,
    InvalidTransition,
    StudentNotFound,
    SubmissionNotFound,
)
from grader.instructor import console
from grader.instructor.regrades import RegradeMode, get_run, list_runs, regrade_from_answers
from grader.instructor.roster import RosterFilter, filter_roster, roster_counts

from . import shapes
from .auth import api_auth
from .instructor_context import (
    certificate_url,
    current,
    enqueue_rerun,
    instructor,
    load_case_set,
    roster_now,
    student_json,
)
from .state import state

bp = Blueprint("instructor_console", __name__, url_prefix="/api/instructor")

#: The HTTP status of each domain error (anything else is bad input: 400).
_STATUS: dict[type[GraderError], int] = {
    StudentNotFound: 404,
    SubmissionNotFound: 404,
    InvalidTransition: 409,
    CaseSetUnavailable: 503,
}


@bp.errorhandler(GraderError)
def domain_error(exc: GraderError) -> ResponseReturnValue:
    status = next((code for kind, code in _STATUS.items() if isinstance(exc, kind)), 400)
    return jsonify(error=str(exc)), status


# --------------------------------------------------------------------------------------------
# Roster and decisions


@bp.get("/students")
@api_auth(Role.INSTRUCTOR)
def students() -> ResponseReturnValue:
    """Every student: best and latest result, proposal, current decision (``?filter=``)."""
    try:
        wanted = RosterFilter(request.args.get("filter", RosterFilter.ALL.value))
    except ValueError:
        choices = ", ".join(f.value for f in RosterFilter)
        return jsonify(error=f"filter must be one of: {choices}"), 400
    now = current()
    entries = roster_now(now)
    return jsonify(
        case_set_version=now.version,
        case_set_error=now.problem,
        counts={f.value: n for f, n in roster_counts(entries).items()},
        filter=wanted.value,
        students=[entry.as_dict() for entry in filter_roster(entries, wanted)],
    )


@bp.get("/students/<name>")
@api_auth(Role.INSTRUCTOR)
def student(name: str) -> ResponseReturnValue:
    return jsonify(student_json(name, current()))


@bp.post("/certificates")
@api_auth(Role.INSTRUCTOR)
def decide() -> ResponseReturnValue:
    """``{"student", "decision", "reason"}``: confirm | award | withhold | revoke (audited)."""
    data = request.get_json(silent=True)
    if not isinstance(data, dict):
        return jsonify(error='send JSON: {"student": ..., "decision": ..., "reason": ...}'), 400
    case_set, _ = load_case_set()
    with session_scope(state().engine) as session:
        outcome = console.decide(
            session=session,
            actor=instructor(),
            student=data.get("student"),
            action=data.get("decision"),
            reason=data.get("reason"),
            current_version=case_set.version if case_set else None,
        )
        url = certificate_url(outcome.certificate.id) if outcome.certificate else None
        body = shapes.decision(outcome, url)
    return jsonify(body), 201


@bp.get("/decisions")
@api_auth(Role.INSTRUCTOR)
def decisions() -> ResponseReturnValue:
    """The whole audit trail (or one student's, ``?student=``), oldest first."""
    with session_scope(state().engine) as session:
        trail = console.student_trail(session=session, name=request.args.get("student"))
    return jsonify(decisions=[shapes.trail_entry(entry) for entry in trail])


@bp.get("/certificates.csv")
@api_auth(Role.INSTRUCTOR)
def certificates_csv() -> ResponseReturnValue:
    """Every student's current decision, its source (policy or instructor) and reason."""
    return Response(
        shapes.decisions_csv(roster_now(current())),
        mimetype="text/csv",
        headers={"Content-Disposition": 'attachment; filename="certificate-decisions.csv"'},
    )


# --------------------------------------------------------------------------------------------
# Submissions: the current result set, any result set in detail, eval records


@bp.get("/submissions/<submission_id>")
@api_auth(Role.INSTRUCTOR)
def get_submission_view(submission_id: str) -> ResponseReturnValue:
    """The instructor view of the current result set (rebuilt from eval records) and metadata.

    Questions and slices are filled in when the loaded case set is the version the submission
    was graded on. The same JSON as ``grader grade --view instructor --json``, plus metadata.
    """
    with session_scope(state().engine) as session:
        row = get_submission(session=session, submission_id=submission_id)
        if row is None:
            raise SubmissionNotFound("no such submission")
        user = get_user(session=session, user_id=row.user_id)
        gradings = list_gradings(session=session, submission_id=row.id)
        grading = next((g for g in gradings if g.id == row.current_grading_id), None)
        report = (
            load_report(session=session, grading_id=grading.id)
            if grading is not None and grading.id is not None
            else None
        )
    body = shapes.instructor_submission(row, user.name if user else None, gradings)
    if report is not None and row.status == SubmissionStatus.GRADED:
        case_set, _ = load_case_set()
        same = case_set is not None and case_set.version == report.versions.case_set
        cases = case_set.by_id() if case_set is not None and same else None
        body = {**instructor_view(report, cases=cases), **body}
        body["grading_version"] = grading.version if grading else None
    return jsonify(body)


@bp.get("/submissions/<submission_id>/gradings/<int:version>")
@api_auth(Role.INSTRUCTOR)
def grading_detail(submission_id: str, version: int) -> ResponseReturnValue:
    """One result set (current or earlier) with per-gate and per-slice summaries."""
    case_set, _ = load_case_set()
    with session_scope(state().engine) as session:
        view = console.grading_view(
            session=session, submission_id=submission_id, version=version, case_set=case_set
        )
        body = shapes.grading_view(view)
    return jsonify(body)


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
            if get_submission(session=session, submission_id=submission_id) is None:
                raise SubmissionNotFound("no such submission")

    def generate() -> Any:
        with Session(engine) as session:
            names = user_names(session=session)
            rows = iter_eval_record_rows(
                session=session, submission_id=submission_id, current_only=current_only
            )
            yield from shapes.jsonl(
                shapes.eval_record(
                    record, grading=grading, student=names.get(user_id, ""), current=current
                )
                for record, grading, user_id, current in rows
            )

    name = f"eval-records-{submission_id}.jsonl" if submission_id else "eval-records.jsonl"
    return Response(
        generate(),  # needs no request context: the engine is captured
        mimetype="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


# --------------------------------------------------------------------------------------------
# Regrades


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
        return jsonify(error='send JSON: {"mode": "answers" | "rerun", ...}'), 400
    submissions = data.get("submissions")
    ids = None
    if submissions is not None:
        if not isinstance(submissions, list) or not all(isinstance(s, str) for s in submissions):
            return jsonify(error="'submissions' must be a list of submission ids"), 400
        ids = list(submissions)
    mode = data.get("mode")
    if mode not in (RegradeMode.ANSWERS.value, RegradeMode.RERUN.value):
        return jsonify(error="mode must be 'answers' or 'rerun'"), 400
    case_set = console.require_case_set(*load_case_set())
    with session_scope(state().engine) as session:
        if mode == RegradeMode.RERUN.value:
            plan = console.plan_rerun(
                session=session,
                case_set=case_set,
                actor=instructor(),
                submission_ids=ids,
                outdated=data.get("outdated") is True,
                archive_exists=state().store.exists,
            )
        else:
            dry_run = data.get("dry_run") is True
            result = regrade_from_answers(
                session=session,
                case_set=case_set,
                actor=instructor(),
                submission_ids=ids,
                dry_run=dry_run,
                include_up_to_date=data.get("include_up_to_date") is True,
            )
    if mode == RegradeMode.RERUN.value:
        return jsonify({**plan.as_dict(), "not_enqueued": enqueue_rerun(plan)}), 202
    return jsonify(result.as_dict()), 200 if dry_run else 201


@bp.get("/regrades")
@api_auth(Role.INSTRUCTOR)
def regrades() -> ResponseReturnValue:
    with session_scope(state().engine) as session:
        runs = [shapes.regrade_run(record) for record in list_runs(session=session)]
    return jsonify(regrades=runs)


@bp.get("/regrades/<int:run_id>")
@api_auth(Role.INSTRUCTOR)
def regrade(run_id: int) -> ResponseReturnValue:
    with session_scope(state().engine) as session:
        record = get_run(session=session, run_id=run_id)
        body = shapes.regrade_run(record, with_items=True) if record else None
    if body is None:
        return jsonify(error="no such regrade"), 404
    return jsonify(body)


# --------------------------------------------------------------------------------------------
# Case set and evaluator audit


@bp.get("/case-set")
@api_auth(Role.INSTRUCTOR)
def case_set_info() -> ResponseReturnValue:
    """The current case-set version and how many current results were graded on another."""
    case_set = console.require_case_set(*load_case_set())
    with session_scope(state().engine) as session:
        standing = console.standing(session=session, version=case_set.version)
    return jsonify(
        version=case_set.version,
        versions=case_set.versions.model_dump(mode="json"),
        counts=case_set.counts(),
        documents=len(case_set.corpus),
        warnings=list(case_set.warnings),
        graded_submissions=standing.graded,
        outdated_submissions=len(standing.outdated),
    )


@bp.get("/audit")
@api_auth(Role.INSTRUCTOR)
def audit() -> ResponseReturnValue:
    """The canary audit (DESIGN §9) of the current case set; ``ok`` is the verdict."""
    case_set = console.require_case_set(*load_case_set())
    return jsonify(state().audits.report(case_set).as_dict())
