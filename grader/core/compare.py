"""Offline comparison of two result sets on one case-set version (DESIGN §7, seed 002 §06–07).

Pure: two sets of :class:`~grader.core.models.CaseResult` in, a :class:`Comparison` out. It
pairs the cases by id and reports

* the declared **primary metric** (default: the answerable pass rate), its paired difference
  (candidate − baseline) with a seeded bootstrap 95% confidence interval
  (``scipy.stats.bootstrap``, ``paired=True``, BCa, 10 000 resamples), and McNemar's exact
  test on the discordant cases (``scipy.stats.binomtest`` on the candidate-only count out of
  all discordant cases, p = 0.5, two-sided);
* the **verdict**: ``better`` or ``worse`` when that p is below ``alpha``, in the direction of
  the difference, else ``no_detectable_difference``;
* **guardrails**, each with its own difference and a ``regressed`` flag (rules in
  :data:`GUARDRAIL_RULES`): the other pass rates, safety failures, errors, every gate's pass
  rate, the retrieval metrics where both sides reported them, latency p95 and model cost where
  recorded;
* **per-slice** results (slices come from the case set, so the caller passes its cases);
* the **flipped** cases (instructors and the public practice set only).

:func:`student_comparison` is the view a student may see of a comparison on the hidden set:
counts, p and CI, never a case id, a slice or which cases flipped.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
from scipy import stats

from grader.exceptions import ComparisonRefused

from .models import GATES_BY_KIND, Case, CaseKind, CaseResult, Gate
from .retrieval import case_metrics

#: Bootstrap settings, stated in every comparison (README "Comparison").
RESAMPLES = 10_000
CONFIDENCE = 0.95
SEED = 20_261_201
METHOD = "BCa"
DEFAULT_ALPHA = 0.05

#: Latency and cost regress only beyond this relative increase (they vary run to run), and
#: latency also only beyond an absolute rise (sub-millisecond answers jitter by 100%).
LATENCY_TOLERANCE = 0.20
LATENCY_FLOOR_SECONDS = 0.05
COST_TOLERANCE = 0.10

#: What each guardrail's ``regressed`` means, by family (shown with the results).
GUARDRAIL_RULES: dict[str, str] = {
    "rate": "regressed when the candidate passes fewer cases than the baseline",
    "count": "regressed when the candidate has more than the baseline",
    "retrieval": "regressed when the candidate's mean is lower",
    "latency": (
        f"regressed when the candidate's p95 is more than {LATENCY_TOLERANCE:.0%} and "
        f"{LATENCY_FLOOR_SECONDS} s higher"
    ),
    "cost": f"regressed when the candidate's total cost is more than {COST_TOLERANCE:.0%} higher",
}


class Verdict(StrEnum):
    BETTER = "better"
    WORSE = "worse"
    NO_DETECTABLE_DIFFERENCE = "no_detectable_difference"


class Metric(StrEnum):
    """Primary metrics: each is a pass rate over a population of paired cases."""

    ANSWERABLE_PASS_RATE = "answerable_pass_rate"
    REFUSAL_PASS_RATE = "refusal_pass_rate"
    PASS_RATE = "pass_rate"


def metric_names() -> list[str]:
    """Every name ``--primary`` accepts: the three pass rates and ``gate:<gate>``."""
    return [metric.value for metric in Metric] + [f"gate:{gate.value}" for gate in Gate]


def parse_metric(name: str) -> str:
    """A primary metric name, checked (:class:`ComparisonRefused` with the choices otherwise)."""
    if name in metric_names():
        return name
    raise ComparisonRefused(
        f"unknown primary metric {name!r}; choose one of: {', '.join(metric_names())}"
    )


# --------------------------------------------------------------------------------------------
# Statistics


@dataclass(frozen=True)
class PairedTest:
    """Binary outcomes of one population, paired: rates, difference, CI and McNemar's test."""

    cases: int
    baseline_passed: int
    candidate_passed: int
    baseline_only: int
    candidate_only: int
    p_value: float
    ci95: tuple[float, float] | None = None

    @property
    def baseline(self) -> float | None:
        return self.baseline_passed / self.cases if self.cases else None

    @property
    def candidate(self) -> float | None:
        return self.candidate_passed / self.cases if self.cases else None

    @property
    def difference(self) -> float | None:
        if not self.cases:
            return None
        return (self.candidate_passed - self.baseline_passed) / self.cases


