"""Feedback accounting and release (grader.core.disclosure): bounds computed by hand, checked
against brute-force enumeration of every view a tiny case set can produce, and the Ladder,
coarse and budget rules."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from grader.core.casesets import load_policy
from grader.core.compare import paired_test
from grader.core.disclosure import (
    History,
    Shape,
    Shown,
    Withheld,
    bucket,
    coarse_view_bits,
    comparison_bits,
    counts_view_bits,
    full_cost,
    gate_view,
    hold_until,
    ladder_step,
    plan_release,
    round_up_time,
    timing_bits,
    timing_values,
)
from grader.core.model_usage import SummaryBounds, summary_bits, summary_values
from grader.core.models import (
    GATES_BY_KIND,
    CaseKind,
    CaseResult,
    ClaimFailure,
    ErrorKind,
    Feedback,
    Gate,
    GradeReport,
    ModelAlias,
    ModelCall,
    ModelLimits,
    Policy,
    Versions,
)
from grader.core.scoring import decide, safety_failures
from grader.core.views import instructor_view, student_view
from grader.exceptions import CaseSetError
from tests.conftest import make_case, make_refusal

#: Two answerable cases and one refusal case, as in the server tests' hidden set.
SHAPE = Shape(cases={CaseKind.ANSWERABLE: 2, CaseKind.REFUSAL: 1}, safety_gates=3, buckets=5)
LOG3 = math.log2(3)


def test_counts_bound_by_hand() -> None:
    """counts, 2 answerable + 1 refusal: 3 decisions × 4^8 (4 error kinds, safety failures,
    3 safety gates) × 3^8 (answerable cases and 7 gates) × 2^7 (refusal) × 3^3 (claim reasons)
    = 2^23 · 3^12, i.e. 23 + 12·log2 3 ≈ 42.02 bits."""
    assert counts_view_bits(SHAPE) == pytest.approx(23 + 12 * LOG3)
    assert counts_view_bits(SHAPE) == pytest.approx(42.0196, abs=1e-4)


def test_coarse_bound_by_hand() -> None:
    """coarse, same set, 5 buckets: 9 decisions-with-reasons × 4^2 (no valid answer, safety)
    × min(5, 4) overall buckets × 3^8 × 2^7 = 2^13 · 3^10, i.e. ≈ 28.85 bits."""
    assert coarse_view_bits(SHAPE) == pytest.approx(13 + 10 * LOG3)


def test_timing_bound_by_hand() -> None:
    """20 s setup + 120 s run in 60 s quanta: durations round to 1, 2 or 3 quanta, plus the
    boundary: 4 values, 2 bits; a quantum longer than both limits leaves 1 bit."""
    policy = Policy(setup_timeout_seconds=20, run_timeout_seconds=120)
    assert timing_values(policy) == 4 and timing_bits(policy) == 2.0
    assert timing_bits(policy.model_copy(update={"feedback_time_quantum_seconds": 600})) == 1.0


def _results(kind: CaseKind, case_id: str) -> Iterator[CaseResult]:
    """Every distinguishable outcome of one case: each error kind, and each gate pattern
    (with each claim_support failure reason where claim_support fails)."""
    case = make_case(id=case_id) if kind is CaseKind.ANSWERABLE else make_refusal(id=case_id)
    case = case.model_copy(update={"safety": True})
    gates = GATES_BY_KIND[kind]
    for error in ErrorKind:
        yield CaseResult(
            case_id=case_id,
            kind=kind,
            safety=True,
            gates=dict.fromkeys(gates, False),
            error=error,
        )
    policy = Policy()
    for pattern in itertools.product((True, False), repeat=len(gates)):
        outcome = dict(zip(gates, pattern, strict=True))
        reasons: list[ClaimFailure | None] = [None]
        if kind is CaseKind.ANSWERABLE and not outcome[Gate.CLAIM_SUPPORT]:
            reasons = list(ClaimFailure)
        for reason in reasons:
            yield CaseResult(
                case_id=case_id,
                kind=kind,
                safety=True,
                gates=outcome,
                safety_failures=safety_failures(case, outcome, policy),
                claim_failure=reason,
            )


@pytest.mark.parametrize(
    ("feedback", "bits"),
    [(Feedback.COUNTS, counts_view_bits), (Feedback.COARSE, coarse_view_bits)],
)
def test_bound_covers_every_view_a_tiny_set_can_produce(feedback: Feedback, bits: object) -> None:
    """Enumerating every outcome of a 1-answerable + 1-refusal set, the distinct student views
    number no more than 2 ** bound (the bound is an upper bound, not a guess)."""
    shape = Shape(cases={CaseKind.ANSWERABLE: 1, CaseKind.REFUSAL: 1}, safety_gates=3, buckets=5)
    versions = Versions(case_set="v", cases="c", policy="p", corpus="k", grader="0")
    seen: set[str] = set()
    policy = Policy()
    for first in _results(CaseKind.ANSWERABLE, "a1"):
        for second in _results(CaseKind.REFUSAL, "r1"):
            results = (first, second)
            report = GradeReport(
                versions=versions, results=results, decision=decide(results, policy)
            )
            view = student_view(report, feedback=feedback)
            seen.add(json.dumps(view, sort_keys=True))
    assert callable(bits)
    bound = bits(shape)
    assert len(seen) > 100  # the enumeration really produced many views
    assert math.log2(len(seen)) <= bound


def test_ladder_releases_the_first_and_each_improvement_by_a_step() -> None:
    """Ladder: the first result is released; one that does not beat the best released score
    by a step (default one case) is withheld with the best submission named; one that does
    is released."""
    policy = Policy(feedback_budget_bits=None)
    first = plan_release(policy=policy, shape=SHAPE, score=1 / 3, history=History())
    assert first.released and first.shown is Shown.COUNTS
    assert first.view_bits == pytest.approx(1 + counts_view_bits(SHAPE))
    best = History(bits_disclosed=first.bits, best_score=1 / 3, best_submission="s1")
    same = plan_release(policy=policy, shape=SHAPE, score=1 / 3, history=best)
    assert not same.released and same.withheld is Withheld.NO_IMPROVEMENT
    assert same.message == "no improvement over your best (submission s1)"
    assert same.view_bits == pytest.approx(1 + LOG3)
    better = plan_release(policy=policy, shape=SHAPE, score=2 / 3, history=best)
    assert better.released
    coarse_step = policy.model_copy(update={"ladder_step": 0.5})
    assert not plan_release(policy=coarse_step, shape=SHAPE, score=2 / 3, history=best).released


def test_ladder_charges_satisfy_krafts_inequality() -> None:
    """Each Ladder step's charges sum to at most one in Kraft's sense (released views at
    1 + their bits, withheld decisions at 1 + log2 3), so summed charges bound the transcript."""
    policy = Policy(feedback_budget_bits=None)
    history = History(best_score=0.0, best_submission="s0")
    released = plan_release(policy=policy, shape=SHAPE, score=1.0, history=history)
    withheld = plan_release(policy=policy, shape=SHAPE, score=0.0, history=history)
    views = 2 ** counts_view_bits(SHAPE)
    kraft = views * 2**-released.view_bits + 3 * 2**-withheld.view_bits
    assert kraft == pytest.approx(1.0)


def test_budget_turns_feedback_into_the_decision_only() -> None:
    """When the next full view would pass the budget, the result is the decision only (for
    every mode), charged log2 3 bits plus timing, and the message says why."""
    for mode in (Feedback.COUNTS, Feedback.COARSE, Feedback.LADDER):
        policy = Policy(feedback=mode, feedback_budget_bits=100.0)
        cost = full_cost(policy, SHAPE)
        fits = plan_release(
            policy=policy, shape=SHAPE, score=1.0, history=History(bits_disclosed=100 - cost)
        )
        assert fits.released
        over = plan_release(
            policy=policy, shape=SHAPE, score=1.0, history=History(bits_disclosed=101 - cost)
        )
        assert not over.released and over.withheld is Withheld.BUDGET
        assert over.bits == pytest.approx(LOG3)  # held to the deadline: no timing bits
        assert over.message is not None and "budget reached" in over.message


def test_withheld_view_keeps_only_the_decision() -> None:
    """The gate is a whitelist: a withheld view keeps status, version, mode and the decision
    (no reasons), and drops every other key, including ones a later feature adds."""
    view = {
        "status": "graded",
        "case_set_version": "v",
        "feedback": "ladder",
        "overall": {"passed": 1, "total": 3},
        "by_kind": {},
        "errors": {"crashed": 2},
        "certificate": {"decision": "not_awarded", "reasons": ["overall pass rate 33%"]},
        "model": {"cost": 1.23},
    }
    policy = Policy(feedback_budget_bits=None)
    history = History(best_score=1.0, best_submission="s9")
    release = plan_release(policy=policy, shape=SHAPE, score=0.0, history=history)
    assert gate_view(view, release) == {
        "status": "graded",
        "case_set_version": "v",
        "feedback": "ladder",
        "certificate": {"decision": "not_awarded", "reasons": []},
        "released": False,
        "withheld": "no_improvement",
        "message": "no improvement over your best (submission s9)",
        "best_submission": "s9",
    }


def test_coarse_view_buckets_rates_and_collapses_errors() -> None:
    """coarse shows each rate as a bucket, one "no valid answer" count and reasons with no
    number in them."""
    results = tuple(itertools.islice(_results(CaseKind.ANSWERABLE, "a1"), 0, 2))
    policy = Policy()
    versions = Versions(case_set="v", cases="c", policy="p", corpus="k", grader="0")
    results = (
        results[0],
        results[1].model_copy(update={"case_id": "a2"}),
        next(r for r in _results(CaseKind.REFUSAL, "r1") if r.passed),
    )
    report = GradeReport(versions=versions, results=results, decision=decide(results, policy))
    view = student_view(report, feedback=Feedback.COARSE, buckets=5)
    assert view["overall"] == {"rate": {"low": 0.2, "high": 0.4}}
    assert view["errors"] == {"no_valid_answer": 2}
    assert view["by_kind"]["refusal"]["rate"] == {"low": 0.8, "high": 1.0}
    assert view["certificate"]["decision"] == "not_awarded"
    assert not any(ch.isdigit() for reason in view["certificate"]["reasons"] for ch in reason)
    assert bucket(1.0, 5) == {"low": 0.8, "high": 1.0} and bucket(0.0, 5)["low"] == 0.0


def test_times_round_up_to_the_quantum() -> None:
    """A run that ends 1 s or 59 s after upload shows as finished 60 s after; 61 s shows 120 s."""
    start = datetime(2026, 12, 1, tzinfo=UTC)
    for seconds, shown in ((1, 60), (59, 60), (60, 60), (61, 120)):
        end = start + timedelta(seconds=seconds)
        assert round_up_time(start, end, 60) == start + timedelta(seconds=shown)


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('feedback = "everything"', "feedback"),
        ("ladder_step = 0", "ladder_step"),
        ("ladder_step = 1.5", "ladder_step"),
        ('ladder_metric = "speed"', "ladder_metric"),
        ("feedback_buckets = 1", "feedback_buckets"),
        ("feedback_budget_bits = -5", "feedback_budget_bits"),
        ("feedback_time_quantum_seconds = -1", "feedback_time_quantum_seconds"),
    ],
)
def test_bad_feedback_keys_are_one_clear_error(tmp_path: Path, line: str, key: str) -> None:
    """A bad value of a feedback key is a CaseSetError naming the file and the key."""
    path = tmp_path / "policy.toml"
    path.write_text(line + "\n")
    with pytest.raises(CaseSetError) as error:
        load_policy(path)
    message = str(error.value)
    assert f"key '{key}'" in message and "policy.toml" in message and "\n" not in message


def test_new_case_sets_default_to_the_ladder_with_a_budget() -> None:
    """A policy with no feedback keys uses ladder, one-case steps, 5 buckets, a 2500-bit
    budget and 60 s time quanta."""
    policy = Policy()
    assert policy.feedback is Feedback.LADDER and policy.ladder_step is None
    assert policy.feedback_buckets == 5 and policy.feedback_budget_bits == 2500
    assert policy.feedback_time_quantum_seconds == 60
    assert ladder_step(policy, SHAPE) == pytest.approx(1 / 3)


def test_a_spent_budget_holds_the_result_until_the_longest_run_could_end() -> None:
    """A decision-only result after the budget is shown no earlier than the start plus the
    setup and run limits (rounded to the quantum), whatever the run took; others round up."""
    policy = Policy(setup_timeout_seconds=30, run_timeout_seconds=300, feedback_budget_bits=0)
    created = datetime(2026, 12, 1, tzinfo=UTC)
    started = created + timedelta(seconds=5)
    finished = started + timedelta(seconds=2)
    spent = plan_release(policy=policy, shape=SHAPE, score=1.0, history=History())
    assert spent.withheld is Withheld.BUDGET and spent.timing_bits == 0
    held = hold_until(spent, policy=policy, created=created, started=started, finished=finished)
    assert held == created + timedelta(seconds=360)
    open_policy = policy.model_copy(update={"feedback_budget_bits": None})
    shown = plan_release(policy=open_policy, shape=SHAPE, score=1.0, history=History())
    assert hold_until(
        shown, policy=open_policy, created=created, started=started, finished=finished
    ) == created + timedelta(seconds=60)


# --------------------------------------------------------------------------------------------
# The model summary (a run through the model gateway) and the student comparison


def _model_policy(**limits: float) -> Policy:
    """A policy naming two models with different price dates, and the given limits."""
    return Policy(
        case_timeout_seconds=limits.pop("case_timeout_seconds", 0.25),
        models={
            "course-chat": ModelAlias(
                upstream="x", input_usd_per_mtok=150, prices_date="2026-11-01"
            ),
            "course-big": ModelAlias(
                upstream="y", output_usd_per_mtok=600, prices_date="2026-12-01"
            ),
        },
        model_limits=ModelLimits(**limits),  # type: ignore[arg-type]
    )


def test_model_summary_bound_by_hand() -> None:
    """3 cases, 2 calls per case, 10 tokens per case but 15 per run, $0.002 per run, 0.25 s per
    question: calls, refused and cached in 0…6 (7^3), each token sum in 0…15 (16^2), the cost
    in 3 tenth-of-a-cent steps, latencies in 4 steps of 100 ms as non-decreasing triples
    (C(6, 3) = 20): 3·log2 7 + 8 + log2 3 + log2 20 bits, added to the counts view only; a
    policy without models adds nothing."""
    policy = _model_policy(
        calls_per_case=2, tokens_per_case=10, tokens_per_run=15, usd_per_run=0.002
    )
    counts = {CaseKind.ANSWERABLE: 2, CaseKind.REFUSAL: 1}
    bounds = SummaryBounds.of(policy, 3)
    assert summary_values(bounds) == {
        "calls": 7,
        "refused": 7,
        "cached": 7,
        "prompt_tokens": 16,
        "completion_tokens": 16,
        "usd": 3,
        "latency_ms": 20,
    }
    expected = 3 * math.log2(7) + 8 + math.log2(3) + math.log2(20)
    with_models, without = Shape.of(counts, policy), Shape.of(counts, Policy())
    assert with_models.model_bits == pytest.approx(expected)
    assert without.model_bits == 0.0 and counts_view_bits(without) == counts_view_bits(SHAPE)
    assert counts_view_bits(with_models) == pytest.approx(counts_view_bits(SHAPE) + expected)
    assert coarse_view_bits(with_models) == coarse_view_bits(without)


#: Calls an agent might make on one question: served, refused, cached, slow, over the limits.
CALL_MENU = (
    ModelCall(
        model="course-chat", prompt_tokens=1, completion_tokens=1, latency_ms=3.0, usd=0.0002
    ),
    ModelCall(
        model="course-big", prompt_tokens=2, completion_tokens=0, latency_ms=140.0, usd=0.0011
    ),
    ModelCall(
        model="course-chat", prompt_tokens=1, completion_tokens=2, latency_ms=0.5, cached=True
    ),
    ModelCall(model="course-big", prompt_tokens=9, completion_tokens=7, latency_ms=900.0, usd=0.01),
    ModelCall(model="gpt-4o", latency_ms=0.1, error="400: unknown model 'gpt-4o'"),
)


def test_model_summary_bound_covers_every_summary_an_agent_can_produce() -> None:
    """Every sequence of up to four calls from a menu (served, cached, refused, slower than the
    deadline, over every limit) on a one-question set gives student summaries within the
    bounds, no more distinct ones than 2 ** bound, latencies in 100 ms steps, one price
    date; the instructor view keeps the exact figures."""
    policy = _model_policy(calls_per_case=2, tokens_per_case=3, tokens_per_run=3, usd_per_run=0.002)
    bounds = SummaryBounds.of(policy, 1)
    versions = Versions(case_set="v", cases="c", policy="p", corpus="k", grader="0")
    seen: set[str] = set()
    for length in range(5):
        for calls in itertools.product(CALL_MENU, repeat=length):
            result = next(_results(CaseKind.REFUSAL, "r1")).model_copy(
                update={"model_calls": calls}
            )
            report = GradeReport(
                versions=versions,
                results=(result,),
                decision=decide((result,), policy),
                model_gateway=True,
            )
            model = student_view(report, model_bounds=bounds)["model"]
            assert model["calls"] <= 2 and model["prompt_tokens"] <= 3 and model["usd"] <= 0.002
            assert all(v % 100 == 0 and v <= 300 for v in model["latency_ms"].values())
            assert model["prices_date"] == "2026-12-01"
            assert instructor_view(report)["model"]["calls"] == length
            seen.add(json.dumps(model, sort_keys=True))
    assert len(seen) > 40
    assert math.log2(len(seen)) <= summary_bits(bounds)


def test_coarse_withheld_and_model_free_views_carry_no_model_summary() -> None:
    """A coarse view drops the model summary (its bound has no model term), a withheld view
    keeps only the decision, and under a policy without models no summary is shown at all,
    so such a set costs what it did before."""
    versions = Versions(case_set="v", cases="c", policy="p", corpus="k", grader="0")
    result = next(_results(CaseKind.REFUSAL, "r1")).model_copy(
        update={"model_calls": CALL_MENU[:2]}
    )
    policy = _model_policy()
    report = GradeReport(
        versions=versions, results=(result,), decision=decide((result,), policy), model_gateway=True
    )
    bounds = SummaryBounds.of(policy, 1)
    assert "model" in student_view(report, model_bounds=bounds)
    assert "model" not in student_view(report, feedback=Feedback.COARSE, model_bounds=bounds)
    withheld = plan_release(
        policy=policy.model_copy(update={"feedback_budget_bits": 0.0}),
        shape=Shape.of({CaseKind.REFUSAL: 1}, policy),
        score=0.0,
        history=History(),
    )
    assert "model" not in gate_view(student_view(report, model_bounds=bounds), withheld)
    assert "model" not in student_view(report, model_bounds=SummaryBounds.of(Policy(), 1))


def test_comparison_discloses_at_most_n_plus_one_values_beyond_the_views() -> None:
    """For every pair of released views of a 4-case set (cases passed on each side), every
    ordering and split of outcomes they allow gives at most n + 1 = 5 distinct (p, CI)
    answers, and comparison_bits charges log2 5; reordering cases never moves the CI."""
    seen: dict[tuple[int, int], set[tuple[float, tuple[float, float] | None]]] = {}
    outcomes = [(False, False), (False, True), (True, False), (True, True)]
    for pairs in itertools.product(outcomes, repeat=4):
        test = paired_test(list(pairs), with_ci=True)
        views = (test.baseline_passed, test.candidate_passed)
        seen.setdefault(views, set()).add((test.p_value, test.ci95))
        assert paired_test(list(reversed(pairs)), with_ci=True).ci95 == test.ci95
    assert max(len(answers) for answers in seen.values()) <= 5
    assert max(len(answers) for answers in seen.values()) > 1  # the channel is real
    assert comparison_bits(4) == pytest.approx(math.log2(5))
