"""Error responses: JSON ``{"error": "..."}`` under /api, small HTML pages elsewhere."""

from __future__ import annotations

import logging

from flask import Flask, Response, jsonify, make_response, render_template, request
from flask.typing import ResponseReturnValue
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

log = logging.getLogger("grader.server")

MESSAGES = {
    400: "Bad request.",
    401: "Please log in.",
    403: "Not allowed.",
    404: "Not found.",
    405: "Method not allowed.",
    413: "Upload too large.",
    429: "Too many requests; slow down.",
    500: "Internal error.",
    503: "Unavailable right now.",
}


def too_large_message(max_upload_bytes: int) -> str:
    return f"upload too large (limit {max_upload_bytes} bytes)"


def wants_json() -> bool:
    return request.path.startswith("/api/") or request.path in ("/healthz", "/metrics")


def _respond(status: int, message: str) -> Response:
    if wants_json():
        response = jsonify(error=message)
    else:
        response = make_response(render_template("error.html", status=status, message=message))
    response.status_code = status
    return response


def register_error_handlers(app: Flask, *, max_upload_bytes: int) -> None:
    @app.errorhandler(RequestEntityTooLarge)
    def too_large(_exc: RequestEntityTooLarge) -> ResponseReturnValue:
        return _respond(413, too_large_message(max_upload_bytes))

    @app.errorhandler(CSRFError)
    def csrf_error(_exc: CSRFError) -> ResponseReturnValue:
        return _respond(400, "The form expired or was not sent by this site; reload the page.")

    @app.errorhandler(429)
    def rate_limited(exc: HTTPException) -> ResponseReturnValue:
        detail = exc.description if isinstance(exc.description, str) else ""
        response = _respond(429, f"rate limit exceeded ({detail})" if detail else MESSAGES[429])
        limit = getattr(exc, "limit", None)  # flask_limiter.RateLimitExceeded
        expiry = getattr(getattr(limit, "limit", None), "get_expiry", None)
        response.headers["Retry-After"] = str(int(expiry()) if callable(expiry) else 60)
        return response

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> ResponseReturnValue:
        status = exc.code or 500
        return _respond(status, MESSAGES.get(status, exc.name))

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> ResponseReturnValue:
        if isinstance(exc, HTTPException):
            return http_error(exc)
        log.exception("unhandled error on %s %s", request.method, request.path)
        return _respond(500, MESSAGES[500])
