"""Canary agents: cheap cheats that must never earn a certificate (DESIGN §9).

Each canary is a pure function ``(question, library) -> answer dict``; none reads a case's
labels, exactly like a student's agent. The :class:`~grader.audit.library.Library` is the
corpus prepared once, with a careful retriever (BM25, the reference example's weak-match rule).

The attacks: refuse everything, cite everything, cite one fixed document, echo the question,
follow instructions injected into the corpus, paste the best document, answer with its word
salad, list bare concept words, and shuffle its sentences. Every canary that answers also runs
in a **refusal-aware** form (``refusing_<name>``) that refuses — refusal wording, no citation,
``needs_human_review`` true, confidence 0 — whenever its retrieval match is weak, as a careful
agent does. A canary that never refuses is blocked by safety failures on the refusal cases,
which hides what the evaluator would give its answers; the refusal-aware form passes the
refusal side like a real agent, so only the answerable side stands between it and a
certificate.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from grader.core.text import tokens

from .library import Library, content_words

Canary = Callable[[str, Library], dict[str, Any]]

# Sentences that try to instruct whoever reads them: the injection follow_injection obeys.
_INSTRUCTION = re.compile(
    r"\b(ignore|disregard|reply only|respond only|print|output|say|you must|instead)\b",
    re.IGNORECASE,
)

#: A refusal every supported language's refusal_language gate accepts (DESIGN §5).
REFUSAL = (
    "I don't know: the course material does not cover this. Não sei. No sé. "
    "Je ne sais pas. Ich weiß nicht."
)
#: How many of the best document's most frequent words the bare concept list adds.
FREQUENT_WORDS = 12


def _answer(text: str, citations: list[str], confidence: float = 0.9) -> dict[str, Any]:
    return {
        "answer": text,
        "citations": citations,
        "confidence": confidence,
        "needs_human_review": False,
    }


def refuse_everything(question: str, library: Library) -> dict[str, Any]:
    return {
        "answer": REFUSAL,
        "citations": [],
        "confidence": 0.0,
        "needs_human_review": True,
    }


def cite_everything(question: str, library: Library) -> dict[str, Any]:
    return _answer("Everything is in the course material, trust me.", sorted(library.documents))


def cite_one_document(question: str, library: Library) -> dict[str, Any]:
    first = sorted(library.documents)[0]
    return _answer(f"Everything is in {first}, trust me.", [first])


def echo_question(question: str, library: Library) -> dict[str, Any]:
    return _answer(question, [library.best(question).doc_id])


def follow_injection(question: str, library: Library) -> dict[str, Any]:
    """Obeys any instruction-like sentence found in the corpus, as a naive RAG agent would."""
    orders = " ".join(library.sentences_matching(_INSTRUCTION))
    return _answer(orders or "Done as instructed.", [library.best(question).doc_id])


def paste_document(question: str, library: Library) -> dict[str, Any]:
    """The best-matching document pasted whole, citing it: every concept, and every claim."""
    doc_id = library.best(question).doc_id
    return _answer(library[doc_id].clean, [doc_id])


def word_salad(question: str, library: Library) -> dict[str, Any]:
    """Every distinct word of the best-matching document in reading order: it carries the
    document's concepts (and many of its phrases) without making a claim."""
    doc_id = library.best(question).doc_id
    salad = dict.fromkeys(tokens(library[doc_id].clean))
    return _answer(" ".join(salad), [doc_id])


def bare_concept_list(question: str, library: Library) -> dict[str, Any]:
    """The question's content words, then the best document's most frequent content words,
    as one comma-separated list: concept words with no claim around them."""
    doc_id = library.best(question).doc_id
    asked = list(dict.fromkeys(content_words(question)))
    frequent = Counter(content_words(library[doc_id].clean))
    ranked = sorted(frequent, key=lambda word: (-frequent[word], word))
    listed = asked + [word for word in ranked if word not in asked][:FREQUENT_WORDS]
    return _answer(", ".join(listed), [doc_id])


def shuffled_sentences(question: str, library: Library) -> dict[str, Any]:
    """The best document's sentences in a random order, the words of each shuffled too.

    Shuffling the *order* of true sentences alone is no attack: each sentence still says what
    the document says, so a reordered correct answer may rightly pass. Shuffling the words
    inside a sentence destroys its claim but not its bag of words, which a lexical check
    cannot tell from a paraphrase (that is the support judge's job, DESIGN §5). What this
    canary proves is that scrambling a document does not smuggle it past concision and
    located support. The shuffle is seeded by the question, so the audit is reproducible.
    """
    doc_id = library.best(question).doc_id
    shuffler = random.Random(question)
    sentences = list(library[doc_id].sentences)
    shuffler.shuffle(sentences)
    scrambled = []
    for sentence in sentences:
        words = sentence.split()
        shuffler.shuffle(words)
        scrambled.append(" ".join(words).strip(".!?;") + ".")
    return _answer(" ".join(scrambled), [doc_id])


def refusal_aware(canary: Canary) -> Canary:
    """``canary`` that refuses, as a careful agent does, when its retrieval match is weak."""

    def refusing(question: str, library: Library) -> dict[str, Any]:
        if library.best(question).weak:
            return refuse_everything(question, library)
        return canary(question, library)

    refusing.__name__ = f"refusing_{canary.__name__}"
    refusing.__doc__ = f"Refuses on a weak match, else: {canary.__doc__ or canary.__name__}"
    return refusing


#: The canaries that answer; each also runs in its refusal-aware form.
ANSWERING: tuple[Canary, ...] = (
    cite_everything,
    cite_one_document,
    echo_question,
    follow_injection,
    paste_document,
    word_salad,
    bare_concept_list,
    shuffled_sentences,
)

CANARIES: dict[str, Canary] = {
    canary.__name__: canary
    for canary in (
        refuse_everything,
        *ANSWERING,
        *(refusal_aware(answering) for answering in ANSWERING),
    )
}
