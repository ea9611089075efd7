"""Rate limits key on the verified user or the client address, and failed authentications are
limited per address (grader/server/throttle.py, grader/server/auth.py) — real Redis, real app."""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from redis import Redis
from sqlalchemy import event
from sqlalchemy.engine import Engine

from grader.server import create_app
from grader.settings import Settings
from tests.server.conftest import Account
from tests.server.test_pages import csrf_token

ATTACKER = "203.0.113.7"
OTHER = "198.51.100.20"


def random_bearer() -> dict[str, str]:
    return {"Authorization": f"Bearer grd_{secrets.token_urlsafe(32)}"}


def get_me(client: FlaskClient, headers: dict[str, str], address: str, **extra: Any) -> Any:
    return client.get(
        "/api/me", headers={**headers, **extra}, environ_base={"REMOTE_ADDR": address}
    )


@contextmanager
def user_lookups(engine: Engine) -> Iterator[list[str]]:
    """Collect the SQL statements that read the users table while the block runs."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "FROM users" in statement:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def limited_app(make_settings: Callable[..., Settings], engine: Engine, **overrides: Any) -> Flask:
    app = create_app(make_settings(**overrides), engine=engine)
    app.config["TESTING"] = True
    return app


def test_rotating_random_tokens_get_429_after_the_failed_authentication_limit(
    make_settings: Callable[..., Settings],
    engine: Engine,
    redis_client: Redis,
    student: Account,
) -> None:
    """A new random token per request gets 401 five times, then 429 without a database lookup
    (a valid token from that address too); other addresses are unaffected and Redis gains no
    key per token."""
    app = limited_app(make_settings, engine, auth_failure_limit="5 per minute")
    client = app.test_client()
    statuses = [get_me(client, random_bearer(), ATTACKER).status_code for _ in range(5)]
    assert statuses == [401] * 5
    with user_lookups(engine) as lookups:
        refused = [get_me(client, random_bearer(), ATTACKER) for _ in range(20)]
        guessed_right = get_me(client, student.headers, ATTACKER)
    assert {response.status_code for response in refused} == {429}
    assert refused[-1].get_json()["error"].startswith("too many failed authentications")
    assert 0 < int(refused[-1].headers["Retry-After"]) <= 60
    assert guessed_right.status_code == 429  # a guess that happens to be right learns nothing
    assert lookups == []  # blocked requests cost no database lookup
    assert get_me(client, student.headers, OTHER).status_code == 200
    assert len(redis_client.keys("*")) <= 4  # one counter per address and limit, not per token


def test_limits_key_on_the_verified_user_and_unverified_requests_on_the_address(
    make_settings: Callable[..., Settings],
    engine: Engine,
    make_user: Callable[..., Account],
) -> None:
    """With 3 calls a minute: a student's 4th call is 429 while another student (same address)
    goes on; invalid tokens share their address's bucket however often they change."""
    app = limited_app(
        make_settings, engine, rate_limit="3 per minute", auth_failure_limit="100 per minute"
    )
    client = app.test_client()
    first, second = make_user(), make_user()
    assert [get_me(client, first.headers, OTHER).status_code for _ in range(4)] == [200] * 3 + [429]
    assert get_me(client, second.headers, OTHER).status_code == 200
    rotating = [get_me(client, random_bearer(), ATTACKER).status_code for _ in range(5)]
    assert rotating == [401, 401, 401, 429, 429]


def test_x_forwarded_for_is_believed_only_from_trusted_proxies(
    make_settings: Callable[..., Settings], engine: Engine
) -> None:
    """A client cannot escape the limit by inventing X-Forwarded-For; through a configured proxy
    each real client has its own count."""
    app = limited_app(
        make_settings, engine, auth_failure_limit="2 per minute", trusted_proxies="10.0.0.0/24"
    )
    client = app.test_client()
    spoofed = [
        get_me(client, random_bearer(), ATTACKER, **{"X-Forwarded-For": f"192.0.2.{n}"})
        for n in range(4)
    ]
    assert [response.status_code for response in spoofed] == [401, 401, 429, 429]
    via_proxy = [
        get_me(client, random_bearer(), "10.0.0.5", **{"X-Forwarded-For": "198.51.100.1"})
        for _ in range(3)
    ]
    assert [response.status_code for response in via_proxy] == [401, 401, 429]
    neighbour = get_me(client, random_bearer(), "10.0.0.5", **{"X-Forwarded-For": "198.51.100.2"})
    assert neighbour.status_code == 401


def test_failed_logins_count_toward_the_same_limit(
    make_settings: Callable[..., Settings], engine: Engine, student: Account
) -> None:
    """Bad tokens pasted into the login form are failed authentications too: past the limit
    the form answers 429 and the address's bearer calls are refused as well."""
    app = limited_app(make_settings, engine, auth_failure_limit="2 per minute")
    browser = app.test_client()
    browser.environ_base["REMOTE_ADDR"] = ATTACKER
    answers = [
        browser.post(
            "/login", data={"token": f"grd_{n}", "csrf_token": csrf_token(browser)}
        ).status_code
        for n in range(3)
    ]
    assert answers == [401, 401, 429]
    blocked = browser.post(
        "/login", data={"token": student.token, "csrf_token": csrf_token(browser)}
    )
    assert blocked.status_code == 429 and "Too many failed logins" in blocked.get_data(as_text=True)
    assert get_me(browser, random_bearer(), ATTACKER).status_code == 429


def test_rotating_tokens_against_grader_serve_are_refused_across_processes(
    make_settings: Callable[..., Settings], live_server: Callable[..., str]
) -> None:
    """Against `grader serve` (two processes sharing Redis), a new random token per request
    gets exactly the limit's 401s (10), then 429."""
    base = live_server(make_settings(auth_failure_limit="10 per minute"), workers=2)
    statuses = []
    for _ in range(30):
        request = urllib.request.Request(f"{base}/api/me", headers=random_bearer())
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                statuses.append(response.status)
        except urllib.error.HTTPError as exc:
            statuses.append(exc.code)
    assert statuses == [401] * 10 + [429] * 20
