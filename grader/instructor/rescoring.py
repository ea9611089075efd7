"""Regrading from recorded answers: re-apply the gates of the current case set (pure).

Gates are deterministic (DESIGN §7), so after an instructor fixes a label or the policy, every
stored answer can be graded again without rerunning an agent. A recorded error kind (timeout,
crash, invalid output) stays what it was. Cases no longer in the set are dropped; cases new to
the set have no recorded answer and are left out of the new results (noted, so the instructor
can rerun the agents to grade them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grader.core.casesets import CaseSet
from grader.core.models import (
    Answer,
    CaseResult,
    Decision,
    ErrorKind,
    GradeReport,
    ModelCall,
    Versions,
)
from grader.grading import answer_or_error, build_report, grade_answer


@dataclass(frozen=True)
class RecordedCase:
    """What an eval record keeps of one case: the validated answer or the error kind."""

    case_id: str
    answer: Answer | None
    error: ErrorKind | None
    seconds: float | None
    #: The model calls the agent made on this case; they carry over to the new result set.
    model_calls: tuple[ModelCall, ...] = ()

    @classmethod
    def from_stored(
        cls,
        case_id: str,
        answer: Mapping[str, Any] | None,
        error_kind: str | None,
        seconds: float | None,
        model_calls: Sequence[Mapping[str, Any]] | None = None,
    ) -> RecordedCase:
        """From stored JSON; an answer that no longer validates counts as invalid output."""
        calls = tuple(ModelCall.model_validate(call) for call in model_calls or ())
        if error_kind:
            return cls(case_id, None, ErrorKind(error_kind), seconds, calls)
        # No answer and no error kind, like an answer that no longer validates, is invalid output.
        return cls(case_id, *answer_or_error(answer), seconds, calls)


@dataclass(frozen=True)
class Regraded:
    """The new report of one result set and what the case set change did to it."""

    report: GradeReport
    #: Case ids in the old results that are no longer in the case set.
    dropped: tuple[str, ...]
    #: Case ids of the case set with no recorded answer.
    missing: tuple[str, ...]

    @property
    def decision(self) -> Decision:
        return self.report.decision.decision


def regrade_recorded(
    recorded: Sequence[RecordedCase],
    case_set: CaseSet,
    *,
    versions: Versions,
    restarts: int = 0,
    model_gateway: bool = False,
) -> Regraded:
    """Grade recorded answers against ``case_set`` (in the set's case order).

    ``versions`` are the old result set's: the sandbox, its image and the package carry over;
    the case-set, policy, corpus and grader versions become the current ones.
    """
    by_id = {case.case_id: case for case in recorded}
    results: list[CaseResult] = []
    missing: list[str] = []
    for case in case_set.cases:
        previous = by_id.get(case.id)
        if previous is None:
            missing.append(case.id)
            continue
        result = grade_answer(
            case_set, case, previous.answer, previous.error, seconds=previous.seconds
        )
        if previous.model_calls:
            result = result.model_copy(update={"model_calls": previous.model_calls})
        results.append(result)
    in_set = {case.id for case in case_set.cases}
    dropped = tuple(case.case_id for case in recorded if case.case_id not in in_set)
    report = build_report(
        case_set,
        tuple(results),
        sandbox=versions.sandbox,
        sandbox_image=versions.sandbox_image,
        package_sha256=versions.package_sha256,
        restarts=restarts,
    )
    if model_gateway:  # the run had a model gateway: its summary stays in both views
        report = report.model_copy(update={"model_gateway": True})
    return Regraded(report=report, dropped=dropped, missing=tuple(missing))


def regrade_report(old: GradeReport, case_set: CaseSet) -> Regraded:
    """Grade the answers recorded in ``old`` against ``case_set``."""
    recorded = [
        RecordedCase(
            result.case_id, result.answer, result.error, result.seconds, result.model_calls
        )
        for result in old.results
    ]
    return regrade_recorded(
        recorded,
        case_set,
        versions=old.versions,
        restarts=old.restarts,
        model_gateway=old.model_gateway,
    )


def changed_cases(old: GradeReport, new: GradeReport) -> tuple[str, ...]:
    """Case ids whose pass/fail outcome differs between two result sets of one submission."""
    before = {result.case_id: result.passed for result in old.results}
    return tuple(
        result.case_id
        for result in new.results
        if result.case_id in before and before[result.case_id] != result.passed
    )
