"""Throughput against the number of worker hosts, and recovery after a host is cut (issue 14).

Method: the multi-host simulation of the tests (tests/multihost.py). Each host is a Linux
network namespace with its own veth pair, private folder and a real ``grader worker`` (bubblewrap
sandbox, per-run cgroups), reaching a private ``redis-server`` and the PostgreSQL database (a
throw-away schema) only over its veth through a host-side TCP forwarder; archives come from the
database store (``GRADER_STORAGE_URL`` = the database). For each agent and each host count, the
hosts are started and ready (rq listening), then ``--submissions`` archives (distinct bytes) are
stored and enqueued the way an upload does (store, row, job), and the clock runs from the
first enqueue until every submission is ``graded``. ``lost`` counts submissions not graded
within the timeout (or failed), ``duplicated`` result sets beyond one per submission;
``enqueue_seconds`` is how long storing and enqueueing took and ``cpu_busy`` the share of the
machine's CPU time that was busy during the run (/proc/stat, every process).

Agents: ``trivial`` answers every question at once with a fixed refusal (the grader's own cost
per submission: fetch, unpack, sandbox start, gates, records); ``reference`` is
submissions/examples/reference (lexical retrieval over the corpus, the realistic cost). Both
run against the demo private case set (29 questions).

Recovery: with the largest host count, the trivial agent slowed to 0.2 s a question, one host's
veth goes down while it grades, then its worker is killed; the figures are the seconds from the
cut until the reconciler of another host re-queues the submission (``recovery_seconds``) and
until it is graded. The lease and reconciler interval are shortened (``--lease-seconds``,
``--reconcile-seconds``): recovery takes about lease + one interval, so with the defaults
(60 s, 30 s) expect 60 to 90 s.

    .venv/bin/python benchmarks/bench_scale_out.py [--hosts 1,2,3] [--submissions 60] [--json]
        [--agents trivial,reference] [--no-recovery]

Needs root (network namespaces), redis-server and the PostgreSQL of scripts/services.sh.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from redis import Redis
from sqlalchemy.engine import Engine

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.db.archive_store import open_archive_store  # noqa: E402
from grader.db.engine import make_engine, session_scope  # noqa: E402
from grader.db.migrate import upgrade_database  # noqa: E402
from grader.db.submissions import create_submission, get_submission  # noqa: E402
from grader.db.tables import GradingRow, Role, SubmissionRow, SubmissionStatus  # noqa: E402
from grader.db.users import create_user  # noqa: E402
from grader.settings import Settings  # noqa: E402
from grader.worker.enqueue import enqueue_grading, make_queue  # noqa: E402
from tests.multihost import Simulation, host_env  # noqa: E402

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
TRIVIAL_AGENT = """
import time

DELAY = {delay}

def answer(question):
    if DELAY:
        time.sleep(DELAY)
    return {{"answer": "I don't know: the course material does not cover this.",
            "citations": [], "confidence": 0.1, "needs_human_review": True}}
