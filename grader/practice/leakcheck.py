"""The leak check: does any public practice question give away a private one? (pure logic)

Every public question is compared with every private question after the grader's own text
normalisation (:func:`grader.core.text.tokens`: NFKC, case-folded, accents stripped, split into
word tokens, so case, accents, punctuation and spacing never matter). A pair is a leak when
one of these rules fires, checked in this order:

``exact``
    The two questions have the same token sequence.
``padded``
    The private question has at least ``padded_min_tokens`` distinct tokens, at least
    ``padded_min_share`` of them occur in the public question, and the public question has
    words of its own: the private question with words added around it (or in it).
    Similarity = that share, in percent. The minimum token count
    keeps a very short question ("What is RAG?") from being "contained" in everything.
``reworded``
    ``rapidfuzz.fuzz.ratio`` (normalised Indel similarity, 0–100) of the two token strings, or
    of the two token strings with their tokens sorted (the same words reordered), reaches
    ``reworded_similarity``. Similarity = the larger of the two.

A public case whose id is also a private case id is refused too (``id_collision``): ids key
eval records and regrades, and a published id must never name a hidden case.

Why these scorers: ``WRatio`` and ``token_set_ratio`` score 100 whenever one question's words
are a subset of the other's, which on short questions means "shares the word *what*"; plain
``ratio`` on normalised text does not, and the subset idea is kept only where it is meaningful
(the ``padded`` rule, directional and with a minimum length). The thresholds were calibrated on
hand-written rewordings and on distinct questions about the same topics (see
``tests/practice/test_leakcheck.py``): rewordings score 81–100, distinct questions of the demo
sets at most 66, and questions built on the same short template ("… capital of Mars?" /
"… capital of France?") 84–86. A false positive costs the course staff one rewritten practice
question; a false negative leaks a hidden one; so the threshold sits on the cautious side at
80, and template siblings of a private question are refused on purpose. Paraphrases that
share few words ("How do X and Y differ?") are beyond any lexical check and stay the author's
responsibility.

Scale: the ``reworded`` rule is one ``rapidfuzz.process.cdist`` call per scorer over blocks of
public questions (all cores); the ``padded`` rule indexes each private question under its
rarest tokens, so only pairs that can reach the share are ever compared.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

import numpy as np
import numpy.typing as npt
from rapidfuzz import fuzz, process

from grader.core.text import tokens

__all__ = [
    "DEFAULT_THRESHOLDS",
    "METHOD",
    "ClosestPair",
    "LeakHit",
    "LeakReport",
    "LeakRule",
    "LeakThresholds",
    "QuestionCase",
    "check_leaks",
    "describe_hit",
    "normalized_question",
    "refusal_lines",
    "reworded_similarity",
    "token_share",
]

#: One line naming the method, recorded in the published manifest.
METHOD = (
    "normalised tokens (NFKC, case-fold, accents stripped); exact token match; "
    "padded: share of a private question's distinct tokens found in the public one; "
    "reworded: max(rapidfuzz ratio of token strings, of sorted token strings)"
)

# Cells of one cdist block (public rows × private columns); 4 M float32 cells = 16 MB a block.
_BLOCK_CELLS = 4_000_000


class QuestionCase(Protocol):
    """Anything with a case id and a question (a :class:`grader.core.models.Case`)."""

    @property
    def id(self) -> str: ...

    @property
    def question(self) -> str: ...


class LeakRule(StrEnum):
    ID_COLLISION = "id_collision"
    EXACT = "exact"
    PADDED = "padded"
    REWORDED = "reworded"


@dataclass(frozen=True)
class LeakThresholds:
    """When a pair of questions counts as a leak (see the module docstring)."""

    reworded_similarity: float = 80.0
    padded_min_tokens: int = 4
    padded_min_share: float = 0.9

    def __post_init__(self) -> None:
        if not 0 < self.reworded_similarity <= 100:
            raise ValueError("reworded_similarity must be in (0, 100]")
        if self.padded_min_tokens < 1:
            raise ValueError("padded_min_tokens must be at least 1")
        if not 0 < self.padded_min_share <= 1:
            raise ValueError("padded_min_share must be in (0, 1]")


DEFAULT_THRESHOLDS = LeakThresholds()


@dataclass(frozen=True)
class LeakHit:
    """One public case that gives away one private case, and by which rule."""

    public_id: str
    private_id: str
    rule: LeakRule
    #: 0–100 for the question rules; ``None`` for an id collision.
    similarity: float | None


@dataclass(frozen=True)
class ClosestPair:
    """The most similar public/private pair under the ``reworded`` scorer."""

    public_id: str
    private_id: str
    similarity: float


@dataclass(frozen=True)
class LeakReport:
    """The outcome of a leak check: every hit, and how close the closest pair came."""

    hits: tuple[LeakHit, ...]
    closest: ClosestPair | None
    public_count: int
    private_count: int
    thresholds: LeakThresholds = field(default=DEFAULT_THRESHOLDS)

    @property
    def clean(self) -> bool:
        return not self.hits

    def offending_public_ids(self) -> tuple[str, ...]:
        """Public case ids with at least one hit, in first-hit order."""
        return tuple(dict.fromkeys(hit.public_id for hit in self.hits))


def normalized_question(text: str) -> str:
    """A question's normalised tokens joined by single spaces."""
    return " ".join(tokens(text))


