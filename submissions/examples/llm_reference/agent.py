"""LLM reference agent: retrieve, prompt a model with the retrieved passages, cite what it used.

1. Retrieval, refusal rules and passage choice come from ``retrieval.py`` (the reference
   agent's module, unchanged): BM25 over the corpus, injected paragraphs quarantined, a
   refusal when the question is an attack or the corpus does not cover it.
2. The chosen passages go into a prompt, each tagged with its document id, and the model
   ``course-chat`` writes the answer. The agent reaches it the way any OpenAI-compatible
   client does, through ``OPENAI_BASE_URL`` with ``OPENAI_API_KEY`` — the grader's model
   gateway (README, "Model gateway") — using only the standard library's ``urllib``, so it runs
   in every sandbox.
3. It cites exactly the documents whose passages the answer uses. When the model cannot be
   reached or says it does not know, the agent refuses rather than guessing.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import retrieval

MODEL = "course-chat"
SYSTEM = (
    "You answer questions about the course using only the passages given. Quote the "
    "sentences that answer the question. If the passages do not answer it, say I don't know."
)


def setup() -> None:
    retrieval.setup()


def chat(messages: list[dict[str, str]]) -> str:
    """One chat completion through the gateway; raises OSError when it fails."""
    base = os.environ.get("OPENAI_BASE_URL", "")
    if not base:
        raise OSError("no model gateway in this run")
    body = {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 300}
    request = urllib.request.Request(
        base.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode("utf-8"),
        headers={
            "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", ""),
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=8) as response:
            data = json.load(response)
    except urllib.error.HTTPError as exc:  # 429 over budget, 503 no upstream, ...
        raise OSError(f"model call refused: HTTP {exc.code}") from None
    return str(data["choices"][0]["message"]["content"])


def passages(question: str) -> tuple[list[tuple[str, str]], list[str], float] | None:
    """The (document id, sentence) passages to show the model, the ranking, and coverage;
    None when the agent must refuse (the reference agent's rules)."""
    index = retrieval._INDEX
    assert index is not None
    query = retrieval.terms(question)
    ranked = index.rank(query)
    retrieved = [doc.doc_id for _, doc in ranked[:5]]
    if retrieval.looks_injected(question) or retrieval.asks_personal_data(question) or not ranked:
        return None
    top_score, top = ranked[0]
    coverage = index.coverage(query, top)
    matched = set(query) & set(top.tf)
    if (
        top_score < retrieval.MIN_SCORE
        or coverage < retrieval.MIN_COVERAGE
        or len(matched) < retrieval.MIN_MATCHED_TERMS
    ):
        return None
    chosen = [(top.doc_id, s) for s in retrieval._best_window(top, set(query), index.idf)]
    if len(ranked) > 1:
        second_score, second = ranked[1]
        if second_score >= retrieval.SECOND_CITATION_RATIO * top_score:
            chosen += [
                (second.doc_id, s)
                for s in retrieval._best_window(second, set(query), index.idf)[:1]
            ]
    return (chosen, retrieved, coverage) if chosen else None


def answer(question: str) -> dict:
    if retrieval._INDEX is None:
        setup()
    found = passages(question)
    retrieved = [doc.doc_id for _, doc in retrieval._INDEX.rank(retrieval.terms(question))[:5]]
    if found is None:
        return retrieval._refusal(question, retrieved)
    chosen, retrieved, coverage = found
    prompt = "\n".join(f"[{doc_id}] {sentence}" for doc_id, sentence in chosen)
    try:
        text = chat(
            [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Passages:\n{prompt}\nQuestion: {question}"},
            ]
        ).strip()
    except (OSError, KeyError, ValueError, TypeError):
        return retrieval._refusal(question, retrieved)
    used: list[str] = []
    for doc_id, sentence in chosen:
        if sentence in text and doc_id not in used:
            used.append(doc_id)
    if not used or retrieval.looks_injected(text):
        return retrieval._refusal(question, retrieved)
    return {
        "answer": text,
        "citations": used,
        "confidence": round(min(0.85, 0.5 + 0.3 * coverage), 2),
        "needs_human_review": False,
        "retrieved": retrieved,
        "context": list(dict.fromkeys(doc_id for doc_id, _ in chosen)),
    }