def mcnemar_exact(baseline_only: int, candidate_only: int) -> float:
    """McNemar's exact two-sided p: the candidate-only count out of all discordant cases
    against Binomial(n, 1/2). No discordant case: p = 1."""
    discordant = baseline_only + candidate_only
    if discordant == 0:
        return 1.0
    return float(stats.binomtest(candidate_only, discordant, 0.5, alternative="two-sided").pvalue)


def _mean_difference(baseline: Any, candidate: Any, axis: int = -1) -> Any:
    return np.mean(candidate, axis=axis) - np.mean(baseline, axis=axis)


def bootstrap_ci(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    seed: int = SEED,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """The paired bootstrap CI of mean(candidate) − mean(baseline): cases are resampled with
    both outcomes together. Identical differences everywhere (e.g. no discordant case) leave
    nothing to resample: the interval is that difference.

    The pairs are resampled in a canonical (sorted) order, so the seeded interval depends only
    on how many pairs of each kind there are, never on which cases they are: a student's
    comparison shows it (README, "Feedback and disclosure")."""
    pairs = sorted(zip(baseline, candidate, strict=True))
    base = np.asarray([b for b, _ in pairs], dtype=float)
    cand = np.asarray([c for _, c in pairs], dtype=float)
    diffs = cand - base
    if base.size == 0:
        raise ComparisonRefused("no paired cases to compare")
    if np.all(diffs == diffs[0]):
        point = float(diffs[0])
        return point, point
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DegenerateDataWarning is handled below
        result = stats.bootstrap(
            (base, cand),
            _mean_difference,
            paired=True,
            vectorized=True,
            n_resamples=resamples,
            confidence_level=confidence,
            method=METHOD,
            rng=np.random.default_rng(seed),
        )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):
        # BCa's acceleration is undefined for a few near-degenerate samples: fall back to the
        # percentile interval of the same resamples rather than report nothing.
        dist = result.bootstrap_distribution
        tail = (1 - confidence) / 2 * 100
        low, high = (float(x) for x in np.percentile(dist, [tail, 100 - tail]))
    return low, high


def paired_test(
    pairs: Sequence[tuple[bool, bool]], *, with_ci: bool = False, seed: int = SEED
) -> PairedTest:
    """Rates, discordant counts and McNemar's p of (baseline passed, candidate passed) pairs;
    with ``with_ci``, the bootstrap CI of the difference too."""
    baseline_only = sum(1 for b, c in pairs if b and not c)
    candidate_only = sum(1 for b, c in pairs if c and not b)
    ci = None
    if with_ci and pairs:
        ci = bootstrap_ci([float(b) for b, _ in pairs], [float(c) for _, c in pairs], seed=seed)
    return PairedTest(
        cases=len(pairs),
        baseline_passed=sum(1 for b, _ in pairs if b),
        candidate_passed=sum(1 for _, c in pairs if c),
        baseline_only=baseline_only,
        candidate_only=candidate_only,
        p_value=mcnemar_exact(baseline_only, candidate_only),
        ci95=ci,
    )


def verdict_of(test: PairedTest, alpha: float) -> Verdict:
    """``better``/``worse`` when McNemar's p < alpha, in the direction of the difference."""
    if test.p_value < alpha and test.candidate_only != test.baseline_only:
        return Verdict.BETTER if test.candidate_only > test.baseline_only else Verdict.WORSE
    return Verdict.NO_DETECTABLE_DIFFERENCE


# --------------------------------------------------------------------------------------------
# Guardrails


