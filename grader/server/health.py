"""Health and metrics: ``/healthz`` (DB and Redis answer) and ``/metrics`` (Prometheus)."""

from __future__ import annotations

import logging

import sqlalchemy as sa
from flask import Blueprint, Response, current_app, jsonify
from flask.typing import ResponseReturnValue
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from .state import state

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


@bp.get("/metrics")
def metrics() -> ResponseReturnValue:
    registry: CollectorRegistry = current_app.extensions["grader_metrics"]
    return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
