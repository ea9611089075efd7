"""Who is calling: a bearer token (API) or a signed session cookie (pages).

Tokens are looked up by their SHA-256 and compared in constant time
(:func:`grader.db.users.find_user_by_token`); a token that matches no one counts as a
failed authentication of the client's address, and an address over the limit gets 429 before
its tokens are looked up (:class:`.throttle.AuthFailureGuard`). A page login stores the user id
and a short fingerprint of the token hash and the user's session generation in Flask's signed
session cookie, so rotating a token or logging out ends every session opened before. The API
accepts the session cookie for reading only (``GET``): the pages poll it for live status, and a
cross-site form can never make a state-changing API call with it (uploads through the API need
the bearer header; the page form has a CSRF token).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

from flask import g, jsonify, redirect, request, session, url_for
from flask.typing import ResponseReturnValue

from grader.db.engine import session_scope
from grader.db.tables import Role, UserRow
from grader.db.users import end_sessions, find_user_by_token, get_user

from .state import read_session, state
from .throttle import client_address

P = ParamSpec("P")
R = TypeVar("R")

SESSION_USER = "uid"
SESSION_FINGERPRINT = "tfp"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
AUTH_BLOCKED_MESSAGE = "too many failed authentications from your address; try again later"


def fingerprint(user: UserRow) -> str:
    """A short value that changes when the user's token or session generation does (kept in the
    session cookie)."""
    material = f"session:{user.token_hash}:{user.session_generation}"
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def verify_token(token: str) -> UserRow | None:
    """The active user holding ``token``; a miss counts against the client's address.

    From an address over the failed-authentication limit nothing is looked up:
    :func:`auth_blocked` is then true and the caller answers 429.
    """
    guard = state().auth_guard
    address = client_address()
    if guard is not None and guard.blocked(address):
        g.grader_auth_blocked = True
        return None
    user = find_user_by_token(session=read_session(), token=token)
    if user is None and guard is not None and guard.failed(address):
        g.grader_auth_blocked = True
    return user


def auth_blocked() -> bool:
    """Whether this request's token was refused for too many failed authentications."""
    return bool(g.get("grader_auth_blocked", False))


def retry_after() -> int:
    guard = state().auth_guard
    return guard.retry_after(client_address()) if guard is not None else 60


def _load_user() -> UserRow | None:
    token = bearer_token()
    if token is not None:
        return verify_token(token)
    db = read_session()
    user_id = session.get(SESSION_USER)
    if not isinstance(user_id, int):
        return None
    user = get_user(session=db, user_id=user_id)
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
    """Rate-limit bucket: the *verified* user, else the client address.

    Never anything the client sends unverified (such as a token's hash): a client could pick a
    fresh bucket on every request.
    """
    user = current_user()
    if user is not None:
        return f"user:{user.id}"
    return "ip:" + client_address()


def _api_error(status: int, message: str) -> ResponseReturnValue:
    response = jsonify(error=message)
    response.status_code = status
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="grader"'
    return response


def refused_auth_response() -> ResponseReturnValue:
    """401 for a missing or invalid token, 429 when the address made too many failed tries."""
    if auth_blocked():
        response = jsonify(error=AUTH_BLOCKED_MESSAGE)
        response.status_code = 429
        response.headers["Retry-After"] = str(retry_after())
        return response
    return _api_error(401, "missing or invalid token")


def api_auth(role: Role | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Require a valid token (or, for GET, a page session), optionally of ``role``."""

    def decorate(view: Callable[P, R]) -> Callable[P, R]:
        @wraps(view)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if via_session() and request.method not in _SAFE_METHODS:
                return _api_error(401, "use an Authorization: Bearer token")  # type: ignore[return-value]
            user = current_user()
            if user is None:
                return refused_auth_response()  # type: ignore[return-value]
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
    """End the page session here and server-side: every cookie issued before stops working."""
    user = current_user()
    if user is not None and user.id is not None and via_session():
        with session_scope(state().engine) as db:
            end_sessions(session=db, user_id=user.id)
    session.clear()
    g.grader_user = None
