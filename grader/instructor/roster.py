"""The roster: every student with their best and latest result, the proposal and the decision.

Pure: built from plain values :mod:`grader.db` loads, so the rules are tested without a database.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from grader.core.models import Decision
from grader.db.results import ResultSummary
from grader.db.tables import timestamp

from .decisions import (
    CertificateState,
    Current,
    DecisionAction,
    DecisionSource,
    is_overridden,
    needs_review,
    policy_current,
)

#: A better decision ranks higher when picking a student's best submission.
DECISION_RANK = {Decision.AWARDED: 2, Decision.NOT_AWARDED: 1, Decision.BLOCKED: 0}


class RosterFilter(StrEnum):
    ALL = "all"
    #: The proposal or the latest graded submission is blocked by a safety failure.
    BLOCKED = "blocked"
    #: The effective decision holds no certificate (not awarded, blocked or revoked).
    NOT_AWARDED = "not_awarded"
    AWARDED = "awarded"
    #: An instructor's decision differs from the policy on holding a certificate.
    OVERRIDDEN = "overridden"
    #: Needs review: newer results arrived after an instructor's decision, or the current
    #: case set's evaluator audit fails (every proposal is then suspect).
    REVIEW = "review"
    #: The best or latest result was graded on an older case-set version.
    OUTDATED = "outdated"


class ReviewFlag(StrEnum):
    """Why a roster line needs review."""

    #: Results newer than the instructor's decision (a new submission, or a regrade).
    NEWER_RESULTS = "newer_results"
    #: The current case set's evaluator audit fails (DESIGN §9): a canary agent that deserves
    #: zero scores on it, so the policy's proposal may reward such an agent.
    AUDIT_FAILED = "audit_failed"


def result_dict(result: ResultSummary, current_version: str | None = None) -> dict[str, Any]:
    """A current result set as the roster's JSON shows it."""
    return {
        "submission_id": result.submission_id,
        "grading_id": result.grading_id,
        "grading_version": result.grading_version,
        "agent_name": result.agent_name,
        "submitted_at": timestamp(result.submitted_at),
        "graded_at": timestamp(result.graded_at),
        "decision": result.decision.value,
        "reasons": list(result.reasons),
        "passed": result.passed,
        "total": result.total,
        "case_set_version": result.case_set_version,
        "outdated": result.outdated(current_version),
    }


@dataclass(frozen=True)
class LastDecision:
    """The newest instructor decision row of a student."""

    action: DecisionAction
    from_state: CertificateState
    to_state: CertificateState
    reason: str
    actor: str
    created_at: datetime
    basis_grading_id: int | None
    proposal: Decision | None
    certificate_id: str | None


def best_result(results: Iterable[ResultSummary]) -> ResultSummary | None:
    """The best result: best decision, then highest pass rate, then the newest submission."""
    return max(
        results,
        key=lambda r: (DECISION_RANK[r.decision], r.rate, r.submitted_at, r.submission_id),
        default=None,
    )


def latest_result(results: Iterable[ResultSummary]) -> ResultSummary | None:
    return max(results, key=lambda r: (r.submitted_at, r.submission_id), default=None)


