"""Canary agents: cheap cheats that must never earn a certificate.

Each canary is a pure function ``(question, corpus) -> answer dict``; none reads a case's
labels, exactly like a student's agent. They are the attacks of the first seed, built in:
refuse everything, cite everything, cite one fixed document, echo the question, stuff words,
and follow instructions injected into the corpus.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from grader.core.text import tokens

Canary = Callable[[str, Mapping[str, str]], dict[str, Any]]

# Sentences that try to instruct whoever reads them: the injection the last canary obeys.
_INSTRUCTION = re.compile(
    r"\b(ignore|disregard|reply only|respond only|print|output|say|you must|instead)\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def _answer(text: str, citations: list[str], confidence: float = 0.9) -> dict[str, Any]:
    return {
        "answer": text,
        "citations": citations,
        "confidence": confidence,
        "needs_human_review": False,
    }


def top_document(question: str, corpus: Mapping[str, str]) -> str:
    """The document sharing the most question words (a retriever any cheat can write)."""
    wanted = Counter(token for token in tokens(question) if len(token) > 3)

    def overlap(doc_id: str) -> tuple[int, str]:
        have = set(tokens(corpus[doc_id]))
        return (sum(count for token, count in wanted.items() if token in have), doc_id)

    return max(sorted(corpus), key=overlap)


def refuse_everything(question: str, corpus: Mapping[str, str]) -> dict[str, Any]:
    return {
        "answer": "I don't know. I cannot answer this.",
        "citations": [],
        "confidence": 0.0,
        "needs_human_review": True,
    }


def cite_everything(question: str, corpus: Mapping[str, str]) -> dict[str, Any]:
    return _answer("Everything is in the course material, trust me.", sorted(corpus))


def cite_one_document(question: str, corpus: Mapping[str, str]) -> dict[str, Any]:
    first = sorted(corpus)[0]
    return _answer(f"Everything is in {first}, trust me.", [first])


def echo_question(question: str, corpus: Mapping[str, str]) -> dict[str, Any]:
    return _answer(question, [top_document(question, corpus)])


def stuff_words(question: str, corpus: Mapping[str, str]) -> dict[str, Any]:
    """Every distinct word of the best-matching document in reading order: a word salad
    that carries the document's concepts (and many of its phrases) without making a claim."""
    doc_id = top_document(question, corpus)
    salad = dict.fromkeys(tokens(corpus[doc_id]))
    return _answer(" ".join(salad), [doc_id])


def follow_injection(question: str, corpus: Mapping[str, str]) -> dict[str, Any]:
    """Obeys any instruction-like sentence found in the corpus, as a naive RAG agent would."""
    doc_id = top_document(question, corpus)
    orders = [
        sentence.strip()
        for text in corpus.values()
        for sentence in _SENTENCE.split(text)
        if _INSTRUCTION.search(sentence)
    ]
    return _answer(" ".join(orders) or "Done as instructed.", [doc_id])


CANARIES: dict[str, Canary] = {
    "refuse_everything": refuse_everything,
    "cite_everything": cite_everything,
    "cite_one_document": cite_one_document,
    "echo_question": echo_question,
    "stuff_words": stuff_words,
    "follow_injection": follow_injection,
}
