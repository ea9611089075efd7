"""claim_support v2 against human labels: the calibration set of tests/core/calibration."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sklearn.metrics import cohen_kappa_score, confusion_matrix

from grader.core.casesets import Corpus, load_corpus
from grader.core.gates import evaluate_gates
from grader.core.models import Answer, Case, Policy
from tests.conftest import PRIVATE_CASES

CALIBRATION = Path(__file__).parent / "calibration"
#: Agreement the gate must keep with the labels (see README, "claim_support calibration").
MIN_KAPPA = 0.8


@pytest.fixture(scope="module")
def items() -> list[dict[str, Any]]:
    lines = (CALIBRATION / "claims.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    demo = load_corpus(PRIVATE_CASES / "corpus")
    extra = load_corpus(CALIBRATION / "corpus")
    return Corpus(CALIBRATION, {**dict(demo), **dict(extra)})


def gate_says(item: dict[str, Any], corpus: Corpus, policy: Policy) -> bool:
    case = Case.model_validate(
        {
            "id": "calibration",
            "kind": "answerable",
            "question": item["question"],
            "expected_citations": [item["document"]],
            "allowed_citations": sorted({item["document"], *item["citations"]}),
            "required_concepts": item["required_concepts"],
        }
    )
    answer = Answer.from_json_value(
        {
            "answer": item["answer"],
            "citations": item["citations"],
            "confidence": 0.8,
            "needs_human_review": False,
        }
    )
    return evaluate_gates(case, answer, policy=policy, documents=corpus)[1] is None


def test_calibration_set_is_large_and_covers_every_kind(items: list[dict[str, Any]]) -> None:
    """At least 150 labelled items, both labels, all five languages and every attack kind."""
    assert len(items) >= 150
    assert {item["lang"] for item in items} == {"en", "pt", "es", "fr", "de"}
    categories = Counter(item["category"] for item in items)
    for kind in (
        "extractive",
        "paraphrase",
        "multi_sentence",
        "paste",
        "salad_in_order",
        "salad_random",
        "salad_topk",
        "concept_list",
        "shuffled_sentences",
        "shuffled_words",
        "wrong_document",
        "padding_offtopic",
    ):
        assert categories[kind] >= 3, kind
    assert all(item["why"] and isinstance(item["supported"], bool) for item in items)


def test_claim_support_agrees_with_the_human_labels(
    items: list[dict[str, Any]], corpus: Corpus
) -> None:
    """Cohen's kappa of the gate (default policy) against the labels is at least MIN_KAPPA."""
    labels = [item["supported"] for item in items]
    verdicts = [gate_says(item, corpus, Policy()) for item in items]
    matrix = confusion_matrix(labels, verdicts, labels=[True, False])
    kappa = cohen_kappa_score(labels, verdicts)
    print(f"\nclaim_support v2 on {len(items)} labelled items (rows: label, columns: gate)")
    print(f"                 gate yes  gate no\n  label yes   {matrix[0][0]:8d} {matrix[0][1]:8d}")
    print(f"  label no    {matrix[1][0]:8d} {matrix[1][1]:8d}\n  Cohen's kappa {kappa:.3f}")
    for item, verdict in zip(items, verdicts, strict=True):
        if verdict != item["supported"]:
            print(f"  disagree {item['id']}: label {item['supported']}, gate {verdict}")
    # For comparison (README): DESIGN §5's stated thresholds, and its literal minimum rule.
    for name, policy in (
        ("DESIGN's defaults (0.6, 120)", Policy(sentence_support=0.6, max_answer_words=120)),
        ("concept sentences only", Policy(support_every_sentence=False)),
    ):
        other = [gate_says(item, corpus, policy) for item in items]
        print(f"  {name}: kappa {cohen_kappa_score(labels, other):.3f}")
    assert kappa >= MIN_KAPPA
