"""The grading web server: ``create_app(settings)`` builds a Flask app (DESIGN §2, §8, §12).

Blueprints, one per module and URL prefix, all registered here: :mod:`.api` (student API),
:mod:`.instructor_api` (``/api/instructor``), :mod:`.instructor_pages` (``/instructor``),
:mod:`.certificates` (verification and a student's certificate), :mod:`.pages` (student
pages), :mod:`.health` (``/healthz``, ``/metrics``) and :mod:`.practice` (the public practice
set). The app holds no
state of its own beyond connection pools: submissions live in the database, work in Redis,
archives in storage — so any number of server processes can run side by side.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from flask import Flask, Response, request
from flask_limiter import Limiter
from flask_wtf.csrf import CSRFProtect
from prometheus_client import CollectorRegistry
from redis import Redis
from sqlalchemy.engine import Engine

from grader.db.archive_store import open_archive_store
from grader.db.engine import make_engine
from grader.settings import Settings
from grader.worker.enqueue import make_queue

from . import (
    api,
    certificates,
    comparisons,
    health,
    instructor_api,
    instructor_pages,
    pages,
    practice,
)
from .auth import rate_limit_key
from .errors import register_error_handlers
from .metrics import GraderCollector
from .state import EXTENSION_KEY, CaseSetCache, ServerState, close_read_session
from .throttle import AuthFailureGuard, TrustedProxies, client_address

__all__ = ["ServerState", "create_app", "upload_body_limit"]

#: Room for the multipart envelope around an archive of ``max_upload_bytes``.
_MULTIPART_OVERHEAD = 64 * 1024

_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


def upload_body_limit(settings: Settings) -> int:
    """The largest request body accepted: an archive of ``max_upload_bytes`` in its envelope."""
    return settings.max_upload_bytes + _MULTIPART_OVERHEAD


def create_app(
    settings: Settings, *, engine: Engine | None = None, redis: Redis | None = None
) -> Flask:
    """A configured app. The schema must exist (``grader serve`` migrates before serving)."""
    app = Flask(__name__)
    app.config.update(
        SECRET_KEY=settings.resolved_secret_key(),
        MAX_CONTENT_LENGTH=upload_body_limit(settings),
        SESSION_COOKIE_NAME="grader_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.secure_cookies,
        PERMANENT_SESSION_LIFETIME=timedelta(hours=12),
        WTF_CSRF_TIME_LIMIT=12 * 3600,
        JSON_SORT_KEYS=False,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    engine = engine or make_engine(settings.database_url)
    redis = redis or Redis.from_url(
        settings.redis_url, socket_timeout=5, socket_connect_timeout=5, health_check_interval=30
    )
    server = ServerState(
        settings=settings,
        engine=engine,
        redis=redis,
        queue=make_queue(settings, redis),
        store=open_archive_store(
            settings.storage_url,
            storage_dir=settings.storage_dir,
            database_url=settings.database_url,
            engine=engine,
        ),
        case_sets=CaseSetCache(settings.cases_dir),
    )
    app.extensions[EXTENSION_KEY] = server

    registry = CollectorRegistry(auto_describe=True)
    registry.register(GraderCollector(server))
    app.extensions["grader_metrics"] = registry

    csrf = CSRFProtect(app)
    limiter = Limiter(
        rate_limit_key,
        app=app,
        storage_uri=settings.redis_url,
        storage_options={"socket_timeout": 2, "socket_connect_timeout": 2},
        key_prefix=f"{settings.queue_name}-limits",
        strategy="fixed-window",
        default_limits=[settings.rate_limit],
        default_limits_exempt_when=lambda: request.endpoint == "static",
        # X-RateLimit-* headers would cost two more Redis round trips on every request; a 429
        # carries Retry-After instead (errors.py).
        headers_enabled=False,
        swallow_errors=True,  # a Redis outage must not stop uploads (the DB is the truth)
    )

    server.auth_guard = AuthFailureGuard(
        limiter.limiter, settings.auth_failure_limit, prefix=f"{settings.queue_name}-limits"
    )
    # The client address every limit and the /metrics loopback rule see (X-Forwarded-For only
    # from the configured proxies).
    app.wsgi_app = TrustedProxies(  # type: ignore[method-assign]
        app.wsgi_app, settings.trusted_proxy_networks()
    )

    blueprints = (
        api.bp,
        instructor_api.bp,
        instructor_pages.bp,
        certificates.bp,
        pages.bp,
        health.bp,
        practice.bp,
        comparisons.bp,
    )
    for blueprint in blueprints:
        app.register_blueprint(blueprint)
    # Token-authenticated JSON APIs are not cookie forms: no CSRF token (see auth.py).
    for blueprint in (api.bp, instructor_api.bp, certificates.bp, health.bp):
        csrf.exempt(blueprint)
    limiter.exempt(health.bp)
    # Route limits wrap the registered view functions (Flask-Limiter checks them on call).
    per_route = {
        "api.create_submission": limiter.limit(settings.upload_rate_limit, methods=["POST"]),
        "pages.upload": limiter.limit(settings.upload_rate_limit, methods=["POST"]),
        "pages.login": limiter.limit("20 per minute", key_func=client_address, methods=["POST"]),
    }
    for endpoint, limit in per_route.items():
        app.view_functions[endpoint] = cast(Any, limit(app.view_functions[endpoint]))

    register_error_handlers(app, max_upload_bytes=settings.max_upload_bytes)
    app.teardown_appcontext(close_read_session)

    @app.after_request
    def security_headers(response: Response) -> Response:
        for name, value in _SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if request.path.startswith("/api/"):
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    return app
