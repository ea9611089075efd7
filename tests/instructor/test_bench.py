"""The regrade benchmark script still runs (a small size, SQLite), so its figures stay real."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_regrade.py"


def test_bench_regrade_runs_on_a_small_class() -> None:
    """100 submissions × 20 cases: every one is regraded after the label fix, and a second
    regrade with no change changes nothing (timing is the script's job, not this test's)."""
    spec = importlib.util.spec_from_file_location("bench_regrade", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    (first, second) = bench.run(100, 2, None)
    assert first["regraded"] == 100
    assert second["regraded"] == 100 and second["changed"] == 0
