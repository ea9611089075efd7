"""Workers on simulated hosts (tests/multihost.py): each `grader worker` in its own network
namespace, reaching Redis and PostgreSQL only over its veth, with no shared folder (archives come
from the database store). Every submission ends graded exactly once — with 1, 2 and 3 hosts,
with a host cut off mid-grade and with Redis flushed mid-run — and the simulation leaves nothing
behind, even when the test body fails."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa
from flask.testing import FlaskClient
from redis import Redis
from sqlalchemy.engine import Engine

from grader.db.tables import Role, SubmissionStatus
from grader.settings import Settings
from tests.multihost import Simulation, host_env, namespaces, simulation
from tests.server.conftest import (
    TABLES,
    Account,
    honest_agent,
    settings_env,
    submission_row,
    wait_for,
)
from tests.server.test_worker_processes import assert_graded_exactly_once, statuses

SUBMISSIONS = 60
#: The case set allows 3 submissions per student a day.
PER_STUDENT = 3


@pytest.fixture
def database_url(postgres_schema_url: str) -> str:
    """Several hosts share one PostgreSQL (SQLite is single-machine): the test schema, empty."""
    engine = sa.create_engine(postgres_schema_url)
    with engine.begin() as connection:
        connection.execute(sa.text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
    engine.dispose()
    return postgres_schema_url


@pytest.fixture
def settings(make_settings: Callable[..., Settings], database_url: str) -> Settings:
    """The database archive store in the same database: no folder is shared with any host."""
    return make_settings(storage_url=database_url)


@pytest.fixture
def hosts(
    tmp_path: Path, settings: Settings, redis_url: str
) -> Iterator[Callable[[int], Simulation]]:
    """Start ``n`` simulated hosts, each running a real worker; all removed after the test."""
    made: list[Simulation] = []

    def start(count: int) -> Simulation:
        port = urlsplit(redis_url).port
        assert port is not None
        sim = Simulation(tmp_path / f"sim{len(made)}", redis_port=port).__enter__()
        made.append(sim)
        for _ in range(count):
            host = sim.add_host()
            env = host_env(settings_env(settings), host, database_url=settings.database_url)
            sim.start_worker(host, env)
        return sim

    yield start
    for sim in made:
        sim.close()
        assert sim.leftovers() == []


def submit_many(
    submit: Callable[..., str], make_user: Callable[..., Account], count: int, delay: float = 0.0
) -> list[str]:
    """``count`` uploads with distinct archives, :data:`PER_STUDENT` per student."""
    ids: list[str] = []
    students = [make_user(Role.STUDENT) for _ in range(-(-count // PER_STUDENT))]
    for n in range(count):
        files = honest_agent(delay=delay, salt=f"submission {n}")
        ids.append(submit(students[n // PER_STUDENT], files))
    return ids


def wait_all_graded(engine: Engine, ids: list[str], sim: Simulation, timeout: float) -> None:
    def done() -> bool:
        return all(status == SubmissionStatus.GRADED for status in statuses(engine, ids))

    def explain() -> str:
        counts: dict[str, int] = {}
        for sid in ids:
            row = submission_row(engine, sid)
            key = f"{row.status} {row.failure_kind or ''} {row.failure_reason or ''}".strip()
            counts[key] = counts.get(key, 0) + 1
        logs = "\n".join(f"--- {h.name}\n{h.output()[-3000:]}" for h in sim.hosts)
        return f"not all graded: {counts}\n{logs}"

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        if SubmissionStatus.FAILED in statuses(engine, ids):
            break
        time.sleep(0.2)
    pytest.fail(explain())


@pytest.mark.parametrize("count", [1, 2, 3])
def test_sixty_submissions_are_graded_once_by_workers_on_simulated_hosts(
    count: int,
    client: FlaskClient,
    submit: Callable[..., str],
    make_user: Callable[..., Account],
    engine: Engine,
    hosts: Callable[[int], Simulation],
) -> None:
    """60 uploads graded by workers on 1, 2 or 3 namespace hosts: each graded exactly once, and
    every host took part (so each really reached Redis, PostgreSQL and the archives)."""
    ids = submit_many(submit, make_user, SUBMISSIONS)
    started = time.monotonic()
    sim = hosts(count)
    wait_all_graded(engine, ids, sim, timeout=240)
    elapsed = time.monotonic() - started
    print(f"\n{count} host(s): {SUBMISSIONS} graded in {elapsed:.1f} s")
    assert_graded_exactly_once(engine, ids)
    graders = {submission_row(engine, sid).worker for sid in ids}
    assert graders == {host.name for host in sim.hosts}


def test_a_host_cut_off_mid_grade_and_a_redis_flush_lose_nothing(
    client: FlaskClient,
    submit: Callable[..., str],
    make_user: Callable[..., Account],
    engine: Engine,
    redis_client: Redis,
    hosts: Callable[[int], Simulation],
) -> None:
    """With three hosts grading 60 slow submissions, one host's veth goes down mid-grade and its
    worker is then killed, and Redis is flushed while jobs wait: the others finish everything,
    the cut host's submission is graded once by another host, nothing is lost or duplicated."""
    ids = submit_many(submit, make_user, SUBMISSIONS, delay=0.15)
    sim = hosts(3)
    victim_host = sim.hosts[1]

    def running_on_victim() -> str | None:
        for sid in ids:
            row = submission_row(engine, sid)
            if row.status == SubmissionStatus.RUNNING and row.worker == victim_host.name:
                return sid
        return None

    victim = wait_for(running_on_victim, timeout=60, message="host-b never started a job")
    lost_job = submission_row(engine, victim).job_id
    cut_at = time.monotonic()
    victim_host.cut()
    time.sleep(1.0)  # the host is unreachable before its worker dies
    victim_host.kill_worker()
    wait_for(
        lambda: submission_row(engine, victim).job_id != lost_job,
        timeout=60,
        message="the reconciler never re-queued the cut host's submission",
    )
    requeued = time.monotonic() - cut_at
    wait_for(
        lambda: statuses(engine, ids).count(SubmissionStatus.GRADED) >= 10,
        timeout=120,
        message="the remaining hosts made no progress",
    )
    assert SubmissionStatus.QUEUED in statuses(engine, ids)  # jobs still waiting in Redis …
    assert redis_client.flushall()  # … are gone
    wait_for(
        lambda: submission_row(engine, victim).status == SubmissionStatus.GRADED,
        timeout=120,
        message="the cut host's submission was never graded elsewhere",
    )
    recovery = time.monotonic() - cut_at
    wait_all_graded(engine, ids, sim, timeout=240)
    print(
        f"\ncut host's submission re-queued {requeued:.1f} s, graded {recovery:.1f} s after the cut"
    )
    assert_graded_exactly_once(engine, ids)
    row = submission_row(engine, victim)
    assert row.attempts == 2 and row.worker in {"host-a", "host-c"}
    survivors = sim.hosts[0].output() + sim.hosts[2].output()
    assert "re-queued 1 abandoned" in survivors
    assert "reconciler: enqueued" in survivors  # the flushed jobs came back from the database