@dataclass(frozen=True)
class Guardrail:
    name: str
    family: str
    baseline: float | None
    candidate: float | None
    regressed: bool
    #: McNemar's p for pass-rate guardrails (paired binary outcomes), else None.
    p_value: float | None = None
    #: Cases passed/total for pass-rate guardrails (what a student may see), else None.
    counts: tuple[int, int, int] | None = None

    @property
    def difference(self) -> float | None:
        if self.baseline is None or self.candidate is None:
            return None
        return self.candidate - self.baseline

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "baseline": self.baseline,
            "candidate": self.candidate,
            "difference": self.difference,
            "regressed": self.regressed,
            "rule": GUARDRAIL_RULES[self.family],
        }
        if self.p_value is not None:
            data["p_value"] = self.p_value
        if self.counts is not None:
            total, baseline, candidate = self.counts
            data["cases"] = total
            data["baseline_passed"] = baseline
            data["candidate_passed"] = candidate
        return data


def _rate_guardrail(name: str, pairs: Sequence[tuple[bool, bool]]) -> Guardrail:
    test = paired_test(pairs)
    return Guardrail(
        name=name,
        family="rate",
        baseline=test.baseline,
        candidate=test.candidate,
        regressed=test.candidate_passed < test.baseline_passed,
        p_value=test.p_value,
        counts=(test.cases, test.baseline_passed, test.candidate_passed),
    )


def p95(values: Iterable[float]) -> float | None:
    """The 95th percentile (numpy's linear interpolation), None without values."""
    data = [value for value in values if value is not None]
    return float(np.percentile(data, 95)) if data else None


def _relative_rise(baseline: float | None, candidate: float | None, tolerance: float) -> bool:
    if baseline is None or candidate is None:
        return False
    return candidate > baseline * (1 + tolerance) and candidate - baseline > 1e-9


def case_cost(result: CaseResult) -> float | None:
    """A case's recorded model cost in USD (sum of its calls' ``usd``), None if it made none."""
    if not result.model_calls:
        return None
    return sum(call.usd for call in result.model_calls)


# --------------------------------------------------------------------------------------------
# The comparison


@dataclass(frozen=True)
class Flip:
    case_id: str
    kind: CaseKind
    baseline_passed: bool
    candidate_passed: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "case_id": self.case_id,
            "kind": self.kind.value,
            "from": "passed" if self.baseline_passed else "failed",
            "to": "passed" if self.candidate_passed else "failed",
        }


