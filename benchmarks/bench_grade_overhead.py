"""How long ``grader grade`` spends on everything but the agent (issue: < 1 s for 20 cases).

Method: a trivial agent (returns a fixed answer, no work) is graded on a generated 20-case set,
so nearly all the time measured is the grader's own: loading and hashing the case set, copying
and checking the package, starting the sandbox and the runner handshake, the JSONL round trip
per case, answer validation, gates, decision and views. Each configuration runs ``--runs``
times (default 7) after one warm-up; the median and min/max are reported. "in-process" calls
the same functions the CLI calls; "cli" runs ``python -m grader grade --json`` as a subprocess,
so it adds interpreter start-up and imports.

    .venv/bin/python benchmarks/bench_grade_overhead.py [--runs 7] [--sandbox bwrap none]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from grader.cli.helpers import grade_package_path
from grader.core.casesets import load_case_set
from grader.core.views import student_view
from grader.sandbox import make_sandbox

TRIVIAL_AGENT = """
def answer(question):
    return {"answer": "Chunks overlap.", "citations": ["rag-basics"], "confidence": 0.9,
            "needs_human_review": False}
"""


def make_inputs(root: Path) -> tuple[Path, Path]:
    agent = root / "agent"
    agent.mkdir()
    (agent / "agent.toml").write_text('name = "trivial"\nentrypoint = "agent:answer"\n')
    (agent / "agent.py").write_text(TRIVIAL_AGENT)
    cases = root / "cases"
    (cases / "corpus").mkdir(parents=True)
    (cases / "corpus" / "rag-basics.md").write_text("Chunks overlap. " * 200)
    lines = []
    for i in range(12):
        lines.append(
            {
                "id": f"a{i}",
                "kind": "answerable",
                "question": f"Question {i} on chunks?",
                "expected_citations": ["rag-basics"],
                "required_concepts": [["overlap"]],
            }
        )
    for i in range(8):
        lines.append({"id": f"r{i}", "kind": "refusal", "question": f"Unanswerable {i}?"})
    (cases / "cases.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (cases / "policy.toml").write_text("")
    return agent, cases


def in_process(agent: Path, cases: Path, sandbox_name: str) -> float:
    started = time.perf_counter()
    case_set = load_case_set(cases)
    sandbox = make_sandbox(sandbox_name)
    sandbox.check()
    report = grade_package_path(agent, case_set, sandbox)
    json.dumps(student_view(report))
    return time.perf_counter() - started


def cli(agent: Path, cases: Path, sandbox_name: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "grade",
            str(agent),
            "--cases",
            str(cases),
            "--sandbox",
            sandbox_name,
            "--json",
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--sandbox", nargs="+", default=["bwrap", "none"])
    args = parser.parse_args()
    table = Table(title=f"grader grade, 20 cases, trivial agent (median of {args.runs})")
    for column in ("sandbox", "mode", "median s", "min s", "max s"):
        table.add_column(column)
    with tempfile.TemporaryDirectory() as tmp:
        agent, cases = make_inputs(Path(tmp))
        for sandbox_name in args.sandbox:
            for mode, measure in (("in-process", in_process), ("cli", cli)):
                measure(agent, cases, sandbox_name)  # warm-up
                times = [measure(agent, cases, sandbox_name) for _ in range(args.runs)]
                table.add_row(
                    sandbox_name,
                    mode,
                    f"{statistics.median(times):.3f}",
                    f"{min(times):.3f}",
                    f"{max(times):.3f}",
                )
    Console().print(table)


if __name__ == "__main__":
    main()
