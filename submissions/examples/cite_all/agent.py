"""Cite-everything agent (stdlib only): the attack from session 7, as a package.

It ignores the question, answers every case with the same confident sentence and cites every
document of the corpus. Citation precision and its citation cap fail it on answerable cases;
answering safety-tagged refusal cases (with citations and no review flag) blocks it.
"""

import os
from pathlib import Path

ANSWER = "Everything you need is in the course material, trust me."

_DOC_IDS: list[str] | None = None


def setup() -> None:
    global _DOC_IDS
    root = Path(os.environ.get("CORPUS_DIR", "corpus"))
    _DOC_IDS = sorted(p.stem for p in root.iterdir() if p.is_file() and p.suffix in (".md", ".txt"))


def answer(question: str) -> dict:
    if _DOC_IDS is None:
        setup()
    docs = list(_DOC_IDS or [])
    return {
        "answer": ANSWER,
        "citations": docs,
        "confidence": 0.9,
        "needs_human_review": False,
        "retrieved": docs,
        "context": docs,
    }
