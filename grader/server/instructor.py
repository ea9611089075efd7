"""Instructor API (DESIGN §12). Issue 5 adds certificate decisions and exports here."""

from __future__ import annotations

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue

from grader.core.views import instructor_view
from grader.db import repository as repo
from grader.db.engine import session_scope
from grader.db.tables import Role, SubmissionStatus
from grader.exceptions import CaseSetError

from .auth import api_auth
from .state import state

bp = Blueprint("instructor", __name__, url_prefix="/api/instructor")


@bp.get("/submissions/<submission_id>")
@api_auth(Role.INSTRUCTOR)
def get_submission(submission_id: str) -> ResponseReturnValue:
    """The instructor view of the current result set (rebuilt from eval records) and metadata.

    Questions and slices are filled in when the loaded case set is the version the submission
    was graded on.
    """
    server = state()
    with session_scope(server.engine) as session:
        row = repo.get_submission(session=session, submission_id=submission_id)
        if row is None:
            return jsonify(error="no such submission"), 404
        user = repo.get_user(session=session, user_id=row.user_id)
        gradings = repo.list_gradings(session=session, submission_id=row.id)
        grading = next((g for g in gradings if g.id == row.current_grading_id), None)
        report = (
            repo.load_report(session=session, grading_id=grading.id)
            if grading is not None and grading.id is not None
            else None
        )
    body: dict[str, object] = {
        "id": row.id,
        "status": row.status,
        "student": user.name if user else None,
        "created_at": row.created_at.isoformat(),
        "attempts": row.attempts,
        "failure_kind": row.failure_kind,
        "reason": row.failure_reason,
        "gradings": [
            {
                "version": g.version,
                "trigger": g.trigger,
                "decision": g.decision,
                "current": g.id == row.current_grading_id,
            }
            for g in gradings
        ],
    }
    if report is not None and row.status == SubmissionStatus.GRADED:
        cases = None
        try:
            case_set = server.case_sets.get()
        except CaseSetError:
            case_set = None
        if case_set is not None and case_set.version == report.versions.case_set:
            cases = case_set.by_id()
        # The same JSON as `grader grade --view instructor --json`, plus the fields above.
        body = {**instructor_view(report, cases=cases), **body}
        body["grading_version"] = grading.version if grading else None
    return jsonify(body)
