"""Certificate decisions: the instructor's actions, the states they lead to, and review flags.

The grader *proposes* (the policy's decision on the student's best graded submission, DESIGN
§6); an instructor *decides*. Pure functions, no I/O.

States (the effective decision on a student's certificate):

* ``awarded`` — the certificate is (or, proposed by the policy and not yet confirmed, would be)
  held. Only an instructor's ``confirm`` or ``award`` issues a certificate with an id.
* ``not_awarded`` — no certificate.
* ``blocked`` — no certificate because of a safety failure (only ever the policy's proposal,
  kept when an instructor confirms it).
* ``revoked`` — a certificate was awarded and an instructor withdrew it.

Actions (each needs a reason and is an append-only audit row):

* ``confirm`` — adopt the policy's current proposal (awarded, not_awarded or blocked).
* ``award`` — override: awarded, whatever the proposal.
* ``withhold`` — override: not_awarded, whatever the proposal.
* ``revoke`` — awarded → revoked; refused unless the current state is awarded.

The API also takes the state names ``awarded``, ``not_awarded`` and ``revoked`` for ``award``,
``withhold`` and ``revoke``.

``confirm``, ``award`` and ``withhold`` need a graded submission to base the decision on. An
instructor's decision stays in force until the next instructor action: a newer graded result
(a new submission, or a regrade moving a submission to a new result set) only flags it for
review.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from grader.core.models import Decision
from grader.exceptions import DecisionError, InvalidTransition


class CertificateState(StrEnum):
    AWARDED = "awarded"
    NOT_AWARDED = "not_awarded"
    BLOCKED = "blocked"
    REVOKED = "revoked"


class DecisionAction(StrEnum):
    CONFIRM = "confirm"
    AWARD = "award"
    WITHHOLD = "withhold"
    REVOKE = "revoke"


class DecisionSource(StrEnum):
    POLICY = "policy"
    INSTRUCTOR = "instructor"


#: Longest reason accepted (characters), the same as the table's.
MAX_REASON_LENGTH = 2000
NO_SUBMISSION_REASON = "no graded submission"


def proposal_state(proposal: Decision | None) -> CertificateState:
    """The state the policy proposes (none without a graded submission: not awarded)."""
    if proposal is None:
        return CertificateState.NOT_AWARDED
    return CertificateState(proposal.value)


@dataclass(frozen=True)
class Current:
    """A student's effective decision: the last instructor action, else the policy's proposal."""

    state: CertificateState
    source: DecisionSource
    reason: str
    #: The instructor action behind ``state`` (None when the policy's proposal stands).
    action: DecisionAction | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None


def policy_current(proposal: Decision | None, reasons: tuple[str, ...]) -> Current:
    """The effective decision when no instructor has acted."""
    if proposal is None:
        return Current(CertificateState.NOT_AWARDED, DecisionSource.POLICY, NO_SUBMISSION_REASON)
    return Current(proposal_state(proposal), DecisionSource.POLICY, "; ".join(reasons))


def clean_reason(reason: object) -> str:
    """The reason as stored: required, whitespace-trimmed, at most :data:`MAX_REASON_LENGTH`."""
    if not isinstance(reason, str) or not reason.strip():
        raise DecisionError("a reason is required")
    reason = reason.strip()
    if len(reason) > MAX_REASON_LENGTH:
        raise DecisionError(f"the reason is longer than {MAX_REASON_LENGTH} characters")
    return reason


#: State names accepted in place of the action that leads to them (scripts may send either).
ACTION_ALIASES = {
    CertificateState.AWARDED.value: DecisionAction.AWARD,
    CertificateState.NOT_AWARDED.value: DecisionAction.WITHHOLD,
    CertificateState.REVOKED.value: DecisionAction.REVOKE,
}


def parse_action(value: object) -> DecisionAction:
    """An action (or the state it leads to) from request input; errors list the vocabulary."""
    text = str(value)
    if text in ACTION_ALIASES:
        return ACTION_ALIASES[text]
    try:
        return DecisionAction(text)
    except ValueError:
        allowed = ", ".join(action.value for action in DecisionAction)
        raise DecisionError(f"decision must be one of: {allowed}") from None


def next_state(
    action: DecisionAction,
    *,
    current: CertificateState,
    proposal: Decision | None,
) -> CertificateState:
    """The state ``action`` leads to from ``current``, or :class:`DecisionError`."""
    if action is DecisionAction.REVOKE:
        if current is not CertificateState.AWARDED:
            raise InvalidTransition(
                f"only an awarded certificate can be revoked (it is {current.value})"
            )
        return CertificateState.REVOKED
    if proposal is None:
        raise InvalidTransition("the student has no graded submission to decide on")
    if action is DecisionAction.CONFIRM:
        return proposal_state(proposal)
    if action is DecisionAction.AWARD:
        return CertificateState.AWARDED
    return CertificateState.NOT_AWARDED


def is_overridden(current: Current, proposal: Decision | None) -> bool:
    """Whether an instructor's decision differs from the policy on holding a certificate."""
    if current.source is not DecisionSource.INSTRUCTOR:
        return False
    holds = current.state is CertificateState.AWARDED
    return holds != (proposal is Decision.AWARDED)


def needs_review(
    *,
    decided_at: datetime | None,
    basis_grading_id: int | None,
    best_grading_id: int | None,
    newest_result_at: datetime | None,
) -> bool:
    """Whether results newer than an instructor's decision call for another look.

    True when the student's best result set is no longer the one decided on, or any of their
    current result sets was recorded after the decision.
    """
    if decided_at is None:
        return False
    if best_grading_id is not None and best_grading_id != basis_grading_id:
        return True
    return newest_result_at is not None and newest_result_at > decided_at