def _sorted_tokens(text: str) -> str:
    return " ".join(sorted(tokens(text)))


def reworded_similarity(public_question: str, private_question: str) -> float:
    """The ``reworded`` score of one pair (what :func:`check_leaks` computes in bulk)."""
    return max(
        fuzz.ratio(normalized_question(public_question), normalized_question(private_question)),
        fuzz.ratio(_sorted_tokens(public_question), _sorted_tokens(private_question)),
    )


def token_share(private_question: str, public_question: str) -> float:
    """Share (0–1) of the private question's distinct tokens that occur in the public one."""
    wanted = set(tokens(private_question))
    if not wanted:
        return 0.0
    return len(wanted & set(tokens(public_question))) / len(wanted)


def _required_shared(distinct_tokens: int, share: float) -> int:
    # A small epsilon so 0.9 × 10 is 9, not 9.000000000000002 rounded up to 10.
    return math.ceil(distinct_tokens * share - 1e-9)


def _exact_hits(public_texts: Sequence[str], private_texts: Sequence[str]) -> set[tuple[int, int]]:
    by_text: dict[str, list[int]] = defaultdict(list)
    for column, text in enumerate(private_texts):
        by_text[text].append(column)
    return {
        (row, column) for row, text in enumerate(public_texts) for column in by_text.get(text, ())
    }


def _padded_hits(
    public_tokens: Sequence[frozenset[str]],
    private_tokens: Sequence[frozenset[str]],
    thresholds: LeakThresholds,
) -> dict[tuple[int, int], float]:
    """Pairs where the public question holds enough of a private question's tokens.

    A private question that may miss ``m`` tokens is indexed under its ``m + 1`` rarest
    tokens: any public question holding all but ``m`` of its tokens holds one of those, so it
    meets the private question in the index, and common words never fan out.
    """
    frequency: Counter[str] = Counter()
    for token_set in (*public_tokens, *private_tokens):
        frequency.update(token_set)
    index: dict[str, list[int]] = defaultdict(list)
    needed: dict[int, int] = {}
    for column, token_set in enumerate(private_tokens):
        if len(token_set) < thresholds.padded_min_tokens:
            continue
        needed[column] = _required_shared(len(token_set), thresholds.padded_min_share)
        allowed_missing = len(token_set) - needed[column]
        rarest = sorted(token_set, key=lambda token: (frequency[token], token))
        for token in rarest[: allowed_missing + 1]:
            index[token].append(column)
    hits: dict[tuple[int, int], float] = {}
    for row, token_set in enumerate(public_tokens):
        candidates = {column for token in token_set for column in index.get(token, ())}
        for column in candidates:
            shared = len(private_tokens[column] & token_set)
            # Nothing added (reordered or trimmed words) is a rewording, not padding.
            if shared >= needed[column] and not token_set <= private_tokens[column]:
                hits[row, column] = round(100 * shared / len(private_tokens[column]), 1)
    return hits


def _ratios(
    publics: Sequence[str], privates: Sequence[str], *, workers: int
) -> npt.NDArray[np.float32]:
    """``fuzz.ratio`` of every public text against every private one (0-100)."""
    return process.cdist(publics, privates, scorer=fuzz.ratio, dtype=np.float32, workers=workers)