"""


def agent_zip(agent: str, salt: str, *, delay: float = 0.0) -> bytes:
    """The archive of ``agent`` with a file making its bytes unique."""
    files: dict[str, str | bytes] = {}
    if agent == "trivial":
        files["agent.toml"] = 'name = "trivial"\nentrypoint = "agent:answer"\n'
        files["agent.py"] = TRIVIAL_AGENT.format(delay=delay)
    else:
        root = REPO / "submissions" / "examples" / "reference"
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files[path.relative_to(root).as_posix()] = path.read_bytes()
    files["salt.txt"] = salt
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), content)
    return buffer.getvalue()


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")


class Bench:
    """A private Redis and a PostgreSQL schema shared by every run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workdir = Path(tempfile.mkdtemp(prefix="grader-scale-"))
        self.redis_port = _free_port()
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        self.schema = f"grader_scale_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.admin = sa.create_engine(args.database_url)
        with self.admin.begin() as connection:
            connection.execute(sa.text(f'CREATE SCHEMA "{self.schema}"'))
        self.url = f"{args.database_url}?options=-csearch_path%3D{self.schema}"
        self.engine = make_engine(self.url)
        upgrade_database(self.engine)
        client = Redis(port=self.redis_port)
        wait_until(lambda: _pings(client), 20, "redis-server")
        self.client = client

    def close(self) -> None:
        self.engine.dispose()
        with self.admin.begin() as connection:
            connection.execute(sa.text(f'DROP SCHEMA "{self.schema}" CASCADE'))
        self.admin.dispose()
        self.redis.terminate()
        self.redis.wait(timeout=10)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def settings(self) -> Settings:
        return Settings(
            _env_file=None,  # type: ignore[call-arg]
            database_url=self.url,
            storage_url=self.url,
            redis_url=f"redis://127.0.0.1:{self.redis_port}/0",
            cases_dir=REPO / "private_cases",
            storage_dir=self.workdir / "server-spool",
            sandbox="bwrap",
            secret_key="bench",
            queue_name=f"scale-{uuid.uuid4().hex[:8]}",
            heartbeat_seconds=self.args.lease_seconds / 5,
            lease_seconds=self.args.lease_seconds,
            requeue_grace_seconds=1.0,
            reconcile_interval_seconds=self.args.reconcile_seconds,
        )

    def reset(self) -> None:
        with self.engine.begin() as connection:
            connection.execute(
                sa.text(
                    "TRUNCATE eval_records, gradings, submissions, users, archives, "
                    "archive_chunks RESTART IDENTITY CASCADE"
                )
            )
        self.client.flushall()

    def start_hosts(self, settings: Settings, count: int, tag: str) -> Simulation:
        sim = Simulation(self.workdir / tag, redis_port=self.redis_port).__enter__()
        base = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_")}
        for name, value in settings.model_dump().items():
            base[f"GRADER_{name.upper()}"] = str(value)
        base["GRADER_LOG_LEVEL"] = "INFO"
        try:
            for _ in range(count):
                host = sim.add_host()
                sim.start_worker(host, host_env(base, host, database_url=self.url))
            for host in sim.hosts:
                wait_until(
                    lambda host=host: "Listening on" in host.output(),  # type: ignore[misc]
                    60,
                    f"the worker of {host.name}",
                )
        except BaseException:
            sim.close()
            raise
        return sim

    def submit(
        self, settings: Settings, agent: str, count: int, *, delay: float = 0.0
    ) -> list[str]:
        """Store, record and enqueue ``count`` submissions as uploads do; their ids."""
        store = open_archive_store(
            settings.storage_url, storage_dir=settings.storage_dir, database_url=self.url
        )
        queue = make_queue(settings, self.client)
        ids: list[str] = []
        try:
            for n in range(count):
                data = agent_zip(agent, f"{uuid.uuid4()} {n}", delay=delay)
                with (
                    store.receiving(io.BytesIO(data), "a.zip", max_bytes=len(data)) as received,
                    session_scope(self.engine) as session,
                ):
                    user, _token = create_user(
                        session=session, name=f"s-{uuid.uuid4().hex[:10]}", role=Role.STUDENT
                    )
                    row = create_submission(
                        session=session,
                        user=user,
                        filename="a.zip",
                        agent_name=agent,
                        package_sha256=received.sha256,
                        package_bytes=received.size,
                        daily_limit=None,
                    )
                    assert isinstance(row, SubmissionRow) and row.job_id is not None
                    store.keep(received)
                    job = (row.id, row.job_id)
                enqueue_grading(queue, job[0], job[1], settings)
                ids.append(job[0])
        finally:
            store.close()
        return ids

    def run(self, agent: str, hosts: int) -> dict[str, Any]:
        self.reset()
        settings = self.settings()
        sim = self.start_hosts(settings, hosts, f"{agent}-{hosts}")
        try:
            cpu_before = _cpu_times()
            started = time.monotonic()
            ids = self.submit(settings, agent, self.args.submissions)
            enqueued = time.monotonic() - started
            with contextlib.suppress(TimeoutError):  # what is left is counted as lost
                wait_until(lambda: _settled(self.engine, ids), self.args.timeout, "grading")
            seconds = time.monotonic() - started
            busy = _busy_share(cpu_before, _cpu_times())
        finally:
            sim.close()
        graded, duplicated = _outcome(self.engine, ids)
        return {
            "hosts": hosts,
            "agent": agent,
            "submissions": len(ids),
            "seconds": round(seconds, 2),
            # How long storing and enqueueing took (this process, on the same 2 CPUs): the
            # hosts cannot finish before it.
            "enqueue_seconds": round(enqueued, 2),
            "per_minute": round(graded / seconds * 60, 1),
            # Share of the machine's CPU time that was busy (all processes, /proc/stat).
            "cpu_busy": round(busy, 2),
            "lost": len(ids) - graded,
            "duplicated": duplicated,
        }

    def recovery(self, hosts: int) -> dict[str, Any]:
        """Cut one host mid-grade; seconds until its submission is re-queued and graded."""
        self.reset()
        settings = self.settings()
        sim = self.start_hosts(settings, hosts, f"recovery-{hosts}")
        try:
            ids = self.submit(settings, "trivial", 2 * hosts, delay=0.2)
            victim_host = sim.hosts[-1]
            victim: list[tuple[str, str | None]] = []

            def running_on_victim() -> bool:
                for sid in ids:
                    row = _row(self.engine, sid)
                    if row.status == SubmissionStatus.RUNNING and row.worker == victim_host.name:
                        victim.append((sid, row.job_id))
                        return True
                return False

            wait_until(running_on_victim, 60, f"a job on {victim_host.name}")
            sid, lost_job = victim[0]
            cut = time.monotonic()
            victim_host.cut()
            time.sleep(1.0)
            victim_host.kill_worker()
            wait_until(lambda: _row(self.engine, sid).job_id != lost_job, 300, "the re-queue")
            requeued = time.monotonic() - cut
            wait_until(
                lambda: _row(self.engine, sid).status == SubmissionStatus.GRADED, 300, "regrade"
            )
            graded = time.monotonic() - cut
            wait_until(lambda: _settled(self.engine, ids), self.args.timeout, "the rest")
        finally:
            sim.close()
        done, duplicated = _outcome(self.engine, ids)
        return {
            "hosts": hosts,
            "requeued_seconds": round(requeued, 2),
            "graded_seconds": round(graded, 2),
            "lease_seconds": settings.lease_seconds,
            "reconcile_interval_seconds": settings.reconcile_interval_seconds,
            "lost": len(ids) - done,
            "duplicated": duplicated,
        }


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total else 0.0


