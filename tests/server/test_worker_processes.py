"""Durability with real processes: `grader worker` subprocesses, SIGKILL, Redis flushes.

Each test uploads slow agents (they sleep on every question), breaks something for real, and
checks that every submission still ends `graded` with exactly one result set.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from flask.testing import FlaskClient
from redis import Redis
from sqlalchemy.engine import Engine
from sqlmodel import Session

from grader.db.results import eval_records, list_gradings
from grader.db.submissions import get_submission
from grader.db.tables import SubmissionStatus
from grader.sandbox.process import CGROUP_PARENT, CGROUP_ROOT
from grader.settings import Settings
from tests.server.conftest import Account, Proc, honest_agent, submission_row, wait_for

SLOW = 0.7  # seconds per question: a grading takes about 2-3 s


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, grandchildren, …), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if Path(f"/proc/{pid}").exists()}


def run_cgroups_of(worker_pid: int) -> list[Path]:
    """Sandbox cgroups labelled with ``worker_pid`` (empty where cgroups are not used)."""
    return [
        path
        for controller in ("memory", "pids")
        for path in (CGROUP_ROOT / controller / CGROUP_PARENT).glob(f"sub-*-w{worker_pid}-*")
    ]


def assert_graded_exactly_once(engine: Engine, submission_ids: list[str]) -> None:
    with Session(engine) as session:
        for submission_id in submission_ids:
            row = get_submission(session=session, submission_id=submission_id)
            assert row is not None and row.status == SubmissionStatus.GRADED, row
            gradings = list_gradings(session=session, submission_id=submission_id)
            assert [g.version for g in gradings] == [1]
            assert row.current_grading_id == gradings[0].id
            assert gradings[0].id is not None
            assert len(eval_records(session=session, grading_id=gradings[0].id)) == 3
            assert gradings[0].decision == "awarded"


def statuses(engine: Engine, submission_ids: list[str]) -> list[str]:
    return [submission_row(engine, sid).status for sid in submission_ids]


def start_worker(processes: Callable[..., Proc], settings: Settings, name: str) -> Proc:
    return processes(name, ["worker", "--name", name], settings)


def test_worker_killed_mid_grade_is_recovered_and_graded_once(
    client: FlaskClient,
    student: Account,
    submit: Callable[..., str],
    engine: Engine,
    settings: Settings,
    processes: Callable[..., Proc],
) -> None:
    """SIGKILL one of two workers mid-job: the other's reconciler re-queues the abandoned
    submission once its lease is stale, and every submission is graded exactly once."""
    ids = [submit(student, honest_agent(delay=SLOW, salt=str(n))) for n in range(3)]
    doomed = start_worker(processes, settings, "worker-a")
    survivor = start_worker(processes, settings, "worker-b")

    def running_on_doomed() -> str | None:
        for sid in ids:
            row = submission_row(engine, sid)
            if row.status == SubmissionStatus.RUNNING and row.worker == "worker-a":
                return sid
        return None

    victim = wait_for(running_on_doomed, timeout=30, message="worker-a never started a job")
    sandbox = wait_for(
        lambda: descendants(doomed.process.pid), timeout=10, message="no sandbox under worker-a"
    )
    os.kill(doomed.process.pid, signal.SIGKILL)
    doomed.process.wait(timeout=10)
    assert submission_row(engine, victim).status == SubmissionStatus.RUNNING  # stuck, for now

    wait_for(
        lambda: statuses(engine, ids) == ["graded"] * 3,
        timeout=60,
        message=f"not all graded: {statuses(engine, ids)}\n{survivor.output()}",
    )
    assert_graded_exactly_once(engine, ids)
    row = submission_row(engine, victim)
    assert row.attempts == 2 and row.worker == "worker-b"
    assert "re-queued 1 abandoned" in survivor.output()
    assert alive(sandbox) == set(), "the killed worker's sandbox outlived it"
    wait_for(
        lambda: run_cgroups_of(doomed.process.pid) == [],
        timeout=10,
        message="the killed worker's sandbox cgroups were not swept",
    )


def test_redis_flushes_lose_no_submission(
    client: FlaskClient,
    student: Account,
    submit: Callable[..., str],
    engine: Engine,
    settings: Settings,
    redis_client: Redis,
    processes: Callable[..., Proc],
) -> None:
    """Flush Redis with jobs queued (no worker yet) and again mid-grade: the worker's start-up
    and periodic reconciler re-enqueue what was lost, and each submission is graded once."""
    ids = [submit(student, honest_agent(delay=SLOW, salt=str(n))) for n in range(3)]
    assert redis_client.flushall()  # every queued job is gone
    worker = start_worker(processes, settings, "worker-a")
    wait_for(
        lambda: SubmissionStatus.RUNNING in statuses(engine, ids),
        timeout=30,
        message=f"nothing started after the flush:\n{worker.output()}",
    )
    assert redis_client.flushall()  # again, while a job runs and others wait
    wait_for(
        lambda: statuses(engine, ids) == ["graded"] * 3,
        timeout=60,
        message=f"not all graded: {statuses(engine, ids)}\n{worker.output()}",
    )
    assert_graded_exactly_once(engine, ids)
    assert "reconciler: enqueued" in worker.output()


def test_restarted_worker_takes_over_an_abandoned_submission(
    client: FlaskClient,
    student: Account,
    submit: Callable[..., str],
    engine: Engine,
    settings: Settings,
    processes: Callable[..., Proc],
) -> None:
    """With the only worker killed mid-job, a new worker started later finishes the job."""
    submission_id = submit(student, honest_agent(delay=SLOW))
    first = start_worker(processes, settings, "worker-a")
    wait_for(
        lambda: submission_row(engine, submission_id).status == SubmissionStatus.RUNNING,
        timeout=30,
        message=f"the job never started:\n{first.output()}",
    )
    uses_cgroups = os.geteuid() == 0 and (CGROUP_ROOT / "memory" / "cgroup.procs").exists()
    if uses_cgroups:  # RUNNING comes before the sandbox starts: wait for the run itself
        wait_for(
            lambda: bool(run_cgroups_of(first.process.pid)),
            timeout=30,
            message=f"the run never got its cgroup:\n{first.output()}",
        )
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(timeout=10)
    if uses_cgroups:
        assert run_cgroups_of(first.process.pid), "the run had no cgroup to leave behind"
    second = start_worker(processes, settings, "worker-b")
    wait_for(
        lambda: submission_row(engine, submission_id).status == SubmissionStatus.GRADED,
        timeout=60,
        message=f"not graded after the restart:\n{second.output()}",
    )
    assert_graded_exactly_once(engine, [submission_id])
    assert submission_row(engine, submission_id).worker == "worker-b"
    assert run_cgroups_of(first.process.pid) == []  # swept by the new worker at start
