"""Who is calling: a bearer token (API) or a signed session cookie (pages).

Tokens are looked up by their SHA-256 and compared in constant time
(:func:`grader.db.repository.find_user_by_token`). A page login stores the user id and a short
fingerprint of the token hash in Flask's signed session cookie, so rotating a token ends every
session opened with the old one. The API accepts the session cookie for reading only (``GET``):
the pages poll it for live status, and a cross-site form can never make a state-changing API
call with it (uploads through the API need the bearer header; the page form has a CSRF token).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

from flask import g, jsonify, redirect, request, session, url_for
from flask.typing import ResponseReturnValue

from grader.db import repository as repo
from grader.db.tables import Role, UserRow

from .state import read_session

P = ParamSpec("P")
R = TypeVar("R")

SESSION_USER = "uid"
SESSION_FINGERPRINT = "tfp"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def fingerprint(user: UserRow) -> str:
    """A short value that changes when the user's token does (kept in the session cookie)."""
    return hashlib.sha256(b"session:" + user.token_hash.encode()).hexdigest()[:16]


def bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _load_user() -> UserRow | None:
    token = bearer_token()
    db = read_session()
    if token is not None:
        return repo.find_user_by_token(session=db, token=token)
    user_id = session.get(SESSION_USER)
    if not isinstance(user_id, int):
        return None
    user = repo.get_user(session=db, user_id=user_id)
    if user is None or not user.active:
        return None
    if not hmac.compare_digest(str(session.get(SESSION_FINGERPRINT, "")), fingerprint(user)):
        return None
    return user


def current_user() -> UserRow | None:
    """The authenticated user of this request (looked up once per request)."""
    if "grader_user" not in g:
        g.grader_user = _load_user()
    user: UserRow | None = g.grader_user
    return user


def via_session() -> bool:
    return bearer_token() is None


def rate_limit_key() -> str:
    """Rate-limit bucket: the token's hash, the session's user, or the client address."""
    token = bearer_token()
    if token is not None:
        return "tok:" + repo.hash_token(token)[:32]
    user_id = session.get(SESSION_USER)
    if isinstance(user_id, int):
        return f"user:{user_id}"
    return "ip:" + (request.remote_addr or "unknown")


def _api_error(status: int, message: str) -> ResponseReturnValue:
    response = jsonify(error=message)
    response.status_code = status
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="grader"'
    return response


def api_auth(role: Role | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Require a valid token (or, for GET, a page session), optionally of ``role``."""

    def decorate(view: Callable[P, R]) -> Callable[P, R]:
        @wraps(view)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if via_session() and request.method not in _SAFE_METHODS:
                return _api_error(401, "use an Authorization: Bearer token")  # type: ignore[return-value]
            user = current_user()
            if user is None:
                return _api_error(401, "missing or invalid token")  # type: ignore[return-value]
            if role is not None and user.role != role.value:
                return _api_error(403, f"{role.value}s only")  # type: ignore[return-value]
            return view(*args, **kwargs)

        return wrapper

    return decorate


def login_required(view: Callable[P, R]) -> Callable[P, R]:
    """Pages: send an anonymous visitor to the login form."""

    @wraps(view)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if current_user() is None or not via_session():
            return redirect(url_for("pages.login", next=request.path))  # type: ignore[return-value]
        return view(*args, **kwargs)

    return wrapper


def log_in(user: UserRow) -> None:
    session.clear()
    session[SESSION_USER] = user.id
    session[SESSION_FINGERPRINT] = fingerprint(user)
    session.permanent = True
    g.grader_user = user


def log_out() -> None:
    session.clear()
    g.grader_user = None
