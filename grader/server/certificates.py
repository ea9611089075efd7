"""Public certificate verification, and a student's own certificate.

``GET /certificates/<token>`` needs no login: anyone holding the signed URL sees the name, the
course, the case-set version, the date and whether the certificate is valid or revoked — and
nothing else. A token that does not verify (forged, altered, signed with another key) is a 404,
exactly like a token for a certificate that does not exist. JSON with ``?format=json`` or
``Accept: application/json``.

``GET /api/certificate`` tells the caller (a student) their certificate and its URL, if any.
"""

from __future__ import annotations

from flask import Blueprint, jsonify, render_template, request
from flask.typing import ResponseReturnValue

from grader.db.certificates import active_certificates
from grader.db.engine import session_scope
from grader.instructor.certificates import read_certificate_token
from grader.instructor.students import public_certificate

from .auth import api_auth, current_user
from .instructor_context import certificate_url, course_name
from .state import state

bp = Blueprint("certificates", __name__)


def _wants_json() -> bool:
    if request.args.get("format") == "json":
        return True
    best = request.accept_mimetypes.best_match(["text/html", "application/json"])
    return best == "application/json"


@bp.get("/certificates/<token>")
def verify(token: str) -> ResponseReturnValue:
    certificate = None
    certificate_id = read_certificate_token(
        token, secret_key=state().settings.resolved_secret_key()
    )
    if certificate_id is not None:
        with session_scope(state().engine) as session:
            certificate = public_certificate(
                session=session, certificate_id=certificate_id, course=course_name()
            )
    if certificate is None:
        if _wants_json():
            return jsonify(error="no such certificate"), 404
        return render_template("instructor/certificate_public.html", certificate=None), 404
    response = (
        jsonify(certificate.as_dict())
        if _wants_json()
        else render_template("instructor/certificate_public.html", certificate=certificate)
    )
    # The status can change (revocation): never serve a stale copy.
    if isinstance(response, str):
        return response, 200, {"Cache-Control": "no-store", "X-Robots-Tag": "noindex"}
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Robots-Tag"] = "noindex"
    return response


@bp.get("/api/certificate")
@api_auth()
def mine() -> ResponseReturnValue:
    """The caller's certificate in force (instructor-confirmed and not revoked), or null."""
    user = current_user()
    assert user is not None and user.id is not None
    with session_scope(state().engine) as session:
        held = active_certificates(session=session, student_id=user.id).get(user.id)
    if held is None:
        return jsonify(certificate=None)
    return jsonify(
        certificate={
            "id": held.id,
            "case_set_version": held.case_set_version,
            "date": held.issued_at.date().isoformat(),
            "url": certificate_url(held.id),
        }
    )
