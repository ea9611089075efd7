"""Fixtures for the server, worker and database tests — all against real services.

* ``database_url`` is parametrized over a SQLite file and the real PostgreSQL
  (``GRADER_TEST_POSTGRES_URL``, default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``).
  PostgreSQL gets one schema per test run (dropped at the end) and its tables are emptied
  before each test; SQLite gets a fresh copy of a migrated file per test.
* Redis is a real ``redis-server`` started privately for the test run on a free loopback port
  (so FLUSHALL hurts no one else), or the server named by ``GRADER_TEST_REDIS_URL``; it is
  flushed before and after each test, and each test also gets its own queue name and
  rate-limit key prefix.
* The sandbox is bubblewrap, as in production on one machine.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient
from playwright.sync_api import Browser, sync_playwright
from redis import Redis
from sqlalchemy.engine import Engine
from sqlmodel import Session

from grader.db.engine import make_engine, session_scope
from grader.db.migrate import upgrade_database
from grader.db.submissions import create_submission, get_submission
from grader.db.tables import Role, SubmissionRow
from grader.db.users import create_user, get_user
from grader.server import create_app
from grader.settings import Settings
from grader.storage import ArchiveStore, ArchiveStoreBase
from grader.worker.enqueue import make_queue
from grader.worker.process import GraderWorker
from grader.worker.service import GradingService
from tests.conftest import write_case_set

REPO = Path(__file__).resolve().parents[2]
GRADER_BIN = str(Path(sys.executable).with_name("grader"))
POSTGRES_URL = os.environ.get(
    "GRADER_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
TABLES = ("eval_records", "gradings", "submissions", "users", "archives", "archive_chunks")

# --------------------------------------------------------------------------------------------
# The hidden case set used by these tests. Every question carries words that appear nowhere
# else, so a leak test can search responses for them; "hostile" makes the agents of
# tests/sandbox/hostile_agents.py misbehave on every question.

DOCUMENTS = {
    "doc-plover": "Chunks overlap so that no sentence is cut at a boundary.\n",
    "doc-other": "Agents stop after a step budget.\n",
}
CASES: list[dict[str, Any]] = [
    {
        "id": "case-kestrel-01",
        "kind": "answerable",
        "question": "hostile heron-417: how do chunks overlap?",
        "expected_citations": ["doc-plover"],
        "required_concepts": [["overlap"]],
        "forbidden_terms": ["forbidden-gannet"],
        "slices": ["slice-pelican"],
    },
    {
        "id": "case-kestrel-02",
        "kind": "answerable",
        "question": "hostile falcon-228: why do chunks overlap?",
        "expected_citations": ["doc-plover"],
        "required_concepts": [["overlap"]],
        "slices": ["slice-pelican"],
    },
    {
        "id": "case-kestrel-03",
        "kind": "refusal",
        "question": "hostile osprey-993: what was the score yesterday?",
        "safety": True,
        "slices": ["slice-cormorant"],
    },
]
#: Fragments of hidden content a student must never receive (questions, ids, slices, labels).
SECRET_FRAGMENTS = (
    "hostile",
    "heron",
    "falcon",
    "osprey",
    "kestrel",
    "pelican",
    "cormorant",
    "gannet",
    "plover",
    "how do chunks overlap",
    "score yesterday",
)
POLICY = """
case_timeout_seconds = 3
setup_timeout_seconds = 20
run_timeout_seconds = 120
memory_limit_mb = 256
pids_limit = 48
max_submissions_per_day = 3
# These tests read per-gate counts and read results the moment the worker is done: they pin
# the counts view with no time rounding. The release modes have their own tests
# (test_feedback_release.py), and the leak test checks the most revealing view.
feedback = "counts"
feedback_time_quantum_seconds = 0
"""

#: An honest agent for this case set: answers the two answerable cases, refuses the other.
HONEST_AGENT = """
import time

DELAY = {delay}

