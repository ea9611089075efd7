"""`/healthz` (database and Redis) and `/metrics` (Prometheus)."""

from __future__ import annotations

from collections.abc import Callable

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.engine import Engine

from grader.db.engine import make_engine
from grader.server import create_app
from grader.settings import Settings
from tests.server.conftest import Account
from tests.server.test_pages import logged_in


def test_healthz_is_200_when_database_and_redis_answer(client: FlaskClient) -> None:
    """Both dependencies answer: 200 and "ok" for each."""
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok", "database": "ok", "redis": "ok"}


def test_healthz_is_503_when_redis_is_down(
    make_settings: Callable[..., Settings], engine: Engine
) -> None:
    """Redis unreachable: 503 naming Redis."""
    app = create_app(make_settings(redis_url="redis://127.0.0.1:1/0"), engine=engine)
    response = app.test_client().get("/healthz")
    assert response.status_code == 503
    assert response.get_json() == {
        "status": "unavailable",
        "database": "ok",
        "redis": "unavailable",
    }


def test_healthz_is_503_when_the_database_is_down(make_settings: Callable[..., Settings]) -> None:
    """Database unreachable: 503 naming the database."""
    dead = "postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=1"
    app = create_app(make_settings(database_url=dead), engine=make_engine(dead))
    response = app.test_client().get("/healthz")
    assert response.status_code == 503
    assert response.get_json()["database"] == "unavailable"


def test_metrics_expose_queue_depth_statuses_and_grading_durations(
    client: FlaskClient,
    student: Account,
    submit: Callable[..., str],
    run_worker_burst: Callable[[], None],
    settings: Settings,
) -> None:
    """Queue depth, submissions by status and the grading-duration histogram, from the stores."""
    submit(student)
    before = client.get("/metrics").get_data(as_text=True)
    assert f'grader_queue_depth{{queue="{settings.queue_name}"}} 1.0' in before
    assert 'grader_submissions{status="queued"} 1.0' in before
    run_worker_burst()
    after = client.get("/metrics")
    assert after.headers["Content-Type"].startswith("text/plain")
    text = after.get_data(as_text=True)
    assert f'grader_queue_depth{{queue="{settings.queue_name}"}} 0.0' in text
    assert 'grader_submissions{status="graded"} 1.0' in text
    assert 'grader_grading_duration_seconds_bucket{le="+Inf"} 1.0' in text
    assert "grader_grading_duration_seconds_count 1.0" in text
    assert 'grader_dependency_up{name="database"} 1.0' in text


REMOTE = {"REMOTE_ADDR": "203.0.113.50"}


def test_metrics_are_for_instructors_loopback_and_the_metrics_token_only(
    make_settings: Callable[..., Settings],
    engine: Engine,
    student: Account,
    instructor: Account,
) -> None:
    """/metrics answers loopback, an instructor (token or page session) and the configured
    metrics token from anywhere; a student, an anonymous remote client, a wrong token and a
    request relayed by an unlisted local proxy get 404."""
    app = create_app(make_settings(metrics_token="scrape-secret-123"), engine=engine)
    client = app.test_client()

    def status(headers: dict[str, str] | None = None, **environ: str) -> int:
        code: int = client.get("/metrics", headers=headers, environ_base=environ).status_code
        return code

    assert status() == 200  # the test client is 127.0.0.1: this host's scraper
    assert status(REMOTE_ADDR="::1") == 200
    assert status(**REMOTE) == 404
    assert status(student.headers, **REMOTE) == 404
    assert status(instructor.headers, **REMOTE) == 200
    assert status({"Authorization": "Bearer scrape-secret-123"}, **REMOTE) == 200
    assert status({"Authorization": "Bearer scrape-secret-124"}, **REMOTE) == 404
    assert status({"X-Forwarded-For": "203.0.113.50"}) == 404
    denied = client.get("/metrics", environ_base=REMOTE)
    assert denied.get_json() == {"error": "Not found."}
    assert "grader_" not in denied.get_data(as_text=True)


def test_metrics_follow_an_instructors_page_session(app: Flask, instructor: Account) -> None:
    """An instructor logged in to the pages can read /metrics from a remote address."""
    browser = logged_in(app, instructor)
    browser.environ_base["REMOTE_ADDR"] = REMOTE["REMOTE_ADDR"]
    assert browser.get("/metrics").status_code == 200
