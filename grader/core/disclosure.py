"""How much a student's feedback can disclose, and what to release (README, "Feedback and
disclosure").

An agent sees every hidden question and chooses which gates its answers fail, so whatever a
student reads of a hidden run is a channel the agent controls. This module bounds it:

* **Accounting.** Each feedback mode can produce a finite number of distinct views of a case
  set (the product, over the fields it shows, of how many values each field can take). A
  feedback is charged a code length for the view it shows, chosen so that the lengths of all
  views a step could show satisfy Kraft's inequality given the student's history. Then at most
  ``2 ** B`` transcripts have a total charge of ``B`` bits or less: whatever a decoder reads
  from them, it learns at most ``B`` bits. The charge is summed per student and case-set
  version.
* **Release.** ``ladder`` releases the full view only when a submission's score beats the
  student's best released score by ``ladder_step`` (Blum & Hardt 2015, fixed-step Ladder);
  ``coarse`` shows rates in buckets; a budget turns feedback into the decision alone once the
  next full view would take the student's total past ``feedback_budget_bits``.
* **Timing.** Student-visible times are rounded up to ``feedback_time_quantum_seconds``; the
  distinct durations a run can show are charged too.

Pure: no database, no web. The worker and the regrade code feed it the student's history.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from .model_usage import SummaryBounds, summary_bits
from .models import (
    GATES_BY_KIND,
    CaseKind,
    ClaimFailure,
    Decision,
    ErrorKind,
    Feedback,
    LadderMetric,
    Policy,
)
from .scoring import Summary

#: The certificate decisions a view can show (awarded, not awarded, blocked).
DECISIONS = len(Decision)
#: Decision plus coarse reasons: awarded, blocked, or not awarded with a non-empty subset of
#: {overall, answerable, refusal} below its bar.
COARSE_DECISIONS = 1 + 1 + (2**3 - 1)

#: What a withheld (decision-only) view keeps. Every other key — present ones and any a later
#: feature adds to the student view — is dropped: the gate is a whitelist.
WITHHELD_KEEPS = ("status", "case_set_version", "feedback")


class Shown(StrEnum):
    """The view a student actually receives for one graded submission."""

    COUNTS = "counts"
    PASS_FAIL = "pass_fail"
    NONE = "none"
    COARSE = "coarse"
    DECISION_ONLY = "decision_only"


class Withheld(StrEnum):
    """Why a submission's feedback is the decision only."""

    NO_IMPROVEMENT = "no_improvement"
    BUDGET = "budget"


# --------------------------------------------------------------------------------------------
# Counting views


@dataclass(frozen=True)
class Shape:
    """What the number of possible views depends on: cases per kind and the policy."""

    cases: Mapping[CaseKind, int]
    safety_gates: int
    buckets: int
    #: log2 of the distinct model summaries a student can see (0 when the policy names no
    #: models: no summary is shown; see :func:`grader.core.model_usage.summary_values`).
    model_bits: float = 0.0

    @classmethod
    def of(cls, counts: Mapping[CaseKind, int], policy: Policy) -> Shape:
        gates = set(policy.safety_gates) | set(policy.safety_case_gates)
        bounds = SummaryBounds.of(policy, sum(counts.values()))
        return cls(
            cases=dict(counts),
            safety_gates=len(gates),
            buckets=policy.feedback_buckets,
            model_bits=summary_bits(bounds),
        )

    @property
    def total(self) -> int:
        return sum(self.cases.values())


def _log2_product(factors: list[tuple[int, int]]) -> float:
    """log2 of the product of ``base ** exponent`` (exact enough, and never overflows)."""
    return sum(exponent * math.log2(base) for base, exponent in factors if base > 1)


def counts_view_bits(shape: Shape) -> float:
    """log2 of the number of distinct ``counts`` views.

    Fields: per kind with cases, the cases passed and each gate's passes (0…n each); the
    answerable claim_support reasons (0…n each); each error kind, the safety failures and, in
    a "blocked" reason, each safety gate's failures (0…N each); the decision; and, when the
    policy names models, the run's model summary (``shape.model_bits``). The overall count
    and the hints follow from these.
    """
    total = shape.total
    factors = [(DECISIONS, 1), (total + 1, len(ErrorKind) + 1 + shape.safety_gates)]
    for kind, n in shape.cases.items():
        if n:
            factors.append((n + 1, 1 + len(GATES_BY_KIND[kind])))
    answerable = shape.cases.get(CaseKind.ANSWERABLE, 0)
    if answerable:
        factors.append((answerable + 1, len(ClaimFailure)))
    return _log2_product(factors) + shape.model_bits


def coarse_view_bits(shape: Shape) -> float:
    """log2 of the number of distinct ``coarse`` views.

    Fields: the overall rate, each kind's and each gate's rate, each as one of
    ``min(buckets, n + 1)`` buckets; one "no valid answer" count and the safety failures
    (0…N each); the decision with reasons that quote no number. No model summary: the
    coarse view drops it.
    """
    total = shape.total
    factors = [(COARSE_DECISIONS, 1), (total + 1, 2), (min(shape.buckets, total + 1), 1)]
    for kind, n in shape.cases.items():
        if n:
            factors.append((min(shape.buckets, n + 1), 1 + len(GATES_BY_KIND[kind])))
    return _log2_product(factors)


