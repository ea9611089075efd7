"""Running the canaries against a case set and judging the evaluator by what they earn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from grader.core.casesets import CaseSet
from grader.core.models import Answer, CaseKind, Decision, ErrorKind
from grader.core.scoring import decide, grade_case, summarize

from .canaries import CANARIES, Canary

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

    def as_dict(self) -> dict[str, Any]:
        return {
            "case_set_version": self.case_set_version,
            "ok": self.ok,
            "max_answerable_share": self.max_answerable_share,
            "canaries": [outcome.as_dict() for outcome in self.canaries],
        }


def run_canary(name: str, canary: Canary, case_set: CaseSet, max_share: float) -> CanaryOutcome:
    results = []
    for case in case_set.cases:
        try:
            answer: Answer | None = Answer.from_json_value(canary(case.question, case_set.corpus))
            error = None
        except (ValidationError, ValueError):
            answer, error = None, ErrorKind.INVALID_OUTPUT
        results.append(
            grade_case(case, answer, error, policy=case_set.policy, documents=case_set.corpus)
        )
    summary = summarize(results)
    decision = decide(results, case_set.policy)
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
    outcomes = tuple(
        run_canary(name, canary, case_set, max_share) for name, canary in CANARIES.items()
    )
    return AuditReport(case_set.version, max_share, outcomes)
