"""Model-gateway usage of a run, summarised for both views (DESIGN §4a, §11; pure).

The summary holds only counts, token sums, cost and latency percentiles over the whole run, so
it names no case. Its numbers are still chosen by the agent, so the student view shows a
bounded, quantised copy (:func:`student_model_summary`) whose values the feedback accounting
counts (:func:`summary_bits`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .models import CaseResult, ModelCall, Policy


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile (``share`` in 0..1) of ``values``; 0.0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def run_calls(results: Iterable[CaseResult]) -> list[ModelCall]:
    return [call for result in results for call in result.model_calls]


def model_summary(results: Iterable[CaseResult]) -> dict[str, Any]:
    """``{"calls", "prompt_tokens", "completion_tokens", "usd", "latency_ms", …}`` of a run.

    ``calls`` counts every call the agent made (refused ones too, see ``refused``); latency
    percentiles are over the calls that reached the upstream or the cache.
    """
    calls = run_calls(results)
    served = [call for call in calls if call.error is None]
    latencies = [call.latency_ms for call in served]
    dates = sorted({call.prices_date for call in calls if call.prices_date})
    return {
        "calls": len(calls),
        "refused": len(calls) - len(served),
        "cached": sum(call.cached for call in calls),
        "prompt_tokens": sum(call.prompt_tokens for call in calls),
        "completion_tokens": sum(call.completion_tokens for call in calls),
        "usd": round(sum(call.usd for call in calls), 6),
        "prices_date": dates[-1] if dates else None,
        "latency_ms": {
            "p50": round(percentile(latencies, 0.50), 3),
            "p95": round(percentile(latencies, 0.95), 3),
            "p99": round(percentile(latencies, 0.99), 3),
        },
    }


def call_rows(result: CaseResult) -> list[dict[str, Any]]:
    """A case's calls as the instructor view's ``cases[].model_calls``."""
    return [call.model_dump(mode="json") for call in result.model_calls]


# --------------------------------------------------------------------------------------------
# What a student sees of it (README, "Model gateway" and "Feedback and disclosure")

#: Student-visible latency percentiles are rounded up to this many milliseconds.
STUDENT_LATENCY_STEP_MS = 100
#: Student-visible cost is rounded up to this many dollars (a tenth of a cent).
STUDENT_USD_STEP = 0.001


@dataclass(frozen=True)
class SummaryBounds:
    """The largest value each field of a student's model summary may show, from the policy.

    An agent chooses how many calls it makes, how long its prompts are and how long the
    upstream takes, so the summary is a channel it controls; clamped to these bounds and
    quantised, each field takes finitely many values (:func:`summary_values`).
    """

    #: ``calls_per_case`` × cases (also the bound on ``refused`` and ``cached``).
    calls: int
    #: ``min(tokens_per_run, tokens_per_case × cases)``, each of prompt and completion.
    tokens: int
    #: ``usd_per_run``.
    usd: float
    #: The per-call deadline: a call is answered within the question's time limit.
    latency_ms: float
    #: The price table's date (the latest among the policy's models): one value per set.
    prices_date: str
    #: Whether the policy names models; without, a student sees no model summary at all.
    models: bool = True

    @classmethod
    def of(cls, policy: Policy, cases: int) -> SummaryBounds:
        """The bounds for ``cases`` questions under ``policy``."""
        if not policy.models:
            return cls(calls=0, tokens=0, usd=0.0, latency_ms=0.0, prices_date="", models=False)
        limits = policy.model_limits
        return cls(
            calls=limits.calls_per_case * cases,
            tokens=min(limits.tokens_per_run, limits.tokens_per_case * cases),
            usd=limits.usd_per_run,
            latency_ms=policy.case_timeout_seconds * 1000,
            prices_date=max(alias.prices_date for alias in policy.models.values()),
        )


def _steps(value: float, step: float) -> int:
    """How many ``step``s ``value`` rounds up to."""
    return max(math.ceil(value / step - 1e-9), 0)


def student_model_summary(summary: dict[str, Any], bounds: SummaryBounds | None) -> dict[str, Any]:
    """The run summary as a student sees it: the same keys, counts and tokens capped at the
    policy's limits, cost rounded up to :data:`STUDENT_USD_STEP` and latencies to
    :data:`STUDENT_LATENCY_STEP_MS`, capped at the question's time limit (``bounds`` None: no
    caps, only the rounding). The price date is the price table's."""
    calls_cap = bounds.calls if bounds else None
    tokens_cap = bounds.tokens if bounds else None

    def cap(value: int, limit: int | None) -> int:
        return value if limit is None else min(value, limit)

    usd_steps = _steps(summary["usd"], STUDENT_USD_STEP)
    latency_steps: int | None = None
    if bounds is not None:
        usd_steps = min(usd_steps, _steps(bounds.usd, STUDENT_USD_STEP))
        latency_steps = _steps(bounds.latency_ms, STUDENT_LATENCY_STEP_MS)
    latency: dict[str, int] = {}
    for name, value in summary["latency_ms"].items():
        steps = _steps(value, STUDENT_LATENCY_STEP_MS)
        if latency_steps is not None:
            steps = min(steps, latency_steps)
        latency[name] = steps * STUDENT_LATENCY_STEP_MS
    return {
        "calls": cap(summary["calls"], calls_cap),
        "refused": cap(summary["refused"], calls_cap),
        "cached": cap(summary["cached"], calls_cap),
        "prompt_tokens": cap(summary["prompt_tokens"], tokens_cap),
        "completion_tokens": cap(summary["completion_tokens"], tokens_cap),
        "usd": round(usd_steps * STUDENT_USD_STEP, 3),
        "prices_date": bounds.prices_date if bounds else summary["prices_date"],
        "latency_ms": latency,
    }


def summary_values(bounds: SummaryBounds) -> dict[str, int]:
    """How many distinct values each field of a student's summary can take.

    ``latency_ms`` counts the non-decreasing triples (p50 ≤ p95 ≤ p99) of its
    ``ceil(deadline / step) + 1`` rounded values; ``prices_date`` is one value per set.
    """
    latency = _steps(bounds.latency_ms, STUDENT_LATENCY_STEP_MS) + 1
    return {
        "calls": bounds.calls + 1,
        "refused": bounds.calls + 1,
        "cached": bounds.calls + 1,
        "prompt_tokens": bounds.tokens + 1,
        "completion_tokens": bounds.tokens + 1,
        "usd": _steps(bounds.usd, STUDENT_USD_STEP) + 1,
        "latency_ms": math.comb(latency + 2, 3),
    }


def summary_bits(bounds: SummaryBounds | None) -> float:
    """log2 of the number of distinct student summaries (0 without models: none is shown)."""
    if bounds is None or not bounds.models:
        return 0.0
    return sum(math.log2(count) for count in summary_values(bounds).values())