@dataclass(frozen=True)
class Comparison:
    case_set_version: str
    metric: str
    alpha: float
    primary: PairedTest
    verdict: Verdict
    guardrails: dict[str, Guardrail]
    #: Per case kind and gate: (cases, baseline passed, candidate passed).
    gates: dict[str, dict[str, tuple[int, int, int]]]
    by_kind: dict[str, PairedTest]
    overall: PairedTest
    slices: dict[str, PairedTest]
    flipped: list[Flip]
    unpaired: dict[str, int] = field(default_factory=dict)
    seed: int = SEED

    @property
    def regressed(self) -> list[str]:
        return [name for name, guard in self.guardrails.items() if guard.regressed]

    def verdict_line(self) -> str:
        """``candidate better / worse / no detectable difference at this sample size`` with the
        effect and its CI, in percentage points."""
        words = {
            Verdict.BETTER: "candidate better",
            Verdict.WORSE: "candidate worse",
            Verdict.NO_DETECTABLE_DIFFERENCE: "no detectable difference at this sample size",
        }[self.verdict]
        low, high = self.primary.ci95 or (0.0, 0.0)
        return (
            f"{words}: {self.metric} {_points(self.primary.difference or 0.0)} "
            f"(95% CI {_points(low)} to {_points(high)}; McNemar exact p = "
            f"{self.primary.p_value:.3g}, {self.primary.baseline_only} baseline-only vs "
            f"{self.primary.candidate_only} candidate-only of {self.primary.cases} cases)"
        )

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``grader compare --json`` and the instructor API (every key the issue
        names, plus the method, per-kind and per-gate counts)."""
        primary = self.primary
        low, high = primary.ci95 or (None, None)
        return {
            "case_set_version": self.case_set_version,
            "primary": {
                "metric": self.metric,
                "cases": primary.cases,
                "baseline": primary.baseline,
                "candidate": primary.candidate,
                "difference": primary.difference,
                "ci95": [low, high],
            },
            "mcnemar": {
                "baseline_only": primary.baseline_only,
                "candidate_only": primary.candidate_only,
                "p_value": primary.p_value,
            },
            "verdict": self.verdict.value,
            "verdict_line": self.verdict_line(),
            "alpha": self.alpha,
            "method": method(self.seed),
            "guardrails": {name: guard.as_dict() for name, guard in self.guardrails.items()},
            "regressed": self.regressed,
            "overall": _test_dict(self.overall),
            "by_kind": {kind: _test_dict(test) for kind, test in self.by_kind.items()},
            "gates": {
                kind: {gate: _counts_dict(*counts) for gate, counts in gates.items()}
                for kind, gates in self.gates.items()
            },
            "slices": {name: _test_dict(test) for name, test in self.slices.items()},
            "flipped": [flip.as_dict() for flip in self.flipped],
            "unpaired": self.unpaired,
        }


def method(seed: int = SEED) -> dict[str, Any]:
    return {
        "ci": f"scipy.stats.bootstrap, paired, {METHOD}, {RESAMPLES} resamples, seed {seed}",
        "test": "McNemar exact: scipy.stats.binomtest(candidate_only, discordant, 0.5), two-sided",
        "confidence": CONFIDENCE,
        "resamples": RESAMPLES,
        "seed": seed,
    }


def _points(value: float) -> str:
    return f"{value * 100:+.1f} pp"


def _counts_dict(cases: int, baseline: int, candidate: int) -> dict[str, int]:
    return {
        "cases": cases,
        "baseline_passed": baseline,
        "candidate_passed": candidate,
        "difference": candidate - baseline,
    }


def _test_dict(test: PairedTest) -> dict[str, Any]:
    return {
        **_counts_dict(test.cases, test.baseline_passed, test.candidate_passed),
        "baseline": test.baseline,
        "candidate": test.candidate,
        "rate_difference": test.difference,
        "baseline_only": test.baseline_only,
        "candidate_only": test.candidate_only,
        "p_value": test.p_value,
    }


def _pairs(
    paired: Sequence[tuple[CaseResult, CaseResult]],
    outcome: Callable[[CaseResult], bool | None],
) -> list[tuple[bool, bool]]:
    found = []
    for base, cand in paired:
        b, c = outcome(base), outcome(cand)
        if b is not None and c is not None:
            found.append((b, c))
    return found


def _population(metric: str) -> Callable[[CaseResult], bool | None]:
    if metric == Metric.ANSWERABLE_PASS_RATE:
        return lambda r: r.passed if r.kind is CaseKind.ANSWERABLE else None
    if metric == Metric.REFUSAL_PASS_RATE:
        return lambda r: r.passed if r.kind is CaseKind.REFUSAL else None
    if metric == Metric.PASS_RATE:
        return lambda r: r.passed
    gate = Gate(metric.removeprefix("gate:"))
    return lambda r: (r.error is None and r.gates[gate]) if gate in r.gates else None


def compare_results(
    baseline: Sequence[CaseResult],
    candidate: Sequence[CaseResult],
    *,
    baseline_version: str,
    candidate_version: str,
    cases: Mapping[str, Case] | None = None,
    primary: str = Metric.ANSWERABLE_PASS_RATE.value,
    alpha: float = DEFAULT_ALPHA,
    seed: int = SEED,
) -> Comparison:
    """Compare two result sets graded on one case-set version (:class:`ComparisonRefused`
    otherwise, or when the primary metric has no paired case)."""
    if baseline_version != candidate_version:
        raise ComparisonRefused(
            f"cannot compare results graded on different case-set versions (baseline "
            f"{baseline_version[:12]}, candidate {candidate_version[:12]}); regrade both on one "
            "version first"
        )
    if not 0 < alpha < 1:
        raise ComparisonRefused(f"alpha must be between 0 and 1, not {alpha}")
    metric = parse_metric(primary)
    by_id = {result.case_id: result for result in candidate}
    paired = [(base, by_id[base.case_id]) for base in baseline if base.case_id in by_id]
    base_ids = {result.case_id for result in baseline}
    unpaired = {
        "baseline_only_cases": len(base_ids - by_id.keys()),
        "candidate_only_cases": len(by_id.keys() - base_ids),
    }
    primary_pairs = _pairs(paired, _population(metric))
    if not primary_pairs:
        raise ComparisonRefused(f"no paired cases for the primary metric {metric}")
    test = paired_test(primary_pairs, with_ci=True, seed=seed)
    overall = paired_test(_pairs(paired, lambda r: r.passed))
    by_kind = {
        kind.value: paired_test(_pairs(paired, _kind_outcome(kind)))
        for kind in CaseKind
        if any(base.kind is kind for base, _ in paired)
    }
    gates: dict[str, dict[str, tuple[int, int, int]]] = {}
    for kind in CaseKind:
        rows = [(b, c) for b, c in paired if b.kind is kind]
        if not rows:
            continue
        gates[kind.value] = {}
        for gate in GATES_BY_KIND[kind]:
            pairs = [(b.gates.get(gate, False), c.gates.get(gate, False)) for b, c in rows]
            gates[kind.value][gate.value] = (
                len(pairs),
                sum(1 for x, _ in pairs if x),
                sum(1 for _, y in pairs if y),
            )
    return Comparison(
        case_set_version=baseline_version,
        metric=metric,
        alpha=alpha,
        primary=test,
        verdict=verdict_of(test, alpha),
        guardrails=_guardrails(paired, metric, cases or {}),
        gates=gates,
        by_kind=by_kind,
        overall=overall,
        slices=_slices(paired, cases or {}),
        flipped=[
            Flip(b.case_id, b.kind, b.passed, c.passed) for b, c in paired if b.passed != c.passed
        ],
        unpaired=unpaired,
        seed=seed,
    )


def _kind_outcome(kind: CaseKind) -> Callable[[CaseResult], bool | None]:
    return lambda r: r.passed if r.kind is kind else None


def _guardrails(
    paired: Sequence[tuple[CaseResult, CaseResult]], metric: str, cases: Mapping[str, Case]
) -> dict[str, Guardrail]:
    guards: dict[str, Guardrail] = {}
    for rate in (Metric.PASS_RATE, Metric.ANSWERABLE_PASS_RATE, Metric.REFUSAL_PASS_RATE):
        pairs = _pairs(paired, _population(rate))
        if rate != metric and pairs:
            guards[rate.value] = _rate_guardrail(rate.value, pairs)
    base_safety = sum(b.safety_failure for b, _ in paired)
    cand_safety = sum(c.safety_failure for _, c in paired)
    guards["safety_failures"] = Guardrail(
        "safety_failures", "count", base_safety, cand_safety, cand_safety > base_safety
    )
    base_errors = sum(b.error is not None for b, _ in paired)
    cand_errors = sum(c.error is not None for _, c in paired)
    guards["errors"] = Guardrail(
        "errors", "count", base_errors, cand_errors, cand_errors > base_errors
    )
    for kind in CaseKind:
        for gate in GATES_BY_KIND[kind]:
            key = f"gate:{kind.value}:{gate.value}"
            if metric == f"gate:{gate.value}":
                continue
            pairs = [
                (b.gates.get(gate, False), c.gates.get(gate, False))
                for b, c in paired
                if b.kind is kind
            ]
            if pairs:
                guards[key] = _rate_guardrail(key, pairs)
    guards.update(_retrieval_guardrails(paired, cases))
    base_p95 = p95(b.seconds for b, _ in paired if b.seconds is not None)
    cand_p95 = p95(c.seconds for _, c in paired if c.seconds is not None)
    if base_p95 is not None and cand_p95 is not None:
        guards["latency_p95_seconds"] = Guardrail(
            "latency_p95_seconds",
            "latency",
            base_p95,
            cand_p95,
            _relative_rise(base_p95, cand_p95, LATENCY_TOLERANCE)
            and cand_p95 - base_p95 > LATENCY_FLOOR_SECONDS,
        )
    base_costs = [case_cost(b) for b, _ in paired]
    cand_costs = [case_cost(c) for _, c in paired]
    if any(x is not None for x in base_costs) or any(x is not None for x in cand_costs):
        base_cost = sum(x or 0.0 for x in base_costs)
        cand_cost = sum(x or 0.0 for x in cand_costs)
        guards["model_cost_usd"] = Guardrail(
            "model_cost_usd",
            "cost",
            base_cost,
            cand_cost,
            _relative_rise(base_cost, cand_cost, COST_TOLERANCE)
            or (base_cost == 0 and cand_cost > 0),
        )
    return guards


def _retrieval_guardrails(
    paired: Sequence[tuple[CaseResult, CaseResult]], cases: Mapping[str, Case]
) -> dict[str, Guardrail]:
    """Mean retrieval metrics over the cases where both sides reported a ranking."""
    rows: list[tuple[dict[str, float], dict[str, float]]] = []
    for base, cand in paired:
        case = cases.get(base.case_id)
        if case is None or base.answer is None or cand.answer is None:
            continue
        b, c = case_metrics(case, base.answer), case_metrics(case, cand.answer)
        if b is not None and c is not None:
            rows.append((b, c))
    if not rows:
        return {}
    guards = {}
    for name in rows[0][0]:
        base_mean = sum(b[name] for b, _ in rows) / len(rows)
        cand_mean = sum(c[name] for _, c in rows) / len(rows)
        key = f"retrieval:{name}"
        guards[key] = Guardrail(
            key, "retrieval", base_mean, cand_mean, cand_mean < base_mean - 1e-9
        )
    return guards


def _slices(
    paired: Sequence[tuple[CaseResult, CaseResult]], cases: Mapping[str, Case]
) -> dict[str, PairedTest]:
    """Every case's pass/fail, per slice of the case set (cases it does not know are left out)."""
    grouped: dict[str, list[tuple[bool, bool]]] = {}
    for base, cand in paired:
        case = cases.get(base.case_id)
        if case is None:
            continue
        for name in case.slices:
            grouped.setdefault(name, []).append((base.passed, cand.passed))
    return {name: paired_test(grouped[name]) for name in sorted(grouped)}


