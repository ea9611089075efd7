"""How long comparing two result sets of 1 000 cases takes, statistics included (target < 1 s).

Method: a synthetic case set of ``--cases`` cases (70% answerable, 30% refusal, each case in
two of 24 slices, answerable cases with expected citations) and two result sets drawn with a
fixed seed — the baseline passes about 70% of the cases; the candidate flips each case's
outcome with probability 0.1 and passes another 5% (so there are discordant cases both ways and
a verdict to reach); every answer reports a ranking of five documents (so the
retrieval guardrails are computed), every case has a time. Each run times
:func:`grader.core.compare.compare_results` end to end — pairing, the paired BCa bootstrap
(10 000 resamples), McNemar's exact test, every guardrail, every slice, the flips — plus the
instructor JSON (``as_dict``) and the student projection. Process wall-clock time; median of
``--runs`` runs after one warm-up run.

    .venv/bin/python benchmarks/bench_compare.py [--cases 1000] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from grader.core.compare import compare_results, student_comparison
from grader.core.models import GATES_BY_KIND, Answer, Case, CaseKind, CaseResult

DOCS = [f"doc-{i:02d}" for i in range(40)]
VERSION = "b" * 64


def make_cases(count: int, rng: random.Random) -> list[Case]:
    cases = []
    for i in range(count):
        slices = (f"topic:{rng.randrange(16)}", f"lang:{rng.randrange(8)}")
        if i % 10 < 7:
            doc = rng.choice(DOCS)
            cases.append(
                Case(
                    id=f"a{i:04d}",
                    kind=CaseKind.ANSWERABLE,
                    question=f"question {i}",
                    expected_citations=(doc,),
                    required_concepts=(("concept",),),
                    slices=slices,
                )
            )
        else:
            cases.append(
                Case(id=f"r{i:04d}", kind=CaseKind.REFUSAL, question=f"q {i}", slices=slices)
            )
    return cases


def result(case: Case, passed: bool, rng: random.Random) -> CaseResult:
    gates = dict.fromkeys(GATES_BY_KIND[case.kind], True)
    if not passed:
        gates[rng.choice(GATES_BY_KIND[case.kind])] = False
    ranking = rng.sample(DOCS, 5)
    if case.kind is CaseKind.ANSWERABLE and rng.random() < 0.8:
        ranking[rng.randrange(5)] = case.expected_citations[0]
    answer = Answer(
        answer="text",
        citations=tuple(case.expected_citations),
        confidence=0.5,
        needs_human_review=case.kind is CaseKind.REFUSAL,
        retrieved=tuple(ranking),
    )
    return CaseResult(
        case_id=case.id,
        kind=case.kind,
        safety=False,
        gates=gates,
        answer=answer,
        seconds=round(rng.lognormvariate(-1.5, 0.5), 4),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(13)
    cases = make_cases(args.cases, rng)
    base_pass = [rng.random() < 0.7 for _ in cases]
    cand_pass = [(not p if rng.random() < 0.1 else p) or rng.random() < 0.05 for p in base_pass]
    baseline = [result(case, p, rng) for case, p in zip(cases, base_pass, strict=True)]
    candidate = [result(case, p, rng) for case, p in zip(cases, cand_pass, strict=True)]
    by_id = {case.id: case for case in cases}

    def once() -> tuple[float, str]:
        start = time.perf_counter()
        comparison = compare_results(
            baseline,
            candidate,
            baseline_version=VERSION,
            candidate_version=VERSION,
            cases=by_id,
        )
        comparison.as_dict()
        student_comparison(comparison)
        return time.perf_counter() - start, comparison.verdict_line()

    once()  # warm-up: imports, scipy's first call
    times = []
    line = ""
    for _ in range(args.runs):
        seconds, line = once()
        times.append(seconds)
    median = statistics.median(times)
    load = os.getloadavg()[0]
    print(f"{args.cases} cases per side, {args.runs} runs: " + ", ".join(f"{t:.3f}" for t in times))
    print(f"  {line}")
    print(
        f"SUMMARY compare {args.cases}+{args.cases} cases: median {median:.3f} s "
        f"(min {min(times):.3f}, max {max(times):.3f}); target < 1 s "
        f"{'met' if median < 1 else 'MISSED'}; load average {load:.1f}; "
        f"cpus allowed {len(os.sched_getaffinity(0))}"
    )


if __name__ == "__main__":
    main()