def _reworded_hits(
    public_texts: Sequence[str],
    private_texts: Sequence[str],
    public_sorted: Sequence[str],
    private_sorted: Sequence[str],
    *,
    threshold: float,
    workers: int,
) -> tuple[dict[tuple[int, int], float], tuple[int, int, float] | None]:
    """Pairs scoring at least ``threshold``, and the closest pair overall (row, column, score).

    Scores are computed for every pair, blockwise over the public questions; no
    ``score_cutoff`` is passed because it buys nothing measurable for ``ratio`` on questions
    (see ``benchmarks/bench_leak_check.py``) and would hide how close the closest pair came.
    """
    hits: dict[tuple[int, int], float] = {}
    closest: tuple[int, int, float] | None = None
    if not public_texts or not private_texts:
        return hits, closest
    block_rows = max(1, _BLOCK_CELLS // len(private_texts))
    for start in range(0, len(public_texts), block_rows):
        stop = start + block_rows
        # A rewording scores on either form: as written, or with its words sorted.
        scores: npt.NDArray[np.float32] = np.maximum(
            _ratios(public_texts[start:stop], private_texts, workers=workers),
            _ratios(public_sorted[start:stop], private_sorted, workers=workers),
        )
        row, column = divmod(int(np.argmax(scores)), scores.shape[1])
        if closest is None or float(scores[row, column]) > closest[2]:
            closest = (start + row, column, round(float(scores[row, column]), 1))
        rows, columns = np.nonzero(scores >= threshold)
        for row, column in zip(rows.tolist(), columns.tolist(), strict=True):
            hits[start + row, column] = round(float(scores[row, column]), 1)
    return hits, closest


def check_leaks(
    public: Sequence[QuestionCase],
    private: Sequence[QuestionCase],
    thresholds: LeakThresholds = DEFAULT_THRESHOLDS,
    *,
    workers: int = -1,
) -> LeakReport:
    """Compare every public question with every private one; see the module docstring."""
    public_tokens = [tokens(case.question) for case in public]
    private_tokens = [tokens(case.question) for case in private]
    public_texts = [" ".join(words) for words in public_tokens]
    private_texts = [" ".join(words) for words in private_tokens]
    exact = _exact_hits(public_texts, private_texts)
    padded = _padded_hits(
        [frozenset(words) for words in public_tokens],
        [frozenset(words) for words in private_tokens],
        thresholds,
    )
    reworded, closest = _reworded_hits(
        public_texts,
        private_texts,
        [" ".join(sorted(words)) for words in public_tokens],
        [" ".join(sorted(words)) for words in private_tokens],
        threshold=thresholds.reworded_similarity,
        workers=workers,
    )
    private_ids = {case.id for case in private}
    columns_by_row: dict[int, list[int]] = defaultdict(list)
    for row, column in sorted(exact | padded.keys() | reworded.keys()):
        columns_by_row[row].append(column)
    hits: list[LeakHit] = []
    for row, case in enumerate(public):
        if case.id in private_ids:
            hits.append(LeakHit(case.id, case.id, LeakRule.ID_COLLISION, None))
        for column in columns_by_row.get(row, ()):
            if (row, column) in exact:
                rule, similarity = LeakRule.EXACT, 100.0
            elif (row, column) in padded:
                rule, similarity = LeakRule.PADDED, padded[row, column]
            else:
                rule, similarity = LeakRule.REWORDED, reworded[row, column]
            hits.append(LeakHit(case.id, private[column].id, rule, similarity))
    return LeakReport(
        hits=tuple(hits),
        closest=(
            ClosestPair(public[closest[0]].id, private[closest[1]].id, closest[2])
            if closest
            else None
        ),
        public_count=len(public),
        private_count=len(private),
        thresholds=thresholds,
    )


_RULE_WORDS = {
    LeakRule.EXACT: "same question as",
    LeakRule.PADDED: "padded copy of",
    LeakRule.REWORDED: "rewording of",
}


def describe_hit(hit: LeakHit) -> str:
    """What a hit is, naming the private side by id only, never by its question."""
    if hit.rule is LeakRule.ID_COLLISION:
        return "id_collision: a private case has the same id"
    measure = "token share" if hit.rule is LeakRule.PADDED else "similarity"
    return (
        f"{hit.rule.value}: {_RULE_WORDS[hit.rule]} private case {hit.private_id} "
        f"({measure} {hit.similarity:.1f})"
    )


def refusal_lines(report: LeakReport) -> list[str]:
    """One line per offending public case, listing every private case it gives away."""
    by_public: dict[str, list[str]] = defaultdict(list)
    for hit in report.hits:
        by_public[hit.public_id].append(describe_hit(hit))
    return [f"{public_id}: " + "; ".join(found) for public_id, found in by_public.items()]
