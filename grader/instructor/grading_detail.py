"""The instructor's submission detail: every case, plus per-gate and per-slice summaries (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from grader.core.models import Case, GradeReport
from grader.core.scoring import summarize
from grader.core.views import instructor_view

#: The slice a case falls in when the current case set no longer has it (or it has no slices).
UNKNOWN_SLICE = "(case not in the current set)"
NO_SLICE = "(no slice)"


@dataclass
class SliceTally:
    passed: int = 0
    total: int = 0
    safety_failures: int = 0
    errors: int = 0
    failed_gates: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "total": self.total,
            "safety_failures": self.safety_failures,
            "errors": self.errors,
            "failed_gates": dict(sorted(self.failed_gates.items())),
        }


def gate_summary(report: GradeReport) -> dict[str, dict[str, dict[str, int]]]:
    """Per case kind, per gate: passed and total."""
    summary = summarize(report.results)
    return {
        kind.value: {
            gate.value: {"passed": tally.passed, "total": tally.total}
            for gate, tally in kind_summary.gates.items()
        }
        for kind, kind_summary in summary.by_kind.items()
        if kind_summary.cases.total
    }


def slice_summary(report: GradeReport, cases: Mapping[str, Case]) -> dict[str, dict[str, Any]]:
    """Per slice (from the case set's labels): cases passed, safety failures, failed gates."""
    tallies: dict[str, SliceTally] = {}
    for result in report.results:
        case = cases.get(result.case_id)
        names = (case.slices or (NO_SLICE,)) if case is not None else (UNKNOWN_SLICE,)
        for name in names:
            tally = tallies.setdefault(name, SliceTally())
            tally.total += 1
            tally.passed += result.passed
            tally.safety_failures += result.safety_failure
            tally.errors += result.error is not None
            for gate, passed in result.gates.items():
                if not passed:
                    tally.failed_gates[gate.value] = tally.failed_gates.get(gate.value, 0) + 1
    return {name: tallies[name].as_dict() for name in sorted(tallies)}


def grading_detail(
    report: GradeReport, *, cases: Mapping[str, Case], current_version: str | None
) -> dict[str, Any]:
    """The instructor view (DESIGN §11) plus summaries and the case-set version check."""
    view = instructor_view(report, cases=cases)
    view["gate_summary"] = gate_summary(report)
    view["slice_summary"] = slice_summary(report, cases)
    view["current_case_set_version"] = current_version
    view["outdated"] = current_version is not None and report.versions.case_set != current_version
    for row in view["cases"]:
        row["in_current_set"] = row["case_id"] in cases
    if view.get("retrieval"):
        view["retrieval"] = retrieval_summary(view["retrieval"])
    return view


def retrieval_summary(means: Mapping[str, float]) -> dict[str, float | int]:
    """The stored retrieval means with ``cases`` (how many cases reported a ranking) as the
    count it is: stored beside the means as a float, it read "cases 17.00" on the page."""
    return {name: int(value) if name == "cases" else value for name, value in means.items()}