def _pings(client: Redis) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _row(engine: Engine, submission_id: str) -> SubmissionRow:
    with session_scope(engine) as session:
        row = get_submission(session=session, submission_id=submission_id)
        assert row is not None
        return row


def _settled(engine: Engine, ids: list[str]) -> bool:
    with engine.connect() as connection:
        pending = connection.execute(
            sa.select(sa.func.count())
            .select_from(SubmissionRow)
            .where(
                SubmissionRow.id.in_(ids),  # type: ignore[attr-defined]
                SubmissionRow.status.in_(  # type: ignore[attr-defined]
                    [SubmissionStatus.QUEUED.value, SubmissionStatus.RUNNING.value]
                ),
            )
        ).scalar_one()
    return int(pending) == 0


def _outcome(engine: Engine, ids: list[str]) -> tuple[int, int]:
    """Submissions graded, and result sets beyond one per submission."""
    with engine.connect() as connection:
        graded = connection.execute(
            sa.select(sa.func.count())
            .select_from(SubmissionRow)
            .where(
                SubmissionRow.id.in_(ids),  # type: ignore[attr-defined]
                SubmissionRow.status == SubmissionStatus.GRADED.value,
            )
        ).scalar_one()
        results = connection.execute(
            sa.select(sa.func.count())
            .select_from(GradingRow)
            .where(GradingRow.submission_id.in_(ids))  # type: ignore[attr-defined]
        ).scalar_one()
    return int(graded), int(results) - int(graded)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", default="1,2,3", help="comma-separated host counts")
    parser.add_argument("--submissions", type=int, default=60)
    parser.add_argument("--agents", default="trivial,reference")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--no-recovery", action="store_true", help="skip the host-cut run")
    parser.add_argument("--lease-seconds", type=float, default=10.0)
    parser.add_argument("--reconcile-seconds", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    parser.add_argument(
        "--database-url", default=os.environ.get("GRADER_TEST_POSTGRES_URL", POSTGRES_URL)
    )
    args = parser.parse_args()
    try:
        counts = [int(item) for item in args.hosts.split(",") if item.strip()]
    except ValueError:
        parser.error("--hosts takes comma-separated whole numbers, e.g. 1,2,3")
    agents = [item.strip() for item in args.agents.split(",") if item.strip()]
    if not counts or min(counts) < 1 or any(a not in ("trivial", "reference") for a in agents):
        parser.error("--hosts needs counts of at least 1; --agents takes trivial,reference")
    if os.geteuid() != 0:
        parser.exit(2, "bench_scale_out: needs root (network namespaces)\n")
    bench = Bench(args)
    runs: list[dict[str, Any]] = []
    recovery: dict[str, Any] | None = None
    try:
        for agent in agents:
            for count in counts:
                runs.append(bench.run(agent, count))
                if not args.json:
                    print(json.dumps(runs[-1]), flush=True)
        if not args.no_recovery:
            recovery = bench.recovery(max(2, max(counts)))
    finally:
        bench.close()
    report = {
        "runs": runs,
        "recovery_seconds": recovery["requeued_seconds"] if recovery else None,
        "recovery": recovery,
        "cpus": os.cpu_count(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print()
    print(
        f"{'agent':<10} {'hosts':>5} {'subs':>5} {'per min':>8} {'enqueue s':>9} {'cpu':>5} "
        f"{'lost':>5} {'dup':>4}"
    )
    for run in runs:
        print(
            f"{run['agent']:<10} {run['hosts']:>5} {run['submissions']:>5} "
            f"{run['per_minute']:>8} {run['enqueue_seconds']:>9} {run['cpu_busy']:>5} "
            f"{run['lost']:>5} "
            f"{run['duplicated']:>4}"
        )
    if recovery:
        print(
            f"\nhost cut with {recovery['hosts']} hosts: re-queued after "
            f"{recovery['requeued_seconds']} s, graded after {recovery['graded_seconds']} s "
            f"(lease {recovery['lease_seconds']} s, reconciler every "
            f"{recovery['reconcile_interval_seconds']} s)"
        )
    print(f"load average {report['load_average']} on {report['cpus']} CPUs")


if __name__ == "__main__":
    main()
