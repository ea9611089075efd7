"""Student pages: token login, upload form with the list of submissions, feedback page.

Plain server-rendered HTML; a small script (static/app.js) polls the JSON API for live status.
Every form carries a CSRF token (Flask-WTF).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from sqlmodel import Session

from grader.core.models import GATES_BY_KIND, CaseKind
from grader.db.certificates import active_certificates
from grader.db.disclosures import release_times
from grader.db.engine import session_scope
from grader.db.submissions import list_submissions
from grader.db.tables import utcnow
from grader.db.usage import usage
from grader.instructor.students import last_decisions

from .api import feedback_standing, own_submission, quantum
from .auth import (
    auth_blocked,
    current_user,
    log_in,
    log_out,
    login_required,
    verify_token,
    via_session,
)
from .instructor_context import certificate_url
from .intake import Accepted, accept_upload, daily_limit
from .shapes import student_submission, submission_summary
from .state import state

bp = Blueprint("pages", __name__)

GATE_LABELS = {
    "citation_recall": "Cites the expected source",
    "citation_precision": "Cites only supporting sources, within the cap",
    "claim_support": "Key concepts stated and supported by a cited source",
    "citation_unique": "No repeated citation",
    "forbidden_absent": "No forbidden content",
    "answered": "Actually answers",
    "no_review_flag": "No needless review flag",
    "review_flag": "Flags for human review",
    "no_citations": "Cites nothing",
    "calibrated_confidence": "Low confidence",
    "refusal_language": "Refuses in clear words",
}
GATE_ORDER = {kind.value: [gate.value for gate in gates] for kind, gates in GATES_BY_KIND.items()}
KIND_LABELS = {CaseKind.ANSWERABLE.value: "Answerable", CaseKind.REFUSAL.value: "Refusal"}
DECISION_LABELS = {"awarded": "Awarded", "not_awarded": "Not awarded", "blocked": "Blocked"}


def rate_label(rate: dict[str, float] | None) -> str:
    """A coarse-feedback bucket as text: ``60–80%``."""
    if not rate:
        return "—"
    return f"{rate['low'] * 100:.0f}–{rate['high'] * 100:.0f}%"


def _safe_next(target: str | None) -> str:
    """Only same-site relative paths are followed after login."""
    if not target:
        return url_for("pages.submissions")
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return url_for("pages.submissions")
    return target


@bp.get("/")
def index() -> ResponseReturnValue:
    if current_user() is not None and via_session():
        return redirect(url_for("pages.submissions"))
    return redirect(url_for("pages.login"))


@bp.route("/login", methods=["GET", "POST"])
def login() -> ResponseReturnValue:
    if request.method == "POST":
        user = verify_token(request.form.get("token", "").strip())
        if user is None and auth_blocked():
            message = "Too many failed logins from your address; try again in a minute."
            return render_template("login.html", error=message), 429
        if user is None:
            return render_template("login.html", error="That token is not valid."), 401
        log_in(user)
        return redirect(_safe_next(request.args.get("next")))
    return render_template("login.html", error=None)


@bp.post("/logout")
def logout() -> ResponseReturnValue:
    log_out()
    return redirect(url_for("pages.login"))


def certificate_standing(session: Session, student_id: int) -> dict[str, Any] | None:
    """The instructor's decision on this student and the certificate in force, if any.

    The instructor's written reason is not shown: it is free text, and may name hidden cases.
    """
    last = last_decisions(session=session, student_id=student_id).get(student_id)
    if last is None:
        return None
    held = active_certificates(session=session, student_id=student_id).get(student_id)
    return {
        "state": last.to_state.value,
        "decided_at": last.created_at,
        "certificate": {"id": held.id, "url": certificate_url(held.id)} if held else None,
    }


@bp.get("/submissions")
@login_required
def submissions() -> ResponseReturnValue:
    user = current_user()
    assert user is not None and user.id is not None
    server = state()
    now = utcnow()
    with session_scope(server.engine) as session:
        rows = list_submissions(session=session, user_id=user.id)
        used = usage(session=session, user_id=user.id, now=now, hold_seconds=quantum()).submissions
        standing = certificate_standing(session, user.id)
        held = release_times(
            session=session, submission_ids=[row.id for row, _ in rows], quantum_seconds=quantum()
        )
    limit = daily_limit(server)
    return render_template(
        "submissions.html",
        user=user,
        feedback_used=feedback_standing(user),
        submissions=[
            submission_summary(row, decision, held.get(row.id), now) for row, decision in rows
        ],
        quota={"limit": limit, "used": used} if isinstance(limit, int) else None,
        decision_labels=DECISION_LABELS,
        standing=standing,
        max_upload_mib=server.settings.max_upload_bytes / (1024 * 1024),
    )


@bp.post("/submissions")
@login_required
def upload() -> ResponseReturnValue:
    user = current_user()
    assert user is not None
    outcome = accept_upload(state(), user, request.files.get("package"))
    if isinstance(outcome, Accepted):
        flash("Uploaded: your agent is queued for grading.", "ok")
        return redirect(url_for("pages.submission", submission_id=outcome.submission.id))
    flash(f"Upload refused: {outcome.reason}", "error")
    return redirect(url_for("pages.submissions")), 303


@bp.get("/submissions/<submission_id>")
@login_required
def submission(submission_id: str) -> ResponseReturnValue:
    user = current_user()
    assert user is not None
    found = own_submission(submission_id, user)
    if found is None:
        return render_template("error.html", status=404, message="No such submission."), 404
    with session_scope(state().engine) as session:
        held = release_times(
            session=session, submission_ids=[submission_id], quantum_seconds=quantum()
        )
    return render_template(
        "submission.html",
        user=user,
        feedback_used=feedback_standing(user),
        sub=student_submission(*found, held.get(submission_id), utcnow()),
        gate_labels=GATE_LABELS,
        gate_order=GATE_ORDER,
        kind_labels=KIND_LABELS,
        decision_labels=DECISION_LABELS,
        rate_label=rate_label,
    )
