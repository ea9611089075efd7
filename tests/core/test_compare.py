"""Offline comparison statistics against hand-computed cases (DESIGN §7, seed 002 §06)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from grader.core.compare import (
    Verdict,
    bootstrap_ci,
    compare_results,
    mcnemar_exact,
    student_comparison,
)
from grader.core.models import (
    GATES_BY_KIND,
    Answer,
    CaseKind,
    CaseResult,
    ErrorKind,
    Gate,
    ModelCall,
)
from grader.exceptions import ComparisonRefused
from tests.conftest import make_case, make_refusal

VERSION = "v" * 64


def answerable(
    case_id: str,
    passed: bool,
    *,
    failing: Gate = Gate.CLAIM_SUPPORT,
    seconds: float = 0.1,
    answer: Answer | None = None,
) -> CaseResult:
    gates = dict.fromkeys(GATES_BY_KIND[CaseKind.ANSWERABLE], True)
    if not passed:
        gates[failing] = False
    return CaseResult(
        case_id=case_id,
        kind=CaseKind.ANSWERABLE,
        safety=False,
        gates=gates,
        seconds=seconds,
        answer=answer,
        safety_failures=(Gate.FORBIDDEN_ABSENT,) if failing is Gate.FORBIDDEN_ABSENT else (),
    )


def refusal(case_id: str, passed: bool, *, error: ErrorKind | None = None) -> CaseResult:
    gates = dict.fromkeys(GATES_BY_KIND[CaseKind.REFUSAL], passed)
    return CaseResult(
        case_id=case_id, kind=CaseKind.REFUSAL, safety=False, gates=gates, error=error
    )


def runs(outcomes: Sequence[tuple[bool, bool]]) -> tuple[list[CaseResult], list[CaseResult]]:
    """Baseline and candidate answerable results from (baseline passed, candidate passed)."""
    base = [answerable(f"a{i}", b) for i, (b, _) in enumerate(outcomes)]
    cand = [answerable(f"a{i}", c) for i, (_, c) in enumerate(outcomes)]
    return base, cand


def compare(base: list[CaseResult], cand: list[CaseResult], **kwargs: Any) -> Any:
    return compare_results(
        base, cand, baseline_version=VERSION, candidate_version=VERSION, **kwargs
    )


def test_all_concordant_gives_p_one_and_a_zero_interval() -> None:
    """Identical outcomes on every case: no discordant case, p = 1, CI [0, 0], no difference."""
    base, cand = runs([(True, True)] * 7 + [(False, False)] * 3)
    result = compare(base, cand)
    assert result.primary.p_value == 1.0
    assert result.primary.ci95 == (0.0, 0.0)
    assert result.primary.difference == 0.0
    assert result.verdict is Verdict.NO_DETECTABLE_DIFFERENCE
    assert result.flipped == []


def test_known_discordant_split_gives_the_exact_binomial_p() -> None:
    """1 baseline-only vs 7 candidate-only: p = 2·(C(8,0)+C(8,1))/2^8 = 18/256, not below 0.05."""
    base, cand = runs([(True, False)] + [(False, True)] * 7 + [(True, True)] * 12)
    result = compare(base, cand)
    assert (result.primary.baseline_only, result.primary.candidate_only) == (1, 7)
    assert result.primary.p_value == pytest.approx(18 / 256)
    assert mcnemar_exact(1, 7) == pytest.approx(0.0703125)
    assert result.verdict is Verdict.NO_DETECTABLE_DIFFERENCE
    assert result.primary.difference == pytest.approx(6 / 20)


def test_six_to_none_is_significant_in_the_direction_of_the_difference() -> None:
    """0 vs 6 discordant: p = 2/2^6 = 0.03125 < 0.05: better one way, worse the other, and
    no verdict at alpha 0.01."""
    base, cand = runs([(False, True)] * 6 + [(True, True)] * 4)
    assert compare(base, cand).primary.p_value == pytest.approx(0.03125)
    assert compare(base, cand).verdict is Verdict.BETTER
    assert compare(cand, base).verdict is Verdict.WORSE
    assert compare(cand, base, alpha=0.01).verdict is Verdict.NO_DETECTABLE_DIFFERENCE
    assert "candidate worse" in compare(cand, base).verdict_line()


def test_the_bootstrap_interval_is_seeded_and_reproducible() -> None:
    """The same seed gives the same interval; it brackets the observed difference; another
    seed moves it a little."""
    base, cand = runs([(False, True)] * 25 + [(True, False)] * 10 + [(True, True)] * 165)
    first = compare(base, cand).primary.ci95
    again = compare(base, cand).primary.ci95
    other = compare(base, cand, seed=7).primary.ci95
    assert first == again
    assert first is not None and other is not None
    assert first != other
    low, high = first
    assert low < 15 / 200 < high
    assert low >= -1 and high <= 1
    direct = bootstrap_ci([float(b.passed) for b in base], [float(c.passed) for c in cand])
    assert direct == first


def test_results_on_different_case_set_versions_are_refused() -> None:
    """Comparing across case-set versions is one clear error, not a number."""
    base, cand = runs([(True, True)])
    with pytest.raises(ComparisonRefused, match="different case-set versions"):
        compare_results(base, cand, baseline_version="a" * 64, candidate_version="b" * 64)


def test_unknown_primary_metric_is_refused_with_the_choices() -> None:
    """A misspelt metric names the accepted ones."""
    base, cand = runs([(True, True)])
    with pytest.raises(ComparisonRefused, match="answerable_pass_rate"):
        compare(base, cand, primary="answerable_rate")


def test_guardrails_flag_safety_gate_error_and_latency_regressions() -> None:
    """The candidate wins the primary metric but adds a safety failure, breaks a refusal
    (with an error) and is slower: each of those guardrails says regressed."""
    base = [answerable(f"a{i}", i < 5, seconds=0.1) for i in range(10)] + [refusal("r0", True)]
    cand = [answerable(f"a{i}", True, seconds=0.5) for i in range(9)]
    cand += [answerable("a9", False, failing=Gate.FORBIDDEN_ABSENT, seconds=0.5)]
    cand += [refusal("r0", False, error=ErrorKind.TIMEOUT)]
    result = compare(base, cand)
    guards = result.guardrails
    assert result.primary.difference == pytest.approx(0.4)
    assert guards["safety_failures"].regressed and guards["safety_failures"].difference == 1
    assert guards["errors"].regressed
    assert guards["refusal_pass_rate"].regressed
    assert guards["gate:answerable:forbidden_absent"].regressed
    assert not guards["gate:answerable:claim_support"].regressed
    assert guards["latency_p95_seconds"].regressed
    assert "model_cost_usd" not in guards  # nothing recorded on either side
    assert "answerable_pass_rate" not in guards  # it is the primary metric
    assert set(result.regressed) >= {"safety_failures", "errors", "refusal_pass_rate"}


def test_retrieval_metrics_become_guardrails_when_both_sides_report_them() -> None:
    """A candidate that ranks the expected document lower regresses recall and MRR."""
    case = make_case(id="a0")

    def ranked(*docs: str) -> Answer:
        return Answer.from_json_value(
            {
                "answer": "x",
                "citations": ["rag-basics"],
                "confidence": 0.5,
                "needs_human_review": False,
                "retrieved": list(docs),
            }
        )

    base = [answerable("a0", True, answer=ranked("rag-basics", "agent-loops"))]
    cand = [answerable("a0", True, answer=ranked("agent-loops", "x", "y", "z", "w", "rag-basics"))]
    guards = compare(base, cand, cases={"a0": case}).guardrails
    assert guards["retrieval:recall@5"].baseline == 1.0
    assert guards["retrieval:recall@5"].candidate == 0.0
    assert guards["retrieval:mrr"].regressed


def test_model_cost_guardrail_reads_recorded_model_calls() -> None:
    """Per-case model calls (the gateway's records) sum into the cost guardrail."""

    def costed(case_id: str, usd: float) -> CaseResult:
        call = ModelCall(model="course-chat", prompt_tokens=10, completion_tokens=5, usd=usd)
        return answerable(case_id, True).model_copy(update={"model_calls": (call,)})

    result = compare([costed("a0", 0.01)], [costed("a0", 0.02)])
    cost = result.guardrails["model_cost_usd"]
    assert (cost.baseline, cost.candidate, cost.regressed) == (0.01, 0.02, True)


def test_slices_and_flips_name_the_cases_that_changed() -> None:
    """Slices come from the case set; flipped lists each case whose outcome changed."""
    cases = {
        "a0": make_case(id="a0", slices=("lang:en",)),
        "a1": make_case(id="a1", slices=("lang:pt",)),
        "r0": make_refusal(id="r0", slices=("lang:pt",)),
    }
    base = [answerable("a0", True), answerable("a1", True), refusal("r0", True)]
    cand = [answerable("a0", True), answerable("a1", False), refusal("r0", True)]
    result = compare(base, cand, cases=cases)
    assert result.slices["lang:pt"].baseline_only == 1
    assert result.slices["lang:en"].baseline_only == 0
    assert [flip.as_dict() for flip in result.flipped] == [
        {"case_id": "a1", "kind": "answerable", "from": "passed", "to": "failed"}
    ]
    data = result.as_dict()
    assert data["mcnemar"] == {"baseline_only": 1, "candidate_only": 0, "p_value": 1.0}
    assert set(data) >= {"case_set_version", "primary", "verdict", "guardrails", "slices"}


def test_student_projection_carries_counts_but_no_case_or_slice() -> None:
    """The student view of a comparison has per-kind and per-gate counts, p and CI, and no
    case id, slice name or flipped list."""
    cases = {f"a{i}": make_case(id=f"a{i}", slices=("topic:secret-slice",)) for i in range(10)}
    base, cand = runs([(False, True)] * 6 + [(True, True)] * 4)
    view = student_comparison(compare(base, cand, cases=cases))
    text = json.dumps(view)
    assert "secret-slice" not in text
    assert not any(f'"a{i}"' in text for i in range(10))
    assert "flipped" not in view and "slices" not in view
    assert view["primary"]["p_value"] == pytest.approx(0.03125)
    assert view["by_kind"]["answerable"]["difference"] == 6
    assert view["by_kind"]["answerable"]["gates"]["claim_support"]["candidate_passed"] == 10
    low, high = view["primary"]["ci95"]
    assert low <= 0.6 <= high
