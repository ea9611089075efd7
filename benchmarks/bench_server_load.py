"""Load test of the grading server on loopback: status-poll latency and upload throughput.

What it does (everything on 127.0.0.1, bounded in requests and time, then it stops):

1. Starts a private ``redis-server`` on a free port, makes a SQLite database (or uses
   ``--database-url``) and ``--clients`` student accounts, and starts ``grader serve``
   (gunicorn, ``--workers`` processes x ``--threads`` threads) on the demo case set.
2. **Uploads**: every client uploads ``--uploads`` distinct copies of the reference agent at the
   same time (multipart POST /api/submissions: archive checked, unpacked, stored, recorded,
   enqueued); reports uploads per second and latency percentiles.
3. Grades one submission for real (bubblewrap) and gives every submission a copy of that
   result set, so polls return full feedback JSON like a graded submission.
4. **Polls, paced**: every client, on its own keep-alive connection, polls
   GET /api/submissions/<id> of its own submissions once every ``--interval`` seconds (the
   pages poll every 2 s; the default 0.25 s offers 8x that load), ``--polls`` times; reports
   p50/p90/p99/max latency. This is the figure the p99 target is about.
5. **Polls, saturated**: the same clients poll back to back (``--burst-polls`` each, capped by
   ``--duration`` seconds): the most the server answers per second, and the latency then
   (bounded by Little's law: clients / throughput).

Rate limits are raised for the run (each client would otherwise hit the per-token limit). The
client is Python threads with ``http.client``; it shares the machine's cores with the server.

    .venv/bin/python benchmarks/bench_server_load.py [--clients 50] [--polls 200] [--json]
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.core.views import student_view  # noqa: E402
from grader.db import repository as repo  # noqa: E402
from grader.db.engine import make_engine, session_scope  # noqa: E402
from grader.db.migrate import upgrade_database  # noqa: E402
from grader.db.tables import Role, SubmissionStatus  # noqa: E402
from grader.settings import Settings  # noqa: E402
from grader.worker.service import GradingService  # noqa: E402

GRADER = str(Path(sys.executable).with_name("grader"))
REFERENCE = REPO / "submissions" / "examples" / "reference"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise SystemExit(f"bench: {what} did not come up within {timeout} s")


def reference_zip(salt: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(REFERENCE.iterdir()):
            if path.is_file():
                archive.write(path, path.name)
        archive.writestr("salt.txt", salt)
    return buffer.getvalue()


def multipart(data: bytes) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="package"; '
            f'filename="agent.zip"\r\nContent-Type: application/zip\r\n\r\n'
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000

    return {
        "p50_ms": round(at(0.50), 2),
        "p90_ms": round(at(0.90), 2),
        "p99_ms": round(at(0.99), 2),
        "max_ms": round(ordered[-1] * 1000, 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
    }


def run_clients(count: int, work: Callable[[int], list[float]]) -> tuple[list[float], float]:
    """Run ``work(i)`` in ``count`` threads started together; all latencies and wall time."""
    results: list[list[float]] = [[] for _ in range(count)]
    barrier = threading.Barrier(count + 1)

    def target(index: int) -> None:
        barrier.wait()
        results[index] = work(index)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return [value for chunk in results for value in chunk], elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--uploads", type=int, default=4, help="uploads per client")
    parser.add_argument("--polls", type=int, default=40, help="paced polls per client")
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between polls")
    parser.add_argument("--burst-polls", type=int, default=100, help="back-to-back polls")
    parser.add_argument("--duration", type=float, default=60.0, help="cap on the poll phase (s)")
    parser.add_argument("--workers", type=int, default=None, help="gunicorn processes")
    parser.add_argument("--threads", type=int, default=4, help="threads per gunicorn process")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="grader-bench-"))
    redis_port = free_port()
    redis = subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    server: subprocess.Popen[bytes] | None = None
    try:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            database_url=args.database_url or f"sqlite:///{workdir / 'grader.db'}",
            redis_url=f"redis://127.0.0.1:{redis_port}/0",
            cases_dir=REPO / "private_cases",
            storage_dir=workdir / "storage",
            secret_key="bench",
            queue_name=f"bench-{uuid.uuid4().hex[:8]}",
            rate_limit="1000000 per minute",
            upload_rate_limit="1000000 per minute",
        )
        engine = make_engine(settings.database_url)
        upgrade_database(engine)
        tokens: list[str] = []
        with session_scope(engine) as session:
            for index in range(args.clients):
                _user, token = repo.create_user(
                    session=session, name=f"bench-{uuid.uuid4().hex[:6]}-{index}", role=Role.STUDENT
                )
                tokens.append(token)

        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_")}
        for name, value in settings.model_dump().items():
            env[f"GRADER_{name.upper()}"] = str(value)
        workers = args.workers or 2 * (os.cpu_count() or 1) + 1
        server = subprocess.Popen(
            [GRADER, "serve", "--port", str(port), "--workers", str(workers),
             "--threads", str(args.threads)],
            env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        wait_until(healthy, 30, "grader serve")

        # -- uploads ------------------------------------------------------------------------
        archives = [
            [reference_zip(f"{c}-{n}") for n in range(args.uploads)] for c in range(args.clients)
        ]
        submission_ids: list[list[str]] = [[] for _ in range(args.clients)]

        def upload_work(index: int) -> list[float]:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            latencies = []
            for data in archives[index]:
                body, content_type = multipart(data)
                started = time.perf_counter()
                connection.request(
                    "POST",
                    "/api/submissions",
                    body=body,
                    headers={
                        "Authorization": f"Bearer {tokens[index]}",
                        "Content-Type": content_type,
                    },
                )
                response = connection.getresponse()
                payload = response.read()
                latencies.append(time.perf_counter() - started)
                if response.status != 202:
                    raise SystemExit(f"bench: upload answered {response.status}: {payload[:200]!r}")
                submission_ids[index].append(json.loads(payload)["id"])
            connection.close()
            return latencies

        upload_latencies, upload_elapsed = run_clients(args.clients, upload_work)
        upload_bytes = sum(len(a) for chunk in archives for a in chunk)

        # -- give every submission a real result set ----------------------------------------
        service = GradingService.from_settings(settings, name="bench")
        all_ids = [sid for chunk in submission_ids for sid in chunk]
        with session_scope(engine) as session:
            first = repo.get_submission(session=session, submission_id=all_ids[0])
            assert first is not None and first.job_id is not None
            first_job = first.job_id
        service.grade(all_ids[0], job_id=first_job)
        with session_scope(engine) as session:
            graded = repo.get_submission(session=session, submission_id=all_ids[0])
            assert graded is not None and graded.status == SubmissionStatus.GRADED
            assert graded.current_grading_id is not None
            report = repo.load_report(session=session, grading_id=graded.current_grading_id)
            assert report is not None
        view = student_view(report)
        for sid in all_ids[1:]:
            with session_scope(engine) as session:
                row = repo.get_submission(session=session, submission_id=sid)
                assert row is not None and row.job_id is not None
                repo.claim_submission(
                    session=session, submission_id=sid, job_id=row.job_id, worker="bench"
                )
                repo.record_grading(
                    session=session, submission_id=sid, job_id=row.job_id, report=report,
                    student_view=view, seconds=1.0,
                )  # fmt: skip

        # -- polls --------------------------------------------------------------------------
        deadline = time.monotonic() + args.duration
        sizes: list[int] = []

        def poll_work(index: int, count: int, interval: float) -> list[float]:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            headers = {"Authorization": f"Bearer {tokens[index]}"}
            own = submission_ids[index]
            latencies = []
            # Spread the paced clients over one interval instead of firing them together.
            next_at = time.perf_counter() + interval * index / args.clients
            for n in range(count):
                if time.monotonic() > deadline:
                    break
                if interval:
                    time.sleep(max(0.0, next_at - time.perf_counter()))
                    next_at += interval
                started = time.perf_counter()
                connection.request("GET", f"/api/submissions/{own[n % len(own)]}", headers=headers)
                response = connection.getresponse()
                payload = response.read()
                latencies.append(time.perf_counter() - started)
                if response.status != 200:
                    raise SystemExit(f"bench: poll answered {response.status}: {payload[:200]!r}")
                if n == 0:
                    sizes.append(len(payload))
            connection.close()
            return latencies

        run_clients(args.clients, lambda i: poll_work(i, 2, 0)[:0])  # warm-up, unmeasured
        deadline = time.monotonic() + args.duration
        paced, paced_elapsed = run_clients(
            args.clients, lambda i: poll_work(i, args.polls, args.interval)
        )
        deadline = time.monotonic() + args.duration
        burst, burst_elapsed = run_clients(
            args.clients, lambda i: poll_work(i, args.burst_polls, 0)
        )

        results: dict[str, Any] = {
            "machine": {"cpus": os.cpu_count()},
            "server": {
                "gunicorn_workers": workers,
                "threads": args.threads,
                "database": settings.database_url.split(":", 1)[0],
            },
            "uploads": {
                "clients": args.clients,
                "count": len(upload_latencies),
                "seconds": round(upload_elapsed, 2),
                "per_second": round(len(upload_latencies) / upload_elapsed, 1),
                "mib_per_second": round(upload_bytes / upload_elapsed / 2**20, 2),
                "archive_bytes": len(archives[0][0]),
                **percentiles(upload_latencies),
            },
            "polls_paced": {
                "clients": args.clients,
                "interval_s": args.interval,
                "count": len(paced),
                "seconds": round(paced_elapsed, 2),
                "per_second": round(len(paced) / paced_elapsed, 1),
                "response_bytes": sizes[0] if sizes else None,
                **percentiles(paced),
            },
            "polls_saturated": {
                "clients": args.clients,
                "count": len(burst),
                "seconds": round(burst_elapsed, 2),
                "per_second": round(len(burst) / burst_elapsed, 1),
                **percentiles(burst),
            },
        }
        if args.json:
            print(json.dumps(results, indent=2))
        else:
            up = results["uploads"]
            print(
                f"server: gunicorn {workers} processes x {args.threads} threads, "
                f"{results['server']['database']}, {os.cpu_count()} CPUs (client on the same machine)"
            )
            print(
                f"uploads: {up['count']} from {up['clients']} clients in {up['seconds']} s = "
                f"{up['per_second']}/s ({up['mib_per_second']} MiB/s); latency p50 "
                f"{up['p50_ms']} ms, p99 {up['p99_ms']} ms"
            )
            for label, key in (
                ("polls, paced", "polls_paced"),
                ("polls, saturated", "polls_saturated"),
            ):
                polls = results[key]
                print(
                    f"{label}: {polls['count']} from {polls['clients']} clients in "
                    f"{polls['seconds']} s = {polls['per_second']}/s; latency p50 "
                    f"{polls['p50_ms']} ms, p90 {polls['p90_ms']} ms, p99 {polls['p99_ms']} ms, "
                    f"max {polls['max_ms']} ms"
                )
        engine.dispose()
        service.engine.dispose()
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        redis.terminate()
        redis.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
