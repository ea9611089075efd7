"""How long the practice-set leak check takes on 5 000 public × 5 000 private questions (< 10 s).

Method: realistic synthetic questions are generated from 24 question templates in English,
Portuguese, Spanish, French and German, filled with technical noun phrases (adjective + noun
combinations and made-up product names), with optional lead-ins and tails, so lengths (about 6–27
tokens), shared function words and shared topics look like a course's question bank. The
public side gets 50 planted leaks (exact copies with case and punctuation changed, padded
copies, one-word rewordings, reordered copies), which must all be found. ``check_leaks`` —
normalisation, exact index, padded index and both ``cdist`` passes, i.e. everything but
reading files — runs ``--runs`` times (default 5) after one warm-up; the median, min and max
are reported, with the number of hits (planted plus template siblings the generator made).

It also times one ``cdist(fuzz.ratio)`` pass with and without ``score_cutoff`` on the same
strings, which is why the leak check computes full scores (it then knows the closest pair).

    .venv/bin/python benchmarks/bench_leak_check.py [--size 5000] [--runs 5] [--seed 7]
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from rapidfuzz import fuzz, process

from grader.practice.leakcheck import check_leaks, normalized_question


def word_list(text: str) -> tuple[str, ...]:
    return tuple(text.split())


ADJECTIVES = word_list(
    "sparse dense hybrid lexical semantic hierarchical recursive stale fresh cached "
    "quantised distilled multilingual streaming batched structured unstructured noisy "
    "curated synthetic adversarial private public versioned signed nested parallel "
    "asynchronous deterministic stochastic calibrated overlapping sliding weighted ranked "
    "filtered deduplicated grounded injected poisoned redacted encrypted compressed"
)
NOUNS = word_list(
    "retriever reranker chunk embedding index vector store prompt template tool call "
    "citation passage corpus document query rewrite context window token budget step limit "
    "agent loop planner memory cache schema validator parser judge rubric golden set "
    "benchmark metric recall precision latency throughput quota rate limit snapshot "
    "pipeline evaluator canary guardrail policy refusal fallback escalation trace log span "
    "dataset label annotator sampler tokenizer encoder decoder server client protocol "
    "reranking stage query planner answer grader hallucination detector citation checker "
    "feedback loop review queue audit trail access control secret manager sandbox runner "
    "container image worker pool job queue retry budget backoff timer circuit breaker "
    "feature flag release gate dashboard alert threshold drift monitor cost report "
    "invoice ledger contract clause policy document handbook section glossary entry "
    "changelog release note incident report postmortem runbook playbook checklist "
    "spreadsheet table column row header footnote appendix figure caption transcript"
)
SYLLABLES = word_list(
    "ka lo mi ne ru sa te vo xi za bre dor fen gal hur jin kel mor nax pim qua rix sol tav"
)
TEMPLATES_EN = (
    "What is the difference between {a} and {b}?",
    "How does {a} affect {b} when {c} is involved?",
    "Why should {a} be checked before {b} reaches the model?",
    "When does {a} beat {b}, and why combine both with {c}?",
    "Which {a} should an agent use for {b}?",
    "How is {a} computed for {b}, and what does it miss?",
    "What goes wrong when {a} is too large for {b}?",
    "How can {a} put an upper bound on {b}?",
    "What should the application do when {a} fails against {b}?",
    "Who is responsible for {a} in a system with {b}?",
    "Why must {a} include {b}, and how should {c} behave on it?",
    "What does {a} check about {b} and {c}?",
    "How do you detect that {a} is stuck on {b}?",
    "Is {a} enough on its own to protect {b}?",
)
TEMPLATES_OTHER = (
    "Qual é a diferença entre {a} e {b}?",
    "Por que {a} precisa de {b} antes de {c}?",
    "¿Cómo se calcula {a} para {b}?",
    "¿Cuándo conviene usar {a} en lugar de {b}?",
    "Comment {a} influence-t-il {b} dans {c} ?",
    "Pourquoi faut-il vérifier {a} avant {b} ?",
    "Wie hängt {a} mit {b} zusammen?",
    "Warum braucht {a} ein {b} für {c}?",
    "O que acontece quando {a} excede {b}?",
    "¿Qué debe hacer {a} cuando falla {b}?",
)
LEAD_INS = ("", "", "", "In a RAG system, ", "For the capstone, ", "Briefly, ", "In practice, ")
TAILS = ("", "", "", " Give an example.", " Explain with the course notes.", " Why?")
PADDING = ("Quick question before the exam: ", "Be precise: ", "Honest question — ")


@dataclass(frozen=True)
class Question:
    id: str
    question: str


def product_name(rng: random.Random) -> str:
    """A made-up product or document name, the rare words real questions carry."""
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def noun_phrase(rng: random.Random) -> str:
    words = [rng.choice(NOUNS)]
    if rng.random() < 0.35:
        words.insert(0, product_name(rng))
    if rng.random() < 0.7:
        words.insert(0, rng.choice(ADJECTIVES))
    if rng.random() < 0.3:
        words.append(rng.choice(NOUNS))
    return " ".join(words)


def make_question(rng: random.Random) -> str:
    template = rng.choice(TEMPLATES_EN if rng.random() < 0.75 else TEMPLATES_OTHER)
    body = template.format(a=noun_phrase(rng), b=noun_phrase(rng), c=noun_phrase(rng))
    lead = rng.choice(LEAD_INS)
    if lead:
        body = lead + body[0].lower() + body[1:]
    return body + rng.choice(TAILS)


def plant_leak(question: str, kind: int, rng: random.Random) -> str:
    """A disguised copy of a private question: exact variant, padded, reworded or reordered."""
    if kind == 0:
        return question.upper().replace("?", " ?!")
    if kind == 1:
        return rng.choice(PADDING) + question + " Thanks!"
    words = question.split()
    if kind == 2:
        position = rng.randrange(len(words))
        words[position] = rng.choice(NOUNS)
        return " ".join(words)
    half = len(words) // 2
    return " ".join(words[half:] + words[:half])


def make_sets(size: int, seed: int, planted: int) -> tuple[list[Question], list[Question]]:
    rng = random.Random(seed)
    private = [Question(f"c{i:05d}", make_question(rng)) for i in range(size)]
    public = [Question(f"p{i:05d}", make_question(rng)) for i in range(size - planted)]
    for number, source in enumerate(rng.sample(private, planted)):
        public.append(Question(f"leak{number:03d}", plant_leak(source.question, number % 4, rng)))
    return public, private


def timed(function: Callable[[], object], runs: int) -> list[float]:
    """Wall-clock seconds of ``runs`` calls after one warm-up call."""
    function()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=5000, help="questions on each side")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--planted", type=int, default=50)
    args = parser.parse_args()

    public, private = make_sets(args.size, args.seed, args.planted)
    lengths = [len(normalized_question(q.question).split()) for q in (*public, *private)]
    print(
        f"{len(public)} public x {len(private)} private questions; tokens per question "
        f"median {statistics.median(lengths)}, range {min(lengths)}-{max(lengths)}"
    )
    report = check_leaks(public, private)
    offending = set(report.offending_public_ids())
    planted = {q.id for q in public if q.id.startswith("leak")}
    missed = planted - offending
    print(
        f"hits: {len(report.hits)} ({len(planted & offending)}/{len(planted)} planted leaks "
        f"found, {len(offending - planted)} generated template siblings); closest "
        f"{report.closest.similarity if report.closest else None}"
    )
    if missed:
        raise SystemExit(f"planted leaks not found: {sorted(missed)}")

    times = timed(lambda: check_leaks(public, private), args.runs)
    print(
        f"check_leaks: median {statistics.median(times):.2f} s, min {min(times):.2f} s, "
        f"max {max(times):.2f} s over {args.runs} runs"
    )

    public_texts = [normalized_question(q.question) for q in public]
    private_texts = [normalized_question(q.question) for q in private]
    for cutoff in (None, 80.0):
        times = timed(
            functools.partial(
                process.cdist,
                public_texts,
                private_texts,
                scorer=fuzz.ratio,
                score_cutoff=cutoff,
                workers=-1,
            ),
            args.runs,
        )
        print(
            f"one cdist(fuzz.ratio) pass, score_cutoff={cutoff}: "
            f"median {statistics.median(times):.2f} s"
        )


if __name__ == "__main__":
    main()