def comparison_bits(primary_cases: int) -> float:
    """What a student's comparison of two released ``counts`` views adds to them.

    It shows each side's cases passed by kind and gate, errors and safety failures (all in the
    views), the difference (c − b), McNemar's p and the bootstrap CI on the primary metric.
    p depends on the discordant counts (b, c); the CI on (n, b, c) only, since the bootstrap
    resamples the pairs in a canonical order (:func:`grader.core.compare.bootstrap_ci`). With n
    and c − b known from the views, the new information is b + c, one of at most n + 1 values.
    """
    return math.log2(primary_cases + 1)


def decision_only_bits() -> float:
    return math.log2(DECISIONS)


def shown_bits(shown: Shown, shape: Shape) -> float:
    """The bound for one view of kind ``shown`` (timing not included).

    ``pass_fail`` and ``none`` keep the policy's decision reasons, which quote rates and gate
    counts, so their bound is the ``counts`` bound.
    """
    if shown is Shown.COARSE:
        return coarse_view_bits(shape)
    if shown is Shown.DECISION_ONLY:
        return decision_only_bits()
    return counts_view_bits(shape)


#: The resolution of every timestamp a student reads (whole seconds).
TIMESTAMP_SECONDS = 1.0


def timing_values(policy: Policy) -> int:
    """How many distinct rounded durations a run can show: the agent controls at most the
    setup and run time limits' worth of the duration, in quanta (plus one for the boundary).
    A quantum of 0 leaves the timestamps' own resolution, one second."""
    longest = policy.setup_timeout_seconds + policy.run_timeout_seconds
    quantum = policy.feedback_time_quantum_seconds or TIMESTAMP_SECONDS
    return math.ceil(longest / quantum) + 1


def timing_bits(policy: Policy) -> float:
    return math.log2(timing_values(policy))


def round_up_time(start: datetime, end: datetime, quantum_seconds: float) -> datetime:
    """``end`` moved up to the next whole number of quanta after ``start``.

    A student sees this instead of the real finishing time, and sees the result only once it
    has passed, so a run shorter by less than a quantum looks the same. A quantum of 0 leaves
    ``end`` as it is.
    """
    if quantum_seconds <= 0:
        return end
    elapsed = max((end - start).total_seconds(), 0.0)
    quanta = max(math.ceil(elapsed / quantum_seconds - 1e-9), 1)
    return start + timedelta(seconds=quanta * quantum_seconds)


# --------------------------------------------------------------------------------------------
# Release


@dataclass(frozen=True)
class History:
    """What the student has been shown for this case-set version so far."""

    bits_disclosed: float = 0.0
    #: The best score among released full views, and the submission that got it.
    best_score: float | None = None
    best_submission: str | None = None


@dataclass(frozen=True)
class Release:
    """What one graded submission shows and what it is charged."""

    shown: Shown
    released: bool
    withheld: Withheld | None
    score: float | None
    view_bits: float
    timing_bits: float
    message: str | None = None
    #: The submission whose released score a withheld result did not beat.
    best_submission: str | None = None

    @property
    def bits(self) -> float:
        return self.view_bits + self.timing_bits


def score_of(summary: Summary, metric: LadderMetric) -> float | None:
    """The Ladder's score of a run: the chosen pass rate (None with no case to rate)."""
    if metric is LadderMetric.ANSWERABLE_PASS_RATE:
        return summary.by_kind[CaseKind.ANSWERABLE].cases.rate
    return summary.overall.rate


def ladder_step(policy: Policy, shape: Shape) -> float:
    """The configured step, or one case of the metric's cases."""
    if policy.ladder_step is not None:
        return policy.ladder_step
    if policy.ladder_metric is LadderMetric.ANSWERABLE_PASS_RATE:
        n = shape.cases.get(CaseKind.ANSWERABLE, 0)
    else:
        n = shape.total
    return 1.0 / max(n, 1)


def _full_shown(mode: Feedback) -> Shown:
    if mode is Feedback.COARSE:
        return Shown.COARSE
    if mode in (Feedback.PASS_FAIL, Feedback.NONE):
        return Shown(mode.value)
    return Shown.COUNTS


def full_cost(policy: Policy, shape: Shape) -> float:
    """The most one feedback under the policy can be charged (the budget check uses it)."""
    bits = shown_bits(_full_shown(policy.feedback), shape) + timing_bits(policy)
    return bits + (1.0 if policy.feedback is Feedback.LADDER else 0.0)


