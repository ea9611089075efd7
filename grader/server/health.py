"""Health and metrics: ``/healthz`` (DB and Redis answer) and ``/metrics`` (Prometheus, for
instructors, this host and the holder of ``GRADER_METRICS_TOKEN`` only)."""

from __future__ import annotations

import hmac
import logging

import sqlalchemy as sa
from flask import Blueprint, Response, current_app, jsonify
from flask.typing import ResponseReturnValue
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from grader.db.tables import Role

from .auth import auth_blocked, bearer_token, current_user, refused_auth_response
from .state import state
from .throttle import direct_from_loopback

log = logging.getLogger("grader.server")

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> ResponseReturnValue:
    """200 when the database and Redis both answer, else 503 naming which did not."""
    server = state()
    checks: dict[str, str] = {}
    try:
        with server.engine.connect() as connection:
            connection.execute(sa.text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        log.warning("healthz: database: %s", exc)
        checks["database"] = "unavailable"
    try:
        server.redis.ping()
        checks["redis"] = "ok"
    except Exception as exc:
        log.warning("healthz: redis: %s", exc)
        checks["redis"] = "unavailable"
    healthy = all(value == "ok" for value in checks.values())
    return jsonify(status="ok" if healthy else "unavailable", **checks), 200 if healthy else 503


def metrics_allowed() -> bool:
    """``/metrics`` is for the operator's scraper and staff, not for students or the public.

    Allowed: a bearer token equal to ``GRADER_METRICS_TOKEN`` (when set), a request straight
    from this host (loopback, not relayed by a proxy), or an instructor (token or page session).
    """
    expected = state().settings.metrics_token
    token = bearer_token()
    if expected and token is not None and hmac.compare_digest(token.encode(), expected.encode()):
        return True
    if direct_from_loopback():
        return True
    user = current_user()  # a wrong token counts as a failed authentication of the address
    return user is not None and user.role == Role.INSTRUCTOR.value


@bp.get("/metrics")
def metrics() -> ResponseReturnValue:
    """Prometheus text for allowed callers; 404 for anyone else (429 after failed tries)."""
    if not metrics_allowed():
        if auth_blocked():
            return refused_auth_response()
        return jsonify(error="Not found."), 404
    registry: CollectorRegistry = current_app.extensions["grader_metrics"]
    return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
