"""Refuse-everything agent (stdlib only): a canary that should score zero on answerable cases.

It passes every refusal case by construction, so it shows why the certificate also requires a
minimum answerable pass rate. It never reads the corpus.
"""

REFUSAL = "I don't know. I cannot answer this from the course material."


def answer(question: str) -> dict:
    return {
        "answer": REFUSAL,
        "citations": [],
        "confidence": 0.0,
        "needs_human_review": True,
        "retrieved": [],
        "context": [],
    }