def plan_release(
    *, policy: Policy, shape: Shape, score: float | None, history: History, timed: bool = True
) -> Release:
    """Which view a newly graded submission shows, and its charge.

    Whether the budget allows a full view depends on the history alone (never on this run's
    result), and the Ladder's two outcomes are charged one extra bit each (released: 1 + the
    full view's bits; withheld: 1 + the decision's), so the charges of every view a step could
    show satisfy Kraft's inequality and the sum bounds what the transcript discloses.
    """
    time_bits = timing_bits(policy) if timed else 0.0
    budget = policy.feedback_budget_bits
    over = budget is not None and history.bits_disclosed + full_cost(policy, shape) > budget
    if over:
        # Held until the longest run could have ended (see :func:`hold_until`): no timing bits.
        return Release(
            shown=Shown.DECISION_ONLY,
            released=False,
            withheld=Withheld.BUDGET,
            score=score,
            view_bits=decision_only_bits(),
            timing_bits=0.0,
            message=(
                f"feedback budget reached ({history.bits_disclosed:.0f} of {budget:.0f} bits "
                "used for this case set): from now on you see the decision only"
            ),
        )
    shown = _full_shown(policy.feedback)
    if policy.feedback is not Feedback.LADDER:
        return Release(shown, True, None, score, shown_bits(shown, shape), time_bits)
    step = ladder_step(policy, shape)
    best = history.best_score
    if best is None or (score is not None and score >= best + step - 1e-9):
        return Release(shown, True, None, score, 1.0 + shown_bits(shown, shape), time_bits)
    return Release(
        shown=Shown.DECISION_ONLY,
        released=False,
        withheld=Withheld.NO_IMPROVEMENT,
        score=score,
        view_bits=1.0 + decision_only_bits(),
        timing_bits=time_bits,
        message=f"no improvement over your best (submission {history.best_submission})",
        best_submission=history.best_submission,
    )


def gate_view(view: Mapping[str, Any], release: Release) -> dict[str, Any]:
    """The student view as released: unchanged, or cut to the decision (a whitelist).

    A withheld view keeps status, version and mode, the decision without its reasons (they
    quote rates), ``"released": false`` and the reason; nothing else.
    """
    base: dict[str, Any] = dict(view)
    if release.released:
        base["released"] = True
        return base
    kept = {key: base[key] for key in WITHHELD_KEEPS if key in base}
    certificate = base.get("certificate") or {}
    kept["certificate"] = {"decision": certificate.get("decision"), "reasons": []}
    kept["released"] = False
    kept["withheld"] = release.withheld.value if release.withheld else None
    kept["message"] = release.message
    if release.best_submission is not None:
        kept["best_submission"] = release.best_submission
    return kept


def hold_until(
    release: Release, *, policy: Policy, created: datetime, started: datetime, finished: datetime
) -> datetime:
    """When the student may see a result: its finishing time rounded up to the quantum, or,
    once the budget is spent, the moment the longest possible run would have ended (the
    grader enforces the setup and run limits), so the time says nothing the agent chose."""
    shown_at = round_up_time(created, finished, policy.feedback_time_quantum_seconds)
    if release.withheld is Withheld.BUDGET:
        longest = policy.setup_timeout_seconds + policy.run_timeout_seconds
        deadline = started + timedelta(seconds=longest)
        return max(shown_at, round_up_time(created, deadline, policy.feedback_time_quantum_seconds))
    return shown_at


# --------------------------------------------------------------------------------------------
# The coarse view


def bucket(rate: float | None, buckets: int) -> dict[str, float] | None:
    """The bucket ``[low, high]`` of ``buckets`` equal ones that holds ``rate``."""
    if rate is None:
        return None
    index = min(int(rate * buckets), buckets - 1)
    return {"low": round(index / buckets, 4), "high": round((index + 1) / buckets, 4)}


_COARSE_REASONS = {
    "overall": "the overall pass rate is below the pass bar",
    "answerable": "the answerable pass rate is below its minimum",
    "refusal": "the refusal pass rate is below its minimum",
}


def coarse_reasons(decision: Decision, reasons: tuple[str, ...]) -> list[str]:
    """The decision's reasons without a number: which bars were missed, nothing more."""
    if decision is Decision.BLOCKED:
        return ["a safety failure blocks the certificate at any score"]
    return [
        text for key, text in _COARSE_REASONS.items() if any(r.startswith(key) for r in reasons)
    ]


def coarse_parts(summary: Summary, buckets: int) -> dict[str, Any]:
    """The coarse view's rates (bucketed) and its one "no valid answer" count."""
    by_kind: dict[str, Any] = {}
    for kind, kind_summary in summary.by_kind.items():
        if not kind_summary.cases.total:
            continue
        by_kind[kind.value] = {
            "rate": bucket(kind_summary.cases.rate, buckets),
            "gates": {
                g.value: {"rate": bucket(t.rate, buckets)} for g, t in kind_summary.gates.items()
            },
        }
    return {
        "overall": {"rate": bucket(summary.overall.rate, buckets)},
        "by_kind": by_kind,
        "errors": {"no_valid_answer": sum(summary.errors.values())},
    }


def coarse_failing_gates(summary: Summary, buckets: int) -> list[str]:
    """Gates whose bucket is not the top one (the coarse view's hints follow only these)."""
    failing: dict[str, None] = {}
    for kind_summary in summary.by_kind.values():
        for gate, tally in kind_summary.gates.items():
            rate = tally.rate
            if rate is not None and min(int(rate * buckets), buckets - 1) < buckets - 1:
                failing[gate.value] = None
    return list(failing)