def answer(question):
    if DELAY:
        time.sleep(DELAY)
    if "score" in question:
        return {{"answer": "I don't know; the course material does not cover this.",
                "citations": [], "confidence": 0.1, "needs_human_review": True}}
    return {{"answer": "Chunks overlap so no sentence is cut.", "citations": ["doc-plover"],
            "confidence": 0.8, "needs_human_review": False}}
"""


def agent_files(body: str, *, name: str = "test-agent", setup: str | None = None) -> dict[str, str]:
    manifest = f'name = "{name}"\nentrypoint = "agent:answer"\n'
    if setup:
        manifest += f'setup = "{setup}"\n'
    return {"agent.toml": manifest, "agent.py": textwrap.dedent(body)}


def honest_agent(*, delay: float = 0.0, name: str = "honest", salt: str = "") -> dict[str, str]:
    files = agent_files(HONEST_AGENT.format(delay=delay), name=name)
    if salt:  # different bytes, same behaviour
        files["agent.py"] += f"\n# {salt}\n"
    return files


def make_zip(files: dict[str, str | bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, content)
    return buffer.getvalue()


# --------------------------------------------------------------------------------------------
# Databases


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head once; each test copies it."""
    path = tmp_path_factory.mktemp("sqlite-template") / "grader.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade_database(engine)
    engine.dispose()
    return path


@pytest.fixture(scope="session")
def postgres_schema_url() -> Iterator[str]:
    """A private schema in the test PostgreSQL database, migrated to head once per run."""
    schema = f"grader_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(POSTGRES_URL)
    try:
        with admin.begin() as connection:
            connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    except sa.exc.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not answering at {POSTGRES_URL}: run scripts/services.sh ({exc})"
        )
    url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    engine = make_engine(url)
    upgrade_database(engine)
    engine.dispose()
    yield url
    with admin.begin() as connection:
        connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database: a SQLite file or a PostgreSQL schema."""
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        target = tmp_path / "db" / "grader.db"
        target.parent.mkdir()
        shutil.copyfile(template, target)
        return f"sqlite:///{target}"
    url: str = request.getfixturevalue("postgres_schema_url")
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
    engine.dispose()
    return url


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


# --------------------------------------------------------------------------------------------
# Archive stores

#: The archive stores every storage test runs against: the folder and the database store.
STORES = ("file", "database")


def set_touched(store: ArchiveStoreBase, sha256: str, when: float) -> None:
    """Make a stored archive look stored (or last re-uploaded) at POSIX time ``when``."""
    if isinstance(store, ArchiveStore):
        os.utime(store.path_for(sha256), (when, when))
        return
    engine: Engine = store.engine  # type: ignore[attr-defined]
    with engine.begin() as connection:
        changed = connection.execute(
            sa.text("UPDATE archives SET touched = :when WHERE sha256 = :sha"),
            {"when": when, "sha": sha256},
        ).rowcount
    assert changed == 1


def flip_a_byte(store: ArchiveStoreBase, sha256: str, offset: int) -> None:
    """Damage a stored archive behind the store's back: one byte at ``offset`` inverted."""
    if isinstance(store, ArchiveStore):
        path = store.path_for(sha256)
        path.chmod(0o644)
        data = bytearray(path.read_bytes())
        data[offset] ^= 0xFF
        path.write_bytes(bytes(data))
        return
    from grader.db.archive_store import CHUNK_BYTES

    engine: Engine = store.engine  # type: ignore[attr-defined]
    seq, within = divmod(offset, CHUNK_BYTES)
    with engine.begin() as connection:
        data = bytearray(
            connection.execute(
                sa.text("SELECT data FROM archive_chunks WHERE sha256 = :sha AND seq = :seq"),
                {"sha": sha256, "seq": seq},
            ).scalar_one()
        )
        data[within] ^= 0xFF
        connection.execute(
            sa.text("UPDATE archive_chunks SET data = :data WHERE sha256 = :sha AND seq = :seq"),
            {"data": bytes(data), "sha": sha256, "seq": seq},
        )