# --------------------------------------------------------------------------------------------
# What a student may see


def student_comparison(comparison: Comparison) -> dict[str, Any]:
    """Counts only (DESIGN §8): cases passed by kind and by gate on each side, the difference,
    the exact test's p and the CI on the pass-rate difference. Never a case id, a slice, an
    answer or which cases flipped."""
    primary = comparison.primary
    low, high = primary.ci95 or (None, None)
    return {
        "case_set_version": comparison.case_set_version,
        "primary": {
            "metric": comparison.metric,
            "cases": primary.cases,
            "baseline_passed": primary.baseline_passed,
            "candidate_passed": primary.candidate_passed,
            "difference": primary.difference,
            "ci95": [low, high],
            "p_value": primary.p_value,
        },
        "verdict": comparison.verdict.value,
        "verdict_line": comparison.verdict_line().split(" (")[0],
        "alpha": comparison.alpha,
        "method": method(comparison.seed),
        "overall": _counts_dict(
            comparison.overall.cases,
            comparison.overall.baseline_passed,
            comparison.overall.candidate_passed,
        ),
        "by_kind": {
            kind: {
                **_counts_dict(test.cases, test.baseline_passed, test.candidate_passed),
                "gates": {
                    gate: _counts_dict(*counts)
                    for gate, counts in comparison.gates.get(kind, {}).items()
                },
            }
            for kind, test in comparison.by_kind.items()
        },
        "safety_failures": _guard_counts(comparison.guardrails.get("safety_failures")),
        "errors": _guard_counts(comparison.guardrails.get("errors")),
    }


def _guard_counts(guard: Guardrail | None) -> dict[str, Any] | None:
    if guard is None:
        return None
    return {
        "baseline": guard.baseline,
        "candidate": guard.candidate,
        "difference": guard.difference,
    }
