"""Daily limits of an upload beyond the quota: the storage budget and the failed-start cap
(grader/db/usage.py, grader/server/intake.py), on SQLite and PostgreSQL."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from sqlalchemy.engine import Engine

from grader.db.archive_store import open_archive_store
from grader.db.engine import session_scope
from grader.db.submissions import create_submission, mark_failed
from grader.db.tables import FailureKind, SubmissionRow, SubmissionStatus, utcnow
from grader.db.usage import LimitKind, LimitReached, usage
from grader.db.users import get_user
from grader.settings import Settings
from tests.conftest import write_case_set
from tests.server.conftest import (
    CASES,
    DOCUMENTS,
    Account,
    agent_files,
    honest_agent,
    insert_submissions_at_once,
    make_zip,
    submission_row,
    upload,
)

#: Room for ten uploads a day, and agents that must be ready within 2 s. Outcomes show at once
#: (no time quantum): these tests read the limits right after the worker; how a quantum holds
#: them back is tested in test_feedback_release.py.
POLICY = """
case_timeout_seconds = 3
setup_timeout_seconds = 2
run_timeout_seconds = 60
memory_limit_mb = 256
pids_limit = 48
max_submissions_per_day = 10
feedback_time_quantum_seconds = 0
"""
BLOB = 20_000  # incompressible bytes per test archive
BUDGET = 50_000  # two such archives fit, a third does not

HANGING_SETUP = """
import time

def setup():
    time.sleep(600)  # never gets ready: costs the worker the whole setup timeout

def answer(question):
    return {"answer": "x", "citations": [], "confidence": 0.1, "needs_human_review": True}
"""


@pytest.fixture(scope="module")
def cases_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("usage-cases")
    return write_case_set(root, CASES, policy=POLICY, documents=DOCUMENTS)


@pytest.fixture
def settings(make_settings: Callable[..., Settings], storage_url: str) -> Settings:
    """Small budgets, with each archive store (the folder and the database store)."""
    return make_settings(
        storage_bytes_per_day=BUDGET, failed_starts_per_day=1, storage_url=storage_url
    )


def big_agent(salt: str) -> bytes:
    return make_zip({**honest_agent(salt=salt), "blob.bin": os.urandom(BLOB)})


def test_uploads_past_the_storage_budget_get_429_with_a_one_line_reason(
    client: FlaskClient, student: Account, settings: Settings
) -> None:
    """Two 20 KB archives fit a 50 KB daily budget; the third gets 429 naming the budget and
    when it fits again, is not stored, and /api/me shows the figures."""
    sizes = []
    for salt in ("a", "b"):
        archive = big_agent(salt)
        sizes.append(len(archive))
        assert upload(client, student, archive).status_code == 202
    refused = upload(client, student, big_agent("c"))
    assert refused.status_code == 429
    reason = refused.get_json()["error"]
    assert reason.startswith("daily storage budget reached:") and "fits again at" in reason
    assert "\n" not in reason
    store = open_archive_store(
        settings.storage_url, storage_dir=settings.storage_dir, database_url=settings.database_url
    )
    assert store.count() == 2  # the refused archive was not kept
    store.close()
    me = client.get("/api/me", headers=student.headers).get_json()
    assert me["storage"] == {
        "limit_bytes": BUDGET,
        "used_bytes": sum(sizes),
        "remaining_bytes": BUDGET - sum(sizes),
    }
    assert me["quota"]["used"] == 2 and me["quota"]["limit"] == 10  # existing keys kept


def test_parallel_uploads_cannot_overshoot_the_storage_budget(
    engine: Engine, student: Account
) -> None:
    """Eight simultaneous 100-byte inserts against a 350-byte budget create exactly three."""
    outcomes = insert_submissions_at_once(
        engine, student, 8, package_bytes=100, daily_limit=None, storage_budget=350
    )
    created = [o for o in outcomes if isinstance(o, SubmissionRow)]
    refused = [o for o in outcomes if isinstance(o, LimitReached)]
    assert len(created) == 3 and len(refused) == 5
    assert {o.kind for o in refused} == {LimitKind.STORAGE}
    assert refused[0].used == 300 and refused[0].next_slot_at is not None


def test_a_hanging_setup_is_a_failed_start_and_the_cap_refuses_the_next_upload(
    client: FlaskClient,
    student: Account,
    run_worker_burst: Callable[[], None],
    engine: Engine,
) -> None:
    """An agent whose setup never finishes ends failed (agent_start) after the setup timeout,
    counts as a failed start (not toward the quota), and with a cap of 1 the next upload gets
    429 naming failed starts."""
    files = agent_files(HANGING_SETUP, name="hangs", setup="agent:setup")
    response = upload(client, student, make_zip(files))
    assert response.status_code == 202
    run_worker_burst()
    row = submission_row(engine, response.get_json()["id"])
    assert row.status == SubmissionStatus.FAILED.value
    assert row.failure_kind == FailureKind.AGENT_START.value
    assert "did not finish starting within 2 s" in (row.failure_reason or "")
    me = client.get("/api/me", headers=student.headers).get_json()
    assert me["failed_starts"] == {"limit": 1, "used": 1, "remaining": 0}
    assert me["quota"]["used"] == 0
    refused = upload(client, student, make_zip(honest_agent(salt="after")))
    assert refused.status_code == 429
    assert refused.get_json()["error"].startswith(
        "too many uploads whose agent failed to start: 1 in 24 hours"
    )


def test_usage_counts_each_limit_over_a_rolling_day(engine: Engine, student: Account) -> None:
    """Failed starts are agent_start and abandoned failures only; the quota skips every
    failure; bytes count every upload; nothing older than 24 hours counts."""
    now = utcnow()
    rows = [
        (None, 10, timedelta(hours=1)),  # queued
        (FailureKind.AGENT_START, 20, timedelta(hours=2)),
        (FailureKind.ABANDONED, 40, timedelta(hours=3)),
        (FailureKind.INFRASTRUCTURE, 80, timedelta(hours=4)),
        (FailureKind.PACKAGE, 160, timedelta(hours=5)),
        (FailureKind.AGENT_START, 320, timedelta(hours=25)),  # outside the window
    ]
    with session_scope(engine) as session:
        user = get_user(session=session, user_id=student.id)
        assert user is not None
        for kind, size, age in rows:
            created = create_submission(
                session=session,
                user=user,
                filename="a.zip",
                agent_name="a",
                package_sha256="0" * 64,
                package_bytes=size,
                daily_limit=None,
                now=now - age,
            )
            assert isinstance(created, SubmissionRow)
            if kind is not None:
                assert mark_failed(
                    session=session, submission_id=created.id, job_id=None, kind=kind, reason="x"
                )
    with session_scope(engine) as session:
        used = usage(session=session, user_id=student.id, now=now)
    assert (used.submissions, used.bytes, used.failed_starts) == (1, 310, 2)
    assert used.oldest_submission is not None
    assert abs(used.oldest_submission - (now - timedelta(hours=1))) < timedelta(seconds=1)
    assert used.oldest_failed_start is not None
    assert abs(used.oldest_failed_start - (now - timedelta(hours=3))) < timedelta(seconds=1)
