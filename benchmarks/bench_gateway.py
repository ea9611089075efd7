"""Latency the model gateway adds to one model call (issue 12: target ≤ 2 ms at p50).

Method: the course model server runs as its own process (``grader model serve``). An agent is
graded on a one-case set whose policy names ``course-chat`` with budgets large enough for
thousands of calls. In its one answer, the agent makes ``--calls`` (default 1000) chat calls
through the gateway (``OPENAI_BASE_URL``: the runner's 127.0.0.1 listener → the run's Unix
socket → the gateway's checks and records → httpx → the course model server) and the same
number directly to the course model server, interleaved one by one, each over one kept-alive
``http.client`` connection, timing each call with ``perf_counter``; it returns the timings in
its answer. Added latency = gateway p50 − direct p50 (and the same at p99). With
``--sandbox none`` (default) both paths run in the same agent process in the same run; the
bubblewrap sandbox has no network, so with ``--sandbox bwrap`` the direct calls are made from
the benchmark process, interleaved with the run in a thread. Each configuration runs
``--runs`` times (default 3); the median of each figure over the runs is reported.

    .venv/bin/python benchmarks/bench_gateway.py [--calls 1000] [--runs 3] [--sandbox none bwrap]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from grader.core.casesets import load_case_set
from grader.core.model_usage import percentile
from grader.gateway.upstream import UpstreamConfig
from grader.grading import grade_agent
from grader.sandbox import make_sandbox

AGENT = """
import http.client, json, os, time
from urllib.parse import urlsplit

CALLS = {calls}
DIRECT = {direct!r}
BODY = json.dumps({{"model": "course-chat", "messages": [{{"role": "user",
    "content": "[rag-basics] Chunks overlap so no sentence is cut.\\nQuestion: why overlap?"}}]}})

def timer(base, key, model):
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    path = url.path.rstrip("/") + "/chat/completions"
    body = BODY.replace("course-chat", model)
    headers = {{"Authorization": "Bearer " + key, "Content-Type": "application/json"}}
    def once():
        started = time.perf_counter()
        conn.request("POST", path, body, headers)
        response = conn.getresponse()
        data = response.read()
        assert response.status == 200, data
        return (time.perf_counter() - started) * 1000
    return once

def answer(question):
    gateway = timer(os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"], "course-chat")
    direct = timer(DIRECT, "", "course-extractive") if DIRECT else None
    for _ in range(20):  # warm both connections
        gateway()
        if direct:
            direct()
    through, straight = [], []
    for _ in range(CALLS):
        through.append(gateway())
        if direct:
            straight.append(direct())
    return {{"answer": json.dumps({{"gateway": through, "direct": straight}}), "citations": [],
             "confidence": 0.1, "needs_human_review": True}}
"""
POLICY = """
case_timeout_seconds = 300
run_timeout_seconds = 600
setup_timeout_seconds = 30

[models.course-chat]
upstream = "course-extractive"
input_usd_per_mtok = 0.15
output_usd_per_mtok = 0.60
prices_date = "2026-12-01"

[model_limits]
calls_per_case = 10000
tokens_per_case = 100000000
tokens_per_run = 100000000
usd_per_run = 1000.0
"""


def start_course_model(port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-m", "grader", "model", "serve", "--port", str(port)],
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            connection.request("GET", "/v1/models")
            connection.getresponse().read()
            return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("the course model server did not start")


def host_direct(url: str, calls: int, stop: threading.Event, out: list[float]) -> None:
    """Direct calls from the benchmark process (for sandboxes without a network)."""
    connection = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1].split("/")[0]))
    body = json.dumps(
        {
            "model": "course-extractive",
            "messages": [
                {
                    "role": "user",
                    "content": "[rag-basics] Chunks overlap so no sentence is cut.\nQuestion: why overlap?",
                }
            ],
        }
    )
    while len(out) < calls and not stop.is_set():
        started = time.perf_counter()
        connection.request(
            "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"}
        )
        connection.getresponse().read()
        out.append((time.perf_counter() - started) * 1000)
        time.sleep(0.001)


def one_run(sandbox_name: str, calls: int, url: str, root: Path) -> dict[str, float]:
    isolated = sandbox_name != "none"
    agent = root / f"agent-{time.monotonic_ns()}"
    agent.mkdir()
    (agent / "agent.toml").write_text('name = "bench"\nentrypoint = "agent:answer"\n')
    (agent / "agent.py").write_text(AGENT.format(calls=calls, direct="" if isolated else url))
    sandbox = make_sandbox(sandbox_name)
    sandbox.check()
    direct_from_host: list[float] = []
    stop = threading.Event()
    helper = threading.Thread(target=host_direct, args=(url, calls, stop, direct_from_host))
    if isolated:
        helper.start()
    try:
        report = grade_agent(
            agent,
            entrypoint="agent:answer",
            setup=None,
            case_set=load_case_set(root / "cases"),
            sandbox=sandbox,
            label="bench-gateway",
            model_upstream=UpstreamConfig(url),
        )
    finally:
        stop.set()
        if isolated:
            helper.join()
    result = report.results[0]
    assert result.answer is not None, f"the agent failed: {result.error}"
    timings: dict[str, Any] = json.loads(result.answer.answer)
    direct = direct_from_host if isolated else timings["direct"]
    through = timings["gateway"]
    return {
        "gateway_p50": percentile(through, 0.5),
        "gateway_p99": percentile(through, 0.99),
        "direct_p50": percentile(direct, 0.5),
        "direct_p99": percentile(direct, 0.99),
        "added_p50": percentile(through, 0.5) - percentile(direct, 0.5),
        "added_p99": percentile(through, 0.99) - percentile(direct, 0.99),
        "recorded": len(result.model_calls),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sandbox", nargs="+", default=["none"])
    parser.add_argument("--port", type=int, default=18400)
    args = parser.parse_args()
    server = start_course_model(args.port)
    url = f"http://127.0.0.1:{args.port}/v1"
    table = Table(
        title=f"Model gateway: added latency per call ({args.calls} calls, median of "
        f"{args.runs} runs; load average {os.getloadavg()[0]:.2f})"
    )
    for column in (
        "sandbox",
        "direct p50",
        "gateway p50",
        "added p50",
        "direct p99",
        "gateway p99",
        "added p99",
    ):
        table.add_column(column, justify="right")
    try:
        with tempfile.TemporaryDirectory(prefix="bench-gateway-") as workdir:
            root = Path(workdir)
            cases = root / "cases"
            (cases / "corpus").mkdir(parents=True)
            (cases / "corpus" / "rag-basics.md").write_text("Chunks overlap.\n")
            (cases / "cases.jsonl").write_text(
                json.dumps({"id": "r1", "kind": "refusal", "question": "Time the gateway?"}) + "\n"
            )
            (cases / "policy.toml").write_text(POLICY)
            for name in args.sandbox:
                runs = [one_run(name, args.calls, url, root) for _ in range(args.runs)]
                assert all(run["recorded"] >= args.calls for run in runs)
                med = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
                table.add_row(
                    name,
                    *(
                        f"{med[key]:.2f} ms"
                        for key in (
                            "direct_p50",
                            "gateway_p50",
                            "added_p50",
                            "direct_p99",
                            "gateway_p99",
                            "added_p99",
                        )
                    ),
                )
    finally:
        server.kill()
        server.wait()
    Console().print(table)


if __name__ == "__main__":
    main()