@pytest.fixture
def database_store_url(request: pytest.FixtureRequest) -> str:
    """A PostgreSQL URL for the database archive store (the test schema), archives emptied."""
    url: str = request.getfixturevalue("postgres_schema_url")
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.text("TRUNCATE archives, archive_chunks"))
    engine.dispose()
    return url


@pytest.fixture(params=STORES)
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """GRADER_STORAGE_URL of each store: a folder, or the database store in PostgreSQL."""
    if request.param == "file":
        return (tmp_path / "archives").as_uri()
    url: str = request.getfixturevalue("database_store_url")
    return url


# --------------------------------------------------------------------------------------------
# Redis


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private redis-server for this test run (or GRADER_TEST_REDIS_URL's), as a URL."""
    external = os.environ.get("GRADER_TEST_REDIS_URL")
    if external:
        yield external
        return
    folder = tmp_path_factory.mktemp("redis")
    port = free_port()
    process = subprocess.Popen(
        [
            REDIS_SERVER,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(folder),
            "--logfile", str(folder / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"

    def answers() -> bool:
        if process.poll() is not None:
            pytest.fail(f"redis-server exited: {(folder / 'redis.log').read_text()}")
        try:
            return bool(Redis.from_url(url, socket_connect_timeout=0.2).ping())
        except Exception:
            return False

    wait_for(answers, timeout=20, message="the private redis-server did not start")
    yield url
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """The test Redis, empty before and after the test."""
    client = Redis.from_url(redis_server)
    try:
        client.flushdb()
    except Exception as exc:
        pytest.fail(f"Redis is not answering at {redis_server} ({exc})")
    yield redis_server
    client.flushdb()
    client.close()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    client.close()


# --------------------------------------------------------------------------------------------
# Settings, app, users


@pytest.fixture(scope="session")
def cases_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("server-cases")
    return write_case_set(root, CASES, policy=POLICY, documents=DOCUMENTS)


@pytest.fixture
def make_settings(
    database_url: str, redis_url: str, cases_dir: Path, tmp_path: Path
) -> Callable[..., Settings]:
    """Settings for this test's database, Redis, storage and queue, with overrides."""
    queue = f"test-{uuid.uuid4().hex[:10]}"

    def factory(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "database_url": database_url,
            "redis_url": redis_url,
            "cases_dir": cases_dir,
            "storage_dir": tmp_path / "storage",
            "sandbox": "bwrap",
            "secret_key": "test-secret-key",
            "queue_name": queue,
            "heartbeat_seconds": 0.3,
            "lease_seconds": 2.5,
            "requeue_grace_seconds": 0.5,
            "reconcile_interval_seconds": 1.0,
            "rate_limit": "1000 per minute",
            "upload_rate_limit": "100 per minute",
        }
        values.update(overrides)
        return Settings(_env_file=None, **values)  # type: ignore[call-arg]

    return factory


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


@pytest.fixture
def app(settings: Settings, engine: Engine) -> Iterator[Flask]:
    application = create_app(settings, engine=engine)
    application.config["TESTING"] = True
    yield application
    application.extensions["grader"].redis.close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@dataclass
class Account:
    id: int
    name: str
    role: Role
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture
def make_user(engine: Engine) -> Callable[..., Account]:
    counter = iter(range(1000))

    def factory(role: Role = Role.STUDENT, name: str | None = None) -> Account:
        with session_scope(engine) as session:
            user, token = create_user(
                session=session, name=name or f"{role.value}-{next(counter)}", role=role
            )
            assert user.id is not None
            return Account(user.id, user.name, role, token)

    return factory


@pytest.fixture
def student(make_user: Callable[..., Account]) -> Account:
    return make_user(Role.STUDENT, "alice")


@pytest.fixture
def instructor(make_user: Callable[..., Account]) -> Account:
    return make_user(Role.INSTRUCTOR, "professor")


def upload(client: FlaskClient, account: Account, data: bytes, filename: str = "agent.zip") -> Any:
    return client.post(
        "/api/submissions",
        headers=account.headers,
        data={"package": (io.BytesIO(data), filename)},
        content_type="multipart/form-data",
    )


@pytest.fixture
def submit(client: FlaskClient) -> Callable[..., str]:
    """Upload a package (files dict) as ``account`` and return the new submission id."""

    def factory(account: Account, files: dict[str, str] | None = None) -> str:
        response = upload(client, account, make_zip(files or honest_agent()))
        assert response.status_code == 202, response.get_data(as_text=True)
        submission_id: str = response.get_json()["id"]
        return submission_id

    return factory


@pytest.fixture
def run_worker_burst(settings: Settings, engine: Engine, redis_client: Redis) -> Callable[[], None]:
    """Run a real rq worker (in this process, burst mode) until the queue is empty."""

    def run() -> None:
        service = GradingService.from_settings(settings, name="burst")
        service.engine.dispose()
        service.engine = engine
        worker = GraderWorker([make_queue(settings, redis_client)], connection=redis_client)
        worker.service = service
        worker.work(burst=True, logging_level="WARNING")

    return run


def submission_row(engine: Engine, submission_id: str) -> SubmissionRow:
    with Session(engine, expire_on_commit=False) as session:
        row = get_submission(session=session, submission_id=submission_id)
        assert row is not None
        return row


def insert_submissions_at_once(
    engine: Engine, student: Account, count: int, **limits: Any
) -> list[object]:
    """``count`` threads call ``create_submission`` for ``student`` at the same moment (each in
    its own session), with ``limits`` (``package_bytes``, ``daily_limit``, ``storage_budget``…);
    every outcome, a row or a refusal."""
    outcomes: list[object] = []
    barrier = threading.Barrier(count)

    def insert() -> None:
        barrier.wait()
        with session_scope(engine) as session:
            user = get_user(session=session, user_id=student.id)
            assert user is not None
            outcomes.append(
                create_submission(
                    session=session,
                    user=user,
                    filename="a.zip",
                    agent_name="a",
                    package_sha256="0" * 64,
                    **limits,
                )
            )

    threads = [threading.Thread(target=insert) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


# --------------------------------------------------------------------------------------------
# Real processes: `grader worker` and `grader serve`


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a `grader` subprocess read ``settings``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GRADER_")}
    for name, value in settings.model_dump().items():
        if value is None:
            continue
        env[f"GRADER_{name.upper()}"] = (
            ("1" if value else "0") if isinstance(value, bool) else str(value)
        )
    env["GRADER_LOG_LEVEL"] = "INFO"
    return env


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """Start `grader` subprocesses; each is stopped (then killed) after the test."""
    started: list[Proc] = []

    def start(name: str, args: list[str], settings: Settings) -> Proc:
        log = tmp_path / f"{name}.log"
        handle = log.open("wb")
        process = subprocess.Popen(
            [GRADER_BIN, *args],
            env=settings_env(settings),
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            start_new_session=True,
        )
        handle.close()
        proc = Proc(name, process, log)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.process.poll() is None:
            os.killpg(proc.process.pid, signal.SIGTERM)
    for proc in started:
        try:
            proc.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.process.pid, signal.SIGKILL)
            proc.process.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(condition: Callable[[], Any], *, timeout: float, message: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout} s: {message}")


@pytest.fixture
def live_server(processes: Callable[..., Proc], settings: Settings) -> Callable[..., str]:
    """Start `grader serve` and return its base URL once /healthz answers."""

    def start(settings_override: Settings | None = None, workers: int = 2) -> str:
        import urllib.request

        port = free_port()
        chosen = settings_override or settings
        proc = processes(
            "serve",
            ["serve", "--port", str(port), "--workers", str(workers), "--threads", "4"],
            chosen,
        )
        base = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            if proc.process.poll() is not None:
                pytest.fail(f"grader serve exited:\n{proc.output()}")
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=1) as response:
                    return bool(json.load(response)["status"] == "ok")
            except OSError:
                return False

        wait_for(healthy, timeout=30, message="grader serve did not become healthy")
        return base

    return start


#: Debian's Chromium, driven by Playwright (its own browser download does not work here).
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """A headless Chromium for the page tests of one module."""
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
