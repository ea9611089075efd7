"""Retrieval metrics and the which-half-broke diagnosis (DESIGN §7).

Conventions, declared because they are part of the result: the evaluated unit is the document;
relevant documents are a case's ``expected_citations`` (binary relevance, gain 1); K is
:data:`K` and a ranking shorter than K is scored as if padded with non-relevant documents
(Precision@K divides by K); duplicates in a ranking count once, at their first rank; NDCG uses
the log2(rank + 1) discount and the ideal ranking of the relevant set; reciprocal rank is 0 when
no relevant document is ranked. Only answerable cases whose answer reported ``retrieved`` are
averaged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from .models import Answer, Case, CaseKind, Diagnosis

K = 5


def _dedupe(ranking: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ranking))


def recall_at_k(ranking: Sequence[str], relevant: set[str], k: int = K) -> float:
    top = set(_dedupe(ranking)[:k])
    return len(top & relevant) / len(relevant) if relevant else 0.0


def precision_at_k(ranking: Sequence[str], relevant: set[str], k: int = K) -> float:
    top = _dedupe(ranking)[:k]
    return sum(doc in relevant for doc in top) / k


def reciprocal_rank(ranking: Sequence[str], relevant: set[str]) -> float:
    for rank, doc in enumerate(_dedupe(ranking), start=1):
        if doc in relevant:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranking: Sequence[str], relevant: set[str], k: int = K) -> float:
    gains = [1.0 if doc in relevant else 0.0 for doc in _dedupe(ranking)[:k]]
    dcg = sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, start=1))
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(relevant), k) + 1))
    return dcg / ideal if ideal else 0.0


def case_metrics(case: Case, answer: Answer, k: int = K) -> dict[str, float] | None:
    """Retrieval metrics of one answerable case, or None when the agent reported no ranking."""
    if case.kind is not CaseKind.ANSWERABLE or answer.retrieved is None:
        return None
    relevant = set(case.expected_citations)
    ranking = answer.retrieved
    return {
        f"recall@{k}": recall_at_k(ranking, relevant, k),
        f"precision@{k}": precision_at_k(ranking, relevant, k),
        "mrr": reciprocal_rank(ranking, relevant),
        f"ndcg@{k}": ndcg_at_k(ranking, relevant, k),
    }


def mean_metrics(per_case: Iterable[dict[str, float]]) -> dict[str, float] | None:
    """Arithmetic mean of each metric over the cases that have one."""
    rows = list(per_case)
    if not rows:
        return None
    means = {name: sum(row[name] for row in rows) / len(rows) for name in rows[0]}
    means["cases"] = float(len(rows))
    return means


def diagnose(case: Case, answer: Answer) -> Diagnosis | None:
    """Which half broke on a failed answerable case, when the agent reported its retrieval."""
    if case.kind is not CaseKind.ANSWERABLE or answer.retrieved is None:
        return None
    expected = set(case.expected_citations)
    if not expected & set(answer.retrieved):
        return Diagnosis.RETRIEVAL_MISS
    if answer.context is not None and not expected <= set(answer.context):
        return Diagnosis.CONTEXT_DROP
    return Diagnosis.GENERATION
