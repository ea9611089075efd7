"""`/healthz` (database and Redis) and `/metrics` (Prometheus)."""

from __future__ import annotations

from collections.abc import Callable

from flask.testing import FlaskClient
from sqlalchemy.engine import Engine

from grader.db.engine import make_engine
from grader.server import create_app
from grader.settings import Settings
from tests.server.conftest import Account


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