def test_a_host_reaches_the_services_only_over_its_veth_and_is_removed_after_a_failure(
    tmp_path: Path, redis_url: str
) -> None:
    """Inside a host namespace PostgreSQL answers at the gateway but not on loopback; when the
    block using the simulation raises, its namespaces, veths and processes are still removed."""
    port = urlsplit(redis_url).port
    assert port is not None
    probe = (
        "import socket, sys\n"
        "for address in sys.argv[1:]:\n"
        "    try:\n"
        "        socket.create_connection((address, 5432), timeout=3).close(); print('open')\n"
        "    except OSError:\n"
        "        print('refused')\n"
    )
    with (
        pytest.raises(RuntimeError, match="the test body failed"),
        simulation(tmp_path, redis_port=port, hosts=2) as sim,
    ):
        host = sim.hosts[0]
        sleeper = subprocess.Popen([*host.in_namespace(), "sleep", "300"])
        reach = subprocess.run(
            [*host.in_namespace(), "python3", "-c", probe, host.gateway, "127.0.0.1"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert reach.stdout.split() == ["open", "refused"]
        assert len(sim.leftovers()) == 4  # two namespaces, two veths
        raise RuntimeError("the test body failed")
    assert sim.leftovers() == []
    assert not any(name.startswith(sim.tag) for name in namespaces())
    assert sleeper.wait(timeout=10) != 0  # killed with its namespace
