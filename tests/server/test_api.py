"""The student and instructor HTTP API (DESIGN §12) against real Redis and both databases."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta

import pytest
from flask.testing import FlaskClient
from redis import Redis
from sqlalchemy.engine import Engine

from grader.db.engine import session_scope
from grader.db.submissions import list_submissions, mark_failed
from grader.db.tables import FailureKind, SubmissionStatus, utcnow
from grader.server import create_app
from grader.settings import Settings
from grader.storage import ArchiveStore
from grader.worker.enqueue import make_queue
from grader.worker.reconciler import reconcile
from tests.server.conftest import (
    CASES,
    Account,
    honest_agent,
    make_zip,
    submission_row,
    upload,
)


def test_upload_is_stored_recorded_and_enqueued(
    client: FlaskClient, student: Account, settings: Settings, engine: Engine, redis_client: Redis
) -> None:
    """A valid upload answers 202 queued, keeps the archive, writes a queued row and a job."""
    data = make_zip(honest_agent())
    response = upload(client, student, data)
    assert response.status_code == 202
    body = response.get_json()
    assert set(body) == {"id", "status"} and body["status"] == "queued"
    row = submission_row(engine, body["id"])
    assert row.status == SubmissionStatus.QUEUED and row.user_id == student.id
    assert row.agent_name == "honest" and row.package_bytes == len(data)
    assert ArchiveStore(settings.storage_dir).path_for(row.package_sha256).read_bytes() == data
    queue = make_queue(settings, redis_client)
    assert queue.job_ids == [row.job_id]
    assert queue.fetch_job(row.job_id).args == (body["id"],)  # the job carries only the id


def test_same_archive_twice_is_stored_once(
    client: FlaskClient, student: Account, settings: Settings
) -> None:
    """Storage is content-addressed: two uploads of the same bytes keep one file."""
    data = make_zip(honest_agent())
    first = upload(client, student, data).get_json()["id"]
    second = upload(client, student, data).get_json()["id"]
    assert first != second
    assert ArchiveStore(settings.storage_dir).count() == 1


def test_graded_submission_returns_the_student_view(
    client: FlaskClient,
    student: Account,
    submit: Callable[..., str],
    run_worker_burst: Callable[[], None],
) -> None:
    """After a real worker grades it, GET returns {id, status, feedback} with counts."""
    submission_id = submit(student)
    assert (
        client.get(f"/api/submissions/{submission_id}", headers=student.headers).get_json()[
            "feedback"
        ]
        is None
    )
    run_worker_burst()
    body = client.get(f"/api/submissions/{submission_id}", headers=student.headers).get_json()
    assert body["id"] == submission_id and body["status"] == "graded"
    feedback = body["feedback"]
    assert feedback["status"] == "graded"
    assert feedback["overall"] == {"passed": 3, "total": 3}
    assert feedback["certificate"] == {"decision": "awarded", "reasons": []}
    assert feedback["by_kind"]["answerable"]["gates"]["citation_recall"] == {
        "passed": 2,
        "total": 2,
    }
    listing = client.get("/api/submissions", headers=student.headers).get_json()["submissions"]
    assert [(s["id"], s["status"], s["decision"]) for s in listing] == [
        (submission_id, "graded", "awarded")
    ]


def _zip_slip() -> bytes:
    return make_zip({**honest_agent(), "../evil.py": "print('x')"})


@pytest.mark.parametrize(
    ("data", "filename", "needle"),
    [
        (b"this is not an archive at all", "agent.rar", "is not a .zip or .tar.gz archive"),
        (_zip_slip(), "agent.zip", ".."),
        (make_zip({"agent.py": "def answer(q): pass\n"}), "agent.zip", "agent.toml not found"),
        (
            make_zip({"agent.toml": "name = [broken", "agent.py": ""}),
            "agent.zip",
            "agent.toml is not valid TOML",
        ),
        (
            make_zip({"agent.toml": 'name = "x"\nentrypoint = "agent:answer"\n'}),
            "agent.zip",
            "entrypoint module 'agent' not found",
        ),
        (b"", "agent.zip", "empty"),
    ],
    ids=["not-an-archive", "zip-slip", "no-manifest", "bad-toml", "no-module", "empty"],
)
def test_bad_archive_is_refused_with_a_one_line_reason(
    client: FlaskClient,
    student: Account,
    engine: Engine,
    settings: Settings,
    data: bytes,
    filename: str,
    needle: str,
) -> None:
    """A bad package answers 400 {"error": one line naming the problem}; nothing is kept."""
    response = upload(client, student, data, filename)
    assert response.status_code == 400
    message = response.get_json()["error"]
    assert needle in message and "\n" not in message
    assert str(settings.storage_dir) not in message  # no server paths
    with session_scope(engine) as session:
        assert list_submissions(session=session, user_id=student.id) == []
    assert ArchiveStore(settings.storage_dir).count() == 0


def test_missing_file_field_is_a_400(client: FlaskClient, student: Account) -> None:
    """A POST without the multipart field `package` says which field is expected."""
    response = client.post("/api/submissions", headers=student.headers, data={})
    assert response.status_code == 400
    assert "package" in response.get_json()["error"]


def test_upload_over_the_size_limit_is_a_413(
    make_settings: Callable[..., Settings], engine: Engine, student: Account
) -> None:
    """MAX_CONTENT_LENGTH turns an oversized upload into 413 with a JSON reason."""
    app = create_app(make_settings(max_upload_bytes=4096), engine=engine)
    big = make_zip({**honest_agent(), "blob.bin": os.urandom(20_000)})
    response = upload(app.test_client(), student, big)
    assert response.status_code == 413
    assert "too large" in response.get_json()["error"]


def test_daily_quota_gives_429_and_failed_runs_do_not_count(
    client: FlaskClient, student: Account, submit: Callable[..., str], engine: Engine
) -> None:
    """The policy's max_submissions_per_day (3 here) answers 429; a failed run frees its slot."""
    ids = [submit(student, honest_agent(salt=str(n))) for n in range(3)]
    refused = upload(client, student, make_zip(honest_agent(salt="4")))
    assert refused.status_code == 429
    assert "daily quota reached: 3 submissions" in refused.get_json()["error"]
    with session_scope(engine) as session:
        assert mark_failed(
            session=session,
            submission_id=ids[0],
            job_id=None,
            kind=FailureKind.INFRASTRUCTURE,
            reason="broken",
        )
    assert upload(client, student, make_zip(honest_agent(salt="5"))).status_code == 202
    me = client.get("/api/me", headers=student.headers).get_json()
    assert me["quota"] == {"limit": 3, "used": 3, "remaining": 0}


