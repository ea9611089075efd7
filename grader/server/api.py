"""The student API (DESIGN §12): upload, list and read one's own submissions."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue

from grader.db import disclosures, submissions
from grader.db.tables import GradingRow, SubmissionRow, UserRow, utcnow
from grader.db.usage import usage
from grader.exceptions import CaseSetError

from .auth import api_auth, current_user
from .intake import Accepted, accept_upload, daily_limit
from .shapes import student_submission, submission_summary
from .state import read_session, state

bp = Blueprint("api", __name__, url_prefix="/api")


def error(status: int, message: str) -> ResponseReturnValue:
    return jsonify(error=message), status


def _user() -> UserRow:
    user = current_user()
    assert user is not None  # api_auth ran first
    return user


@bp.post("/submissions")
@api_auth()
def create_submission() -> ResponseReturnValue:
    """202 ``{"id", "status": "queued"}``; 400 bad archive, 413 too large, 429 over quota."""
    outcome = accept_upload(state(), _user(), request.files.get("package"))
    if not isinstance(outcome, Accepted):
        return error(outcome.status, outcome.reason)
    submission = outcome.submission
    response = jsonify(id=submission.id, status=submission.status)
    response.status_code = 202
    response.headers["Location"] = f"/api/submissions/{submission.id}"
    return response


@bp.get("/submissions")
@api_auth()
def list_submissions() -> ResponseReturnValue:
    """The caller's own submissions, newest first."""
    user = _user()
    assert user.id is not None
    session = read_session()
    rows = submissions.list_submissions(session=session, user_id=user.id)
    held = disclosures.release_times(
        session=session, submission_ids=[row.id for row, _ in rows], quantum_seconds=quantum()
    )
    now = utcnow()
    return jsonify(
        submissions=[
            submission_summary(row, decision, held.get(row.id), now) for row, decision in rows
        ]
    )


def own_submission(
    submission_id: str, user: UserRow
) -> tuple[SubmissionRow, GradingRow | None] | None:
    """The caller's submission and its current result set; None for anyone else's."""
    found = submissions.get_submission_with_grading(
        session=read_session(), submission_id=submission_id
    )
    if found is None or found[0].user_id != user.id:
        return None  # another student's submission is indistinguishable from none
    return found


@bp.get("/submissions/<submission_id>")
@api_auth()
def get_submission(submission_id: str) -> ResponseReturnValue:
    """``{"id", "status", "feedback"}`` for one of the caller's submissions; 404 otherwise."""
    found = own_submission(submission_id, _user())
    if found is None:
        return error(404, "no such submission")
    held = disclosures.release_times(
        session=read_session(), submission_ids=[submission_id], quantum_seconds=quantum()
    )
    return jsonify(student_submission(*found, held.get(submission_id), utcnow()))


def quantum() -> float:
    """The current policy's time quantum (0 when the case set cannot load)."""
    try:
        return state().case_sets.get().policy.feedback_time_quantum_seconds
    except CaseSetError:
        return 0.0


def feedback_standing(user: UserRow) -> dict[str, Any] | None:
    """The student's feedback used on the current case-set version (null when the case set
    cannot load)."""
    assert user.id is not None
    try:
        case_set = state().case_sets.get()
    except CaseSetError:
        return None
    return disclosures.standing(
        session=read_session(),
        user_id=user.id,
        case_set_version=case_set.version,
        policy=case_set.policy,
        now=utcnow(),
    ).as_dict()


@bp.get("/me")
@api_auth()
def me() -> ResponseReturnValue:
    """The caller's name, role, daily quota, storage budget and failed-start cap."""
    user = _user()
    assert user.id is not None
    server = state()
    limit = daily_limit(server)
    used = usage(session=read_session(), user_id=user.id, now=utcnow(), hold_seconds=quantum())
    quota = None
    if isinstance(limit, int):
        quota = {
            "limit": limit,
            "used": used.submissions,
            "remaining": max(limit - used.submissions, 0),
        }
    budget = server.settings.storage_bytes_per_day
    failed_cap = server.settings.failed_starts_per_day
    return jsonify(
        name=user.name,
        role=user.role,
        quota=quota,
        storage={
            "limit_bytes": budget,
            "used_bytes": used.bytes,
            "remaining_bytes": max(budget - used.bytes, 0),
        },
        failed_starts={
            "limit": failed_cap,
            "used": used.failed_starts,
            "remaining": max(failed_cap - used.failed_starts, 0),
        },
        feedback=feedback_standing(user),
    )
