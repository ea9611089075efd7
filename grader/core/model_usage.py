"""Model-gateway usage of a run, summarised for both views (DESIGN §4a, §11; pure).

The summary holds only counts, token sums, cost and latency percentiles over the whole run, so
it says nothing about any one case: it is safe for the student view.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from .models import CaseResult, ModelCall


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