def test_upload_rate_limit_per_token_gives_429(
    make_settings: Callable[..., Settings],
    engine: Engine,
    make_user: Callable[..., Account],
) -> None:
    """Flask-Limiter (Redis storage) limits uploads per token; other tokens are unaffected."""
    app = create_app(make_settings(upload_rate_limit="2 per minute"), engine=engine)
    client = app.test_client()
    first, second = make_user(), make_user()
    bad = b"not an archive"
    assert [upload(client, first, bad).status_code for _ in range(3)] == [400, 400, 429]
    limited = upload(client, first, bad)
    assert "rate limit exceeded" in limited.get_json()["error"]
    assert "Retry-After" in limited.headers
    assert upload(client, second, bad).status_code == 400


def test_requests_without_a_valid_token_are_401(client: FlaskClient) -> None:
    """Every API call needs a bearer token: missing or wrong tokens answer 401."""
    assert client.get("/api/submissions").status_code == 401
    response = client.get("/api/submissions", headers={"Authorization": "Bearer grd_wrong"})
    assert response.status_code == 401
    assert response.get_json() == {"error": "missing or invalid token"}
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_student_sees_only_their_own_submissions(
    client: FlaskClient, make_user: Callable[..., Account], submit: Callable[..., str]
) -> None:
    """Another student's submission is a 404, and it is absent from the caller's list."""
    alice, bob = make_user(name="alice"), make_user(name="bob")
    alices = submit(alice)
    bobs = submit(bob)
    response = client.get(f"/api/submissions/{alices}", headers=bob.headers)
    assert response.status_code == 404
    assert response.get_json() == {"error": "no such submission"}
    assert client.get("/api/submissions/nonexistent", headers=bob.headers).status_code == 404
    listed = client.get("/api/submissions", headers=bob.headers).get_json()["submissions"]
    assert [item["id"] for item in listed] == [bobs]


def test_instructor_view_is_for_instructors_only(
    client: FlaskClient,
    student: Account,
    instructor: Account,
    submit: Callable[..., str],
    run_worker_burst: Callable[[], None],
) -> None:
    """Students get 403; instructors get the full view rebuilt from the stored eval records."""
    submission_id = submit(student)
    run_worker_burst()
    forbidden = client.get(f"/api/instructor/submissions/{submission_id}", headers=student.headers)
    assert forbidden.status_code == 403
    assert forbidden.get_json() == {"error": "instructors only"}
    view = client.get(
        f"/api/instructor/submissions/{submission_id}", headers=instructor.headers
    ).get_json()
    assert view["id"] == submission_id and view["student"] == "alice"
    assert view["certificate"]["decision"] == "awarded"
    assert [case["case_id"] for case in view["cases"]] == [case["id"] for case in CASES]
    assert view["cases"][0]["question"] == CASES[0]["question"]
    assert view["cases"][0]["answer"]["citations"] == ["doc-plover"]
    assert view["versions"]["sandbox"] == "bwrap"
    assert view["gradings"] == [
        {"version": 1, "trigger": "initial", "decision": "awarded", "current": True}
    ]
    missing = client.get("/api/instructor/submissions/nope", headers=instructor.headers)
    assert missing.status_code == 404


def test_upload_while_redis_is_down_is_kept_and_enqueued_later(
    make_settings: Callable[..., Settings],
    settings: Settings,
    engine: Engine,
    student: Account,
    redis_client: Redis,
) -> None:
    """With Redis unreachable the upload is still 202 and queued; the reconciler enqueues it."""
    dead = make_settings(redis_url="redis://127.0.0.1:1/0")
    app = create_app(dead, engine=engine)
    response = upload(app.test_client(), student, make_zip(honest_agent()))
    assert response.status_code == 202
    submission_id = response.get_json()["id"]
    assert submission_row(engine, submission_id).status == SubmissionStatus.QUEUED
    queue = make_queue(settings, redis_client)
    assert queue.count == 0
    report = reconcile(
        engine=engine, queue=queue, settings=settings, now=utcnow() + timedelta(seconds=5)
    )
    assert report.enqueued == [submission_id]
    assert queue.job_ids == [submission_row(engine, submission_id).job_id]
