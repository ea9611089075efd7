"""Gate throughput: case-gradings per second per core, claim_support v2 against v1.

Method. The demo private set (``private_cases/``: 29 cases, real corpus) is loaded once, as
the worker does. Answers are realistic: for every case, the reference agent's own answer
(run in-process on the corpus), plus four variants of it — its first sentence only, the
answer with its sentences in reverse order, the answer citing a wrong document, and the
best document pasted whole (a cheat the gate must reject) — so every claim_support path
(pass, missing concept, too long, unsupported sentence) is exercised. One *case-grading* is
``grade_case`` (every gate of the case's kind, the decision inputs, the result model). A run
grades every (case, answer) pair ``--repeat`` times in one process (the core is pure Python
and single-threaded), timed with the process's CPU time, so the rate is per core and not
skewed by other work on a shared machine; the per-document indexes are built before timing, as a
worker's loaded case set has them. The figure is the median of ``--runs`` runs after a
warm-up, for v2 and for v1 (concepts-only claim_support) in the same process, their runs
interleaved (v2, v1, v2, v1, …) so both see the same machine load. The last line is a summary
with the 1-minute load average and the CPUs the process may run on (``taskset -c 1`` pins it).

CPU time still varies with the load on a shared machine (caches, frequency, a VM's stolen
time). For a load-independent comparison, count instructions:
``valgrind --tool=cachegrind --cache-sim=no python benchmarks/bench_gates.py --loop v2
--repeat 10`` grades the pairs ``--repeat`` times without timing; subtract a ``--repeat 0`` run
and divide by pairs × repeat.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from grader.core import scoring
from grader.core.casesets import load_case_set
from grader.core.gates import GATE_FUNCTIONS, GATE_FUNCTIONS_V1, evaluate_gates
from grader.core.models import Answer, Case, CaseKind

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "submissions" / "examples" / "reference" / "agent.py"
TARGET = 20_000


def reference_answers(cases: tuple[Case, ...], corpus_dir: Path) -> dict[str, dict[str, Any]]:
    os.environ["CORPUS_DIR"] = str(corpus_dir)
    spec = importlib.util.spec_from_file_location("reference_agent", REFERENCE)
    assert spec and spec.loader
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    agent.setup()
    return {case.id: agent.answer(case.question) for case in cases}


def variants(answer: dict[str, Any], corpus: Any) -> list[Answer]:
    text = answer["answer"]
    sentences = [s for s in text.split(". ") if s]
    cited = answer["citations"]
    wrong = [doc for doc in sorted(corpus) if doc not in cited][:1]
    made = [
        answer,
        {**answer, "answer": sentences[0]},
        {**answer, "answer": ". ".join(reversed(sentences))},
        {**answer, "citations": wrong or cited},
        {**answer, "answer": corpus[cited[0]] if cited else text},
    ]
    return [Answer.from_json_value(item) for item in made]


def one_run(pairs: list[tuple[Case, Answer]], case_set: Any, repeat: int) -> float:
    # CPU time of this (single-threaded) process: the per-core cost, unaffected by other
    # processes sharing the machine's cores.
    start = time.process_time()
    for _ in range(repeat):
        for case, answer in pairs:
            scoring.grade_case(
                case, answer, policy=case_set.policy, documents=case_set.corpus, seconds=0.1
            )
    return len(pairs) * repeat / (time.process_time() - start)


def use(functions: Any) -> None:
    """Make ``grade_case`` run ``functions`` (claim_support v1 or v2) as its gates."""
    scoring.evaluate_gates = functools.partial(evaluate_gates, functions=functions)  # type: ignore[assignment]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, default=ROOT / "private_cases")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--loop",
        choices=("v1", "v2"),
        help="only grade the pairs --repeat times with this claim_support, untimed "
        "(for counting instructions under valgrind)",
    )
    args = parser.parse_args()

    case_set = load_case_set(args.cases)
    answers = reference_answers(case_set.cases, case_set.corpus.root)
    pairs = [
        (case, answer)
        for case in case_set.cases
        for answer in variants(answers[case.id], case_set.corpus)
    ]
    for doc in case_set.corpus:
        case_set.corpus.token_text(doc)
        case_set.corpus.support_index(doc)
    answerable = sum(case.kind is CaseKind.ANSWERABLE for case, _ in pairs)

    versions = {"v2": GATE_FUNCTIONS, "v1": GATE_FUNCTIONS_V1}
    if args.loop:
        use(versions[args.loop])
        one_run(pairs, case_set, 2)  # the same warm-up (caches filled) as a timed run
        one_run(pairs, case_set, args.repeat)
        return 0
    for functions in versions.values():
        use(functions)
        one_run(pairs, case_set, max(1, args.repeat // 10))  # warm-up
    rates: dict[str, list[float]] = {name: [] for name in versions}
    for _ in range(args.runs):
        for name, functions in versions.items():
            use(functions)
            rates[name].append(one_run(pairs, case_set, args.repeat))
    figures = {
        name: {"median": statistics.median(runs), "min": min(runs), "max": max(runs)}
        for name, runs in rates.items()
    }
    load = os.getloadavg()[0]
    cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    v2, v1 = figures["v2"]["median"], figures["v1"]["median"]
    verdict = "meets" if v2 >= TARGET else "MISSES"
    summary = (
        f"SUMMARY gates v2 {v2:,.0f}/s/core, v1 {v1:,.0f}/s/core (v2 = {v2 / v1:.2f} x v1), "
        f"{verdict} the {TARGET:,}/s/core target; load average {load:.2f}, CPUs {cpus}"
    )
    result = {
        "pairs": len(pairs),
        "answerable_pairs": answerable,
        "repeat": args.repeat,
        "runs": args.runs,
        "per_core_per_second": figures,
        "target": TARGET,
        "load_average_1min": load,
        "cpus": cpus,
        "summary": summary,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{len(pairs)} (case, answer) pairs ({answerable} answerable), x{args.repeat}, "
            f"median of {args.runs} runs, one core"
        )
        for name, figure in figures.items():
            print(
                f"  claim_support {name}: {figure['median']:,.0f} case-gradings/s "
                f"(min {figure['min']:,.0f}, max {figure['max']:,.0f})"
            )
        print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
