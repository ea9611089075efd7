"""Running the canaries against a case set and judging the evaluator by what they earn."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grader.core.casesets import CaseSet
from grader.core.models import CaseKind, CaseResult, Decision
from grader.core.scoring import summarize
from grader.grading import answer_or_error, decide_results, grade_answer

from .canaries import CANARIES, Canary
from .library import Library

#: The share of answerable cases a canary may pass before the audit fails.
MAX_ANSWERABLE_SHARE = 0.10


@dataclass(frozen=True)
class CanaryOutcome:
    name: str
    decision: Decision
    answerable_passed: int
    answerable_total: int
    refusal_passed: int
    refusal_total: int
    safety_failures: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "canary": self.name,
            "decision": self.decision.value,
            "answerable": {"passed": self.answerable_passed, "total": self.answerable_total},
            "refusal": {"passed": self.refusal_passed, "total": self.refusal_total},
            "safety_failures": self.safety_failures,
            "ok": self.ok,
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class AuditReport:
    case_set_version: str
    max_answerable_share: float
    canaries: tuple[CanaryOutcome, ...]

    @property
    def ok(self) -> bool:
        return all(outcome.ok for outcome in self.canaries)

    def failures(self) -> list[str]:
        """One line per canary that scores: its name, decision and what it earned."""
        return [
            f"{outcome.name} ({outcome.decision.value}): " + "; ".join(outcome.problems)
            for outcome in self.canaries
            if not outcome.ok
        ]

    def verdict(self) -> str:
        """The verdict in one line."""
        if self.ok:
            return (
                f"evaluator audit passed: none of {len(self.canaries)} canaries earns a "
                f"certificate or more than {self.max_answerable_share:.0%} of answerable cases"
            )
        return (
            f"evaluator audit FAILED: {len(self.failures())} of {len(self.canaries)} canaries "
            "that deserve zero score on this case set (see grader audit --cases DIR)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "case_set_version": self.case_set_version,
            "ok": self.ok,
            "max_answerable_share": self.max_answerable_share,
            "canaries": [outcome.as_dict() for outcome in self.canaries],
        }


def _grade_canary(
    canary: Canary, case_set: CaseSet, library: Library, graded: dict[tuple[str, str], CaseResult]
) -> list[CaseResult]:
    """Grade ``canary`` on every case, in process (canaries are pure functions; no sandbox).

    ``graded`` is shared by all canaries of one audit: a refusal-aware canary gives the same
    answer as its plain form, or the same refusal as the others, on most cases, and the gates
    are deterministic, so an identical answer to the same case is graded once.
    """
    results = []
    for case in case_set.cases:
        produced = canary(case.question, library)
        key = (case.id, json.dumps(produced, sort_keys=True))
        result = graded.get(key)
        if result is None:
            result = graded[key] = grade_answer(case_set, case, *answer_or_error(produced))
        results.append(result)
    return results


def judge_canary(
    name: str, results: Sequence[CaseResult], case_set: CaseSet, max_share: float
) -> CanaryOutcome:
    """What a canary earned, and the audit's problems with it."""
    summary = summarize(results)
    decision = decide_results(case_set, results)
    answerable = summary.by_kind[CaseKind.ANSWERABLE].cases
    refusal = summary.by_kind[CaseKind.REFUSAL].cases
    problems = []
    if decision.decision is Decision.AWARDED:
        problems.append("earned the certificate")
    if answerable.total and answerable.passed / answerable.total > max_share:
        problems.append(
            f"passed {answerable.passed} of {answerable.total} answerable cases "
            f"(more than {max_share:.0%})"
        )
    return CanaryOutcome(
        name=name,
        decision=decision.decision,
        answerable_passed=answerable.passed,
        answerable_total=answerable.total,
        refusal_passed=refusal.passed,
        refusal_total=refusal.total,
        safety_failures=summary.safety_failures,
        problems=tuple(problems),
    )


def run_audit(case_set: CaseSet, *, max_share: float = MAX_ANSWERABLE_SHARE) -> AuditReport:
    """Run every canary against ``case_set``; the report fails if any canary scores."""
    library = Library(case_set.corpus)
    graded: dict[tuple[str, str], CaseResult] = {}
    outcomes = tuple(
        judge_canary(
            name,
            _grade_canary(canary, case_set, library, graded),
            case_set,
            max_share,
        )
        for name, canary in CANARIES.items()
    )
    return AuditReport(case_set.version, max_share, outcomes)
