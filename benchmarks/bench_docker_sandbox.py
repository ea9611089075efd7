"""Benchmark the Docker sandbox: per-submission overhead and per-case round trip.

    .venv/bin/python benchmarks/bench_docker_sandbox.py [--runs 10] [--cases 300] [--json]

Per submission: launch (create + attach + start), the runner's ready handshake, and terminate
(kill + inspect + remove), with a trivial agent. Per case: one question/answer line round trip
through the attach stream with the same agent, after a warm-up. Targets (DESIGN §4 budget):
median < 1.5 s per submission, < 5 ms per case. Needs the engine and grader-sandbox:latest.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from grader.sandbox.base import AgentProcess, LaunchSpec
from grader.sandbox.docker import DockerSandbox

AGENT = """
def answer(question):
    return {"answer": question, "citations": ["rag-basics"], "confidence": 0.9,
            "needs_human_review": False}
"""


def _line(process: AgentProcess, buffer: bytearray, timeout: float = 30.0) -> bytes:
    deadline = time.monotonic() + timeout
    while (end := buffer.find(b"\n")) < 0:
        chunk = process.read(max(deadline - time.monotonic(), 0))
        if not chunk:
            raise RuntimeError(f"no line (got {chunk!r}); stderr: {process.stderr_tail()}")
        buffer += chunk
    line = bytes(buffer[:end])
    del buffer[: end + 1]
    return line


def _spec(root: Path) -> LaunchSpec:
    agent, corpus = root / "agent", root / "corpus"
    agent.mkdir()
    corpus.mkdir()
    (agent / "agent.py").write_text(AGENT)
    (corpus / "rag-basics.md").write_text("Chunks overlap.\n")
    for path in (root, agent, corpus):
        path.chmod(0o755)
    return LaunchSpec(agent, corpus, "agent:answer", label="bench")


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 2),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 2),
        "min_ms": round(ordered[0] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="submissions to start and stop")
    parser.add_argument("--cases", type=int, default=300, help="round trips in one container")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    sandbox = DockerSandbox()
    sandbox.check()
    launch_t, ready_t, stop_t, total_t = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-docker-") as tmp:
        spec = _spec(Path(tmp))
        # One untimed warm-up: the first container after an engine start pays for caches.
        sandbox.launch(spec).terminate()
        for _ in range(args.runs):
            t0 = time.perf_counter()
            process = sandbox.launch(spec)
            t1 = time.perf_counter()
            ready = _line(process, bytearray())
            t2 = time.perf_counter()
            info = process.terminate()
            t3 = time.perf_counter()
            assert json.loads(ready) == {"ready": True}, ready
            assert info.returncode == -9, info
            launch_t.append(t1 - t0)
            ready_t.append(t2 - t1)
            stop_t.append(t3 - t2)
            total_t.append(t3 - t0)

        case_t = []
        process = sandbox.launch(spec)
        try:
            buffer = bytearray()
            _line(process, buffer)
            for i in range(args.cases + 20):
                request = json.dumps({"qid": f"q{i}", "question": f"question {i}?"}) + "\n"
                t0 = time.perf_counter()
                process.write(request.encode())
                reply = _line(process, buffer)
                elapsed = time.perf_counter() - t0
                assert json.loads(reply)["qid"] == f"q{i}", reply
                if i >= 20:  # the first few warm up the interpreter and the stream
                    case_t.append(elapsed)
        finally:
            process.terminate()

    submission = {
        "total": _summary(total_t),
        "launch": _summary(launch_t),
        "ready": _summary(ready_t),
        "terminate": _summary(stop_t),
    }
    round_trip = _summary(case_t)
    if args.json:
        result = {
            "image_id": sandbox.image_id,
            "submission": {"runs": args.runs, **submission},
            "case": {"cases": args.cases, "round_trip": round_trip},
        }
        print(json.dumps(result))
    else:
        print(f"sandbox image {sandbox.image_id}")
        for key, s in submission.items():
            print(
                f"per submission {key:<9} median {s['median_ms']:8.1f} ms  "
                f"p90 {s['p90_ms']:8.1f} ms  (n={args.runs})"
            )
        print(
            f"per case round trip     median {round_trip['median_ms']:8.2f} ms  "
            f"p90 {round_trip['p90_ms']:8.2f} ms  (n={args.cases})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
