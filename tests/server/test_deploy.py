"""The deployment files (deploy/): the compose file passes the Compose schema and wires every
process as deploy/README.md says, refuses to start without its secrets, and the grader's own
image builds offline and serves /healthz against the real Redis and PostgreSQL."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from flask.testing import FlaskClient
from sqlalchemy.engine import Engine
from sqlmodel import Session

from grader.db.results import list_gradings
from grader.db.tables import SubmissionStatus
from grader.settings import Settings
from tests.server.conftest import (
    POSTGRES_URL,
    REPO,
    TABLES,
    Account,
    free_port,
    honest_agent,
    submission_row,
)
from tests.server.test_worker_processes import assert_graded_exactly_once

COMPOSE = REPO / "deploy" / "compose.yaml"
DOCKER_COMPOSE = shutil.which("docker-compose") or "/usr/bin/docker-compose"
SECRETS = {"GRADER_SECRET_KEY": "a-test-secret-key", "POSTGRES_PASSWORD": "a-test-password"}


def compose_config(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`docker-compose config` (schema validation and interpolation) with ``env`` only."""
    return subprocess.run(
        [DOCKER_COMPOSE, "-f", str(COMPOSE), "config"],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_compose_file_is_valid_and_wires_every_process() -> None:
    """The Compose parser accepts the file; workers get the Docker socket, the staging folder
    at the same path, the database and Redis URLs and no shared archive folder; the server
    gets the secret key; archives live in the database."""
    result = compose_config(SECRETS)
    assert result.returncode == 0, result.stderr
    config: dict[str, Any] = yaml.safe_load(result.stdout)
    services = config["services"]
    assert set(services) == {"postgres", "redis", "migrate", "server", "worker"}
    worker, server = services["worker"], services["server"]
    assert "/var/run/docker.sock:/var/run/docker.sock" in _volumes(worker)
    assert "/run/grader-sandbox:/run/grader-sandbox" in _volumes(worker)
    assert not [v for v in _volumes(worker) if "/srv/grader" in v]  # no shared archive folder
    for service in (worker, server):
        env = service["environment"]
        assert env["GRADER_STORAGE_URL"] == env["GRADER_DATABASE_URL"]
        assert env["GRADER_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["GRADER_REDIS_URL"].startswith("redis://")
        assert env["PGPASSWORD"] == SECRETS["POSTGRES_PASSWORD"]
    assert worker["environment"]["GRADER_SANDBOX"] == "docker"
    assert "GRADER_MODEL_UPSTREAM_KEY" in worker["environment"]
    assert "GRADER_MODEL_UPSTREAM_KEY" not in server["environment"]
    assert server["environment"]["GRADER_SECRET_KEY"] == SECRETS["GRADER_SECRET_KEY"]
    assert "GRADER_SECRET_KEY" not in worker["environment"]
    for service in (server, worker):
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert "healthcheck" in service


def test_the_compose_file_refuses_to_start_without_its_secrets() -> None:
    """Without GRADER_SECRET_KEY or POSTGRES_PASSWORD the file does not resolve, and the error
    names the missing variable."""
    for missing in SECRETS:
        env = {key: value for key, value in SECRETS.items() if key != missing}
        result = compose_config(env)
        assert result.returncode != 0
        assert f"set {missing}" in result.stderr


def _volumes(service: dict[str, Any]) -> list[str]:
    found = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            found.append(volume.removesuffix(":rw"))
        else:
            found.append(f"{volume['source']}:{volume['target']}")
    return found


@pytest.fixture
def schema_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL schema (dropped afterwards)."""
    schema = f"grader_deploy_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(POSTGRES_URL)
    with admin.begin() as connection:
        connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    with admin.begin() as connection:
        connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()


def build_server_image() -> str:
    """scripts/build-server-image.sh (a no-op when nothing changed); the image it tagged."""
    build = subprocess.run(
        [str(REPO / "scripts" / "build-server-image.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    image = build.stdout.strip().splitlines()[-1]
    assert image.startswith("grader-server:")
    return image


@pytest.mark.docker
@pytest.mark.timeout(900)  # a fresh machine first makes the debootstrap base with pip (~1 min)
def test_the_server_image_builds_offline_migrates_and_serves_healthz(
    schema_url: str, redis_url: str
) -> None:
    """scripts/build-server-image.sh builds grader-server:latest without a registry; in it the
    compose file's migrate command brings an empty database to head and `grader serve`, as a
    non-root user, answers /healthz with 200 against the real PostgreSQL and Redis."""
    image = build_server_image()
    inspect = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.User}}", image],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(inspect.stdout) == "10002:10002"

    config = yaml.safe_load(compose_config(SECRETS).stdout)
    env = ["-e", f"GRADER_DATABASE_URL={schema_url}", "-e", f"GRADER_REDIS_URL={redis_url}"]
    migrate = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "host",
            *env,
            image,
            *config["services"]["migrate"]["command"],
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    assert "schema at 0" in migrate.stdout

    port = free_port()
    name = f"grader-server-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["docker", "run", "-d", "--rm", "--name", name, "--network", "host", *env,
         "-e", "GRADER_SECRET_KEY=test", image,
         "grader", "serve", "--host", "127.0.0.1", "--port", str(port)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        answer: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    answer = json.load(r)
                    break
            except OSError:
                time.sleep(0.5)
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True).stderr
        assert answer == {"status": "ok", "database": "ok", "redis": "ok"}, logs[-3000:]
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


@pytest.fixture
def database_url(postgres_schema_url: str) -> str:
    """Workers in containers share PostgreSQL with the test (the test schema, emptied)."""
    engine = sa.create_engine(postgres_schema_url)
    with engine.begin() as connection:
        connection.execute(sa.text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
    engine.dispose()
    return postgres_schema_url


@pytest.fixture
def settings(make_settings: Any, database_url: str) -> Settings:
    chosen: Settings = make_settings(storage_url=database_url)
    return chosen


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_a_worker_container_wired_as_the_compose_file_says_grades_in_docker_sandboxes(
    client: FlaskClient,
    student: Account,
    submit: Any,
    engine: Engine,
    settings: Settings,
) -> None:
    """Two workers from the server image, each with the compose file's user, pid namespace,
    volumes (host Docker socket, sandbox staging folder) and environment, grade uploads from
    the database archive store in Docker sandboxes on the host's engine, each exactly once."""
    image = build_server_image()
    worker = yaml.safe_load(compose_config(SECRETS).stdout)["services"]["worker"]
    ids = [submit(student, honest_agent(delay=0.3, salt=str(n))) for n in range(3)]
    options = ["--user", worker["user"], "--pid", worker["pid"], "--network", "host"]
    for volume in _volumes(worker):
        source, target = volume.split(":")[:2]
        if target == "/srv/cases":
            source = str(settings.cases_dir)
        options += [
            "-v",
            f"{source}:{target}:ro" if target == "/srv/cases" else f"{source}:{target}",
        ]
    environment = {
        **worker["environment"],
        "GRADER_DATABASE_URL": settings.database_url,
        "GRADER_STORAGE_URL": settings.database_url,
        "GRADER_REDIS_URL": settings.redis_url,
        "GRADER_QUEUE_NAME": settings.queue_name,
    }
    for key, value in environment.items():
        options += ["-e", f"{key}={value}"]
    runs = [
        subprocess.Popen(
            ["docker", "run", "--rm", *options, image, "grader", "worker", "--burst"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    logs = "\n".join(output[-3000:] for output in outputs)
    assert all(run.returncode == 0 for run in runs), logs
    rows = [submission_row(engine, sid) for sid in ids]
    assert [row.status for row in rows] == [SubmissionStatus.GRADED] * 3, (
        [row.failure_reason for row in rows],
        logs,
    )
    assert_graded_exactly_once(engine, ids)
    with Session(engine) as session:
        for sid in ids:
            grading = list_gradings(session=session, submission_id=sid)[0]
            assert grading.sandbox == "docker", logs
            assert (grading.sandbox_image or "").startswith("sha256:")
    # Graded inside the containers (their own host names), not by a worker of this machine.
    workers = {submission_row(engine, sid).worker for sid in ids}
    assert all(name and not name.startswith(os.uname().nodename) for name in workers)
