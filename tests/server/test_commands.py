"""`grader users`, `grader reconcile` and `grader worker` start-up checks, as real processes."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable
from pathlib import Path

from redis import Redis
from sqlalchemy.engine import Engine
from sqlmodel import Session

from grader.db.users import find_user_by_token, get_user_by_name
from grader.settings import Settings
from grader.worker.enqueue import make_queue
from tests.server.conftest import GRADER_BIN, Account, settings_env, submission_row


def grader(settings: Settings, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GRADER_BIN, *args],
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_users_add_prints_the_token_once_and_stores_its_hash(
    settings: Settings, engine: Engine, tmp_path: Path
) -> None:
    """`users add` prints one token; the database keeps only its SHA-256; names are unique."""
    result = grader(settings, "users", "add", "carol", "--role", "instructor", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    assert token.startswith("grd_") and len(token) > 40
    with Session(engine) as session:
        user = find_user_by_token(session=session, token=token)
        assert user is not None and user.name == "carol" and user.role == "instructor"
        assert user.token_hash == hashlib.sha256(token.encode()).hexdigest()
    again = grader(settings, "users", "add", "carol", cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr.strip() == "grader: user 'carol' already exists"
    listing = grader(settings, "users", "list", cwd=tmp_path)
    assert listing.stdout == "carol\tinstructor\n" and token not in listing.stdout


def test_users_import_creates_each_new_account_once(
    settings: Settings, engine: Engine, tmp_path: Path
) -> None:
    """A name,role roster prints name,token for new accounts and skips existing ones."""
    roster = tmp_path / "roster.csv"
    roster.write_text("name,role\ndora,student\neve,instructor\nfrank,\n")
    first = grader(settings, "users", "import", str(roster), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    lines = [line.split(",") for line in first.stdout.splitlines()]
    assert [name for name, _ in lines] == ["dora", "eve", "frank"]
    assert "3 created, 0 skipped" in first.stderr
    with Session(engine) as session:
        for name, token in lines:
            user = find_user_by_token(session=session, token=token)
            assert user is not None and user.name == name
        frank = get_user_by_name(session=session, name="frank")
        assert frank is not None and frank.role == "student"
    roster.write_text("dora,student\ngina,student\n")
    second = grader(settings, "users", "import", str(roster), cwd=tmp_path)
    assert [line.split(",")[0] for line in second.stdout.splitlines()] == ["gina"]
    assert "dora: already exists, skipped" in second.stderr


def test_users_import_refuses_a_bad_role(settings: Settings, tmp_path: Path) -> None:
    """A roster line with an unknown role stops the import with the line number."""
    roster = tmp_path / "roster.csv"
    roster.write_text("hank,admin\n")
    result = grader(settings, "users", "import", str(roster), cwd=tmp_path)
    assert result.returncode == 2
    assert "roster.csv:1: role must be one of student, instructor" in result.stderr


def test_users_token_rotates(settings: Settings, engine: Engine, tmp_path: Path) -> None:
    """`users token NAME` prints a new token; the old one stops working."""
    old = grader(settings, "users", "add", "ivy", cwd=tmp_path).stdout.strip()
    new = grader(settings, "users", "token", "ivy", cwd=tmp_path).stdout.strip()
    with Session(engine) as session:
        assert find_user_by_token(session=session, token=old) is None
        assert find_user_by_token(session=session, token=new) is not None


def test_reconcile_command_enqueues_lost_jobs(
    student: Account,
    submit: Callable[..., str],
    make_settings: Callable[..., Settings],
    engine: Engine,
    redis_client: Redis,
    tmp_path: Path,
) -> None:
    """After a Redis flush, `grader reconcile` puts the queued submission back on the queue."""
    settings = make_settings(requeue_grace_seconds=0)
    submission_id = submit(student)
    redis_client.flushall()
    result = grader(settings, "reconcile", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "reconciled: 1 queued enqueued" in result.stdout
    assert make_queue(settings, redis_client).job_ids == [
        submission_row(engine, submission_id).job_id
    ]


def test_worker_refuses_to_run_unsandboxed_without_the_flag(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """`grader worker` with GRADER_SANDBOX=none and no unsafe flag exits with one line."""
    result = grader(make_settings(sandbox="none"), "worker", "--burst", cwd=tmp_path)
    assert result.returncode == 3
    assert result.stderr.strip().endswith(
        "set GRADER_ALLOW_UNSANDBOXED=1 to allow it (never in production)"
    )
    assert "Traceback" not in result.stderr