@dataclass(frozen=True)
class RosterEntry:
    student_id: int
    student: str
    submissions: int
    best: ResultSummary | None
    latest: ResultSummary | None
    current: Current
    flags: tuple[ReviewFlag, ...]
    certificate_id: str | None
    current_version: str | None
    #: Bits of feedback disclosed to the student on the current case-set version (an upper
    #: bound, README "Feedback and disclosure").
    feedback_bits: float = 0.0

    @property
    def needs_review(self) -> bool:
        return bool(self.flags)

    @property
    def proposal(self) -> Decision | None:
        return self.best.decision if self.best else None

    @property
    def proposal_reasons(self) -> tuple[str, ...]:
        return self.best.reasons if self.best else ()

    @property
    def overridden(self) -> bool:
        return is_overridden(self.current, self.proposal)

    @property
    def outdated(self) -> bool:
        """Whether the best or latest result was graded on another case-set version."""
        if self.current_version is None:
            return False
        return any(
            result is not None and result.outdated(self.current_version)
            for result in (self.best, self.latest)
        )

    def matches(self, wanted: RosterFilter) -> bool:
        if wanted is RosterFilter.ALL:
            return True
        if wanted is RosterFilter.BLOCKED:
            return any(
                result is not None and result.decision is Decision.BLOCKED
                for result in (self.best, self.latest)
            )
        if wanted is RosterFilter.AWARDED:
            return self.current.state is CertificateState.AWARDED
        if wanted is RosterFilter.NOT_AWARDED:
            return self.current.state is not CertificateState.AWARDED
        if wanted is RosterFilter.OVERRIDDEN:
            return self.overridden
        if wanted is RosterFilter.REVIEW:
            return self.needs_review
        return self.outdated

    def as_dict(self) -> dict[str, Any]:
        current = self.current
        return {
            "student": self.student,
            "submissions": self.submissions,
            "best": result_dict(self.best, self.current_version) if self.best else None,
            "latest": result_dict(self.latest, self.current_version) if self.latest else None,
            "proposal": {
                "decision": self.proposal.value if self.proposal else None,
                "reasons": list(self.proposal_reasons),
            },
            "current": {
                "decision": current.state.value,
                "source": current.source.value,
                "action": current.action.value if current.action else None,
                "reason": current.reason,
                "decided_by": current.decided_by,
                "decided_at": timestamp(current.decided_at),
            },
            "certificate_id": self.certificate_id,
            "overridden": self.overridden,
            "needs_review": self.needs_review,
            "flags": [flag.value for flag in self.flags],
            "outdated": self.outdated,
            "feedback_bits": round(self.feedback_bits, 2),
        }


def build_entry(
    *,
    student_id: int,
    student: str,
    submissions: int,
    results: Sequence[ResultSummary],
    last: LastDecision | None,
    certificate_id: str | None,
    current_version: str | None,
    audit_failed: bool = False,
    feedback_bits: float = 0.0,
) -> RosterEntry:
    """One student's roster line from their current result sets and last decision.

    ``audit_failed``: the current case set's evaluator audit fails, so a proposal (if the
    student has one) is flagged for review.
    """
    best = best_result(results)
    if last is None:
        current = policy_current(best.decision if best else None, best.reasons if best else ())
        review = False
    else:
        current = Current(
            state=last.to_state,
            source=DecisionSource.INSTRUCTOR,
            reason=last.reason,
            action=last.action,
            decided_by=last.actor,
            decided_at=last.created_at,
        )
        review = needs_review(
            decided_at=last.created_at,
            basis_grading_id=last.basis_grading_id,
            best_grading_id=best.grading_id if best else None,
            newest_result_at=max((r.graded_at for r in results), default=None),
        )
    flags: tuple[ReviewFlag, ...] = (ReviewFlag.NEWER_RESULTS,) if review else ()
    if audit_failed and best is not None:
        flags += (ReviewFlag.AUDIT_FAILED,)
    return RosterEntry(
        student_id=student_id,
        student=student,
        submissions=submissions,
        best=best,
        latest=latest_result(results),
        current=current,
        flags=flags,
        certificate_id=certificate_id,
        current_version=current_version,
        feedback_bits=feedback_bits,
    )


def filter_roster(entries: Iterable[RosterEntry], wanted: RosterFilter) -> list[RosterEntry]:
    return [entry for entry in entries if entry.matches(wanted)]


def roster_counts(entries: Sequence[RosterEntry]) -> dict[RosterFilter, int]:
    """How many students each filter shows."""
    return {wanted: sum(entry.matches(wanted) for entry in entries) for wanted in RosterFilter}
