"""How long the evaluator audit takes, now that ``check-cases`` and ``practice publish`` run it.

Method: for each shipped case set, "in-process" loads the case set afresh (so no per-document
index survives from the previous run) and times :func:`grader.audit.report.run_audit` alone —
every canary, refusal-aware forms included, over every case, graded by the real gates; "cli"
times ``python -m grader audit --cases DIR --json`` and ``python -m grader check-cases DIR``
(with and without ``--no-audit``) as subprocesses, so it adds interpreter start-up, imports and
case-set loading. Each measure runs ``--runs`` times (default 5) after one warm-up; the median
and min/max are reported.

    .venv/bin/python benchmarks/bench_audit.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from grader.audit.canaries import CANARIES
from grader.audit.report import run_audit
from grader.core.casesets import load_case_set

REPO = Path(__file__).resolve().parent.parent
CASE_SETS = ("private_cases", "practice_cases")


def timed(action: Callable[[], object], runs: int) -> list[float]:
    action()  # warm-up: imports, stemmer caches
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return seconds


def cli(*args: str) -> Callable[[], object]:
    def run() -> object:
        return subprocess.run(
            [sys.executable, "-m", "grader", *args], capture_output=True, cwd=REPO, check=False
        )

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    table = Table(title=f"Evaluator audit ({len(CANARIES)} canaries), median of {args.runs}")
    for column in ("case set", "measure", "median", "min", "max"):
        table.add_column(column)
    for name in CASE_SETS:
        root = REPO / name
        cases = len(load_case_set(root).cases)
        measures = {
            f"run_audit in-process ({cases} cases)": lambda root=root: run_audit(
                load_case_set(root)
            ),
            "grader audit --json": cli("audit", "--cases", name, "--json"),
            "grader check-cases": cli("check-cases", name),
            "grader check-cases --no-audit": cli("check-cases", name, "--no-audit"),
        }
        for label, action in measures.items():
            seconds = timed(action, args.runs)
            table.add_row(
                name,
                label,
                f"{statistics.median(seconds):.3f} s",
                f"{min(seconds):.3f} s",
                f"{max(seconds):.3f} s",
            )
    Console().print(table)


if __name__ == "__main__":
    main()
