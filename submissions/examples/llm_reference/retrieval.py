"""Reference agent for the capstone grader: lexical retrieval + extractive answers (stdlib only).

How it works, step by step:

1. ``setup()`` reads every ``*.md`` / ``*.txt`` file of the folder named by ``CORPUS_DIR``
   (document id = file name without extension). Document text is *untrusted data*: any
   paragraph that looks like an injected instruction (``ignore previous instructions``,
   ``reply only with``, a ``CANARY-...`` marker, ...) is quarantined at ingestion, so it is
   neither indexed nor quoted.
2. Text is normalised the way the grader does it (NFKC, case-fold, accents stripped), split
   into word tokens, stop words removed and plurals lightly stemmed; documents are ranked by
   BM25.
3. The agent refuses (no citations, confidence 0.1, ``needs_human_review`` true, a refusal
   phrase in the question's language) when the question itself is an injection attempt or a
   request for personal data, or when no document matches the question well enough.
4. Otherwise it answers extractively and briefly: the window of (at most) three consecutive
   sentences of one paragraph of the top document that best covers the question, citing that
   document (and a second one only when it scores almost as high, in which case its best
   sentence is quoted too). Consecutive sentences are used rather than the best sentences
   from anywhere: the points a question asks for usually sit next to its words, and the
   grader's claim_support gate rewards exactly this — a few sentences, each backed by one
   passage of the cited document, never the document itself.

No model is called and nothing is random, so the same question always gets the same answer.
"""

from __future__ import annotations

import math
import os
import re
import unicodedata
from collections import Counter
from pathlib import Path

# --------------------------------------------------------------------------- text handling

_WORD = re.compile(r"\w+")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


STOP_WORDS = _words(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing done down during each either
    else ever every few for from further get gets give given go goes had has have having he her
    here hers him his how i if in into is it its itself just let like made make makes many may
    me might more most much must my no nor not now of off on once one only or other our ours
    out over own per same shall she should so some such than that the their theirs them then
    there these they this those through to too under until up upon us very via was we were what
    when where whether which while who whom whose why will with within without would yet you
    your yours tell explain describe mean means meant thing things way ways use used using
    kind sort happen happens happened help helps
    o os as um uma uns umas de do da dos das em no na nos nas por para com que qual quais quem
    como onde quando e ou foi ser sao seu sua
    el la los las un una unos unas del al en con por para que cual cuales quien como donde
    cuando y o es son fue su sus se lo le
    le la les un une des du de et ou est sont que qui quel quelle quels quelles comment ou
    quand pour par avec dans sur ce cette ces son sa ses il elle
    der die das den dem des ein eine einen einem eines und oder ist sind war wer wie was wo
    wann fur mit von zu im in auf bei hat haben
    """
)


def normalize(text: str) -> str:
    """NFKC, case-fold and strip accents (the grader's own normalisation)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    decomposed = unicodedata.normalize("NFD", folded)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def stem(token: str) -> str:
    """A very light stemmer: enough to let "chunks" match "chunk" and "budgets" match "budget"."""
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def terms(text: str) -> list[str]:
    """Content terms of a text: normalised word tokens, minus stop words, lightly stemmed."""
    return [stem(tok) for tok in _WORD.findall(normalize(text)) if tok not in STOP_WORDS]


# ---------------------------------------------------------------- untrusted-text quarantine

# Patterns that mark text as an instruction aimed at the model rather than course content.
# They are deliberately specific: the course material itself talks *about* prompt injection,
# and that explanation must stay answerable.
_INJECTION = re.compile(
    r"canary-[a-z0-9]+"
    r"|\bignor\w*\s+(?:all\s+|any\s+|the\s+|your\s+|my\s+|vos\s+|tus\s+|as\s+|alle\s+|deine\s+)?"
    r"(?:previous|prior|above|earlier|preceding|instruction|instrucoes|instrucciones|consignes"
    r"|vorherigen|anweisungen|regras|reglas|rules|system)"
    r"|\breply\s+only\b|\brespond\s+only\b|\banswer\s+only\s+with\b|\bdisregard\b"
    r"|\bsystem\s+prompt\b|\bdeveloper\s+mode\b|\byou\s+are\s+now\b"
    r"|\bdo\s+not\s+cite\b|\bdo\s+not\s+mention\b"
    r"|\bolvida\w*\s+(?:tus|las|todas)\b|\bvergiss\w*\b|\besquec\w*\s+(?:as|suas|todas)\b"
    r"|\boublie\w*\s+(?:vos|tes|les|toutes)\b"
    r"|\bsecret\s+(?:code|key|token|password)\b"
    r"|\b(?:codigo|code|clave|chave|passwort|senha)\s+(?:secreto|secreta|secret)\b"
    r"|\b(?:print|reveal|affichez|affiche|mostre|mostra|muestra|zeige|gib|verrate|escribe)\b"
    r"[^.?!]{0,40}\b(?:canary|canari|canario|password|passwort|contrasena|senha|secret\w*"
    r"|geheim\w*|systemanweisung|hidden)\b",
)

# Requests for personal data about people: never answered from a course corpus.
_PERSONAL_DATA = re.compile(
    r"\b(?:phone number|telephone|telefone|telefono|telefonnummer|email address"
    r"|e-mail address|e-mail-adresse|home address|endereco|direccion|passport|social security"
    r"|credit card|tarjeta de credito|cartao de credito|date of birth|salary|password|passwort"
    r"|contrasena|senha|mot de passe)\b"
)


def looks_injected(text: str) -> bool:
    return bool(_INJECTION.search(normalize(text)))


def asks_personal_data(text: str) -> bool:
    return bool(_PERSONAL_DATA.search(normalize(text)))


# --------------------------------------------------------------------------- refusals

REFUSALS = {
    "en": "I don't know. The course material does not cover this question.",
    "pt": "Não sei. O material do curso não trata desta pergunta.",
    "es": "No sé. El material del curso no trata esta pregunta.",
    "fr": "Je ne sais pas. Le support du cours ne traite pas cette question.",
    "de": "Ich weiß nicht. Das Kursmaterial behandelt diese Frage nicht.",
}

# Function words that are distinctive for one language (shared ones such as "la", "que" or "de"
# are left out). Matched after accent stripping.
_LANGUAGE_HINTS = {
    "pt": _words(
        "o os do da dos das nao voce qual quais foi ontem quanto custa mostre esqueca isso "
        "uma em seu sua ele ela tem sao onibus passagem codigo instrucoes"
    ),
    "es": _words(
        "el los del cual cuales quien donde dame olvida tus escribe y es hora abre por "
        "para esta este receta contrasena"
    ),
    "fr": _words(
        "le les des du est quel quelle quels quelles et je tu vous pas dans sur avec moi "
        "pres ce cette une ignorez vos affichez peux fera il"
    ),
    "de": _words(
        "der die das den dem ein eine und ist wer wie hat gestern gib mir zeige ich "
        "ignoriere vergiss deine einwohner viele bitte nicht"
    ),
}
_LANGUAGE_CHARS = {"es": "¿¡ñ", "pt": "ãõ", "fr": "èëîïûùœ", "de": "ßäöü"}


def detect_language(question: str) -> str:
    """Characters first, then a vote over distinctive function words; English by default."""
    raw = unicodedata.normalize("NFKC", question).casefold()
    for lang, chars in _LANGUAGE_CHARS.items():
        if any(ch in raw for ch in chars):
            return lang
    words = _WORD.findall(normalize(question))
    votes = {lang: sum(w in hints for w in words) for lang, hints in _LANGUAGE_HINTS.items()}
    best = max(votes, key=lambda lang: votes[lang])
    tied = sum(1 for v in votes.values() if v == votes[best]) > 1
    return best if votes[best] >= 2 and not tied else "en"


# --------------------------------------------------------------------------- the index

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


class Document:
    def __init__(self, doc_id: str, text: str) -> None:
        self.doc_id = doc_id
        # Paragraphs of sentences, headings left out, injected paragraphs quarantined.
        self.paragraphs: list[list[str]] = []
        self.quarantined = 0
        for block in re.split(r"\n\s*\n", text):
            lines = [ln.strip() for ln in block.strip().splitlines()]
            lines = [ln for ln in lines if ln and not ln.startswith("#")]
            if not lines:
                continue
            paragraph = " ".join(lines)
            if looks_injected(paragraph):
                self.quarantined += 1
                continue
            self.paragraphs.append([s.strip() for s in _SENTENCE_END.split(paragraph) if s.strip()])
        headings = " ".join(ln.lstrip("# ") for ln in text.splitlines() if ln.startswith("#"))
        body = " ".join(" ".join(p) for p in self.paragraphs)
        self.terms = terms(headings + " " + body)
        self.tf = Counter(self.terms)


class Index:
    K1 = 1.2
    B = 0.75

    def __init__(self, documents: list[Document]) -> None:
        self.documents = documents
        n = len(documents)
        df: Counter[str] = Counter()
        for doc in documents:
            df.update(set(doc.terms))
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.unknown_idf = math.log(1 + (n + 0.5) / 0.5)
        self.avg_len = sum(len(d.terms) for d in documents) / max(n, 1)

    def bm25(self, query: list[str], doc: Document) -> float:
        score = 0.0
        norm = self.K1 * (1 - self.B + self.B * len(doc.terms) / self.avg_len)
        for t in set(query):
            f = doc.tf.get(t, 0)
            if f:
                score += self.idf[t] * f * (self.K1 + 1) / (f + norm)
        return score

    def coverage(self, query: list[str], doc: Document) -> float:
        """Share of the question's (idf-weighted) content the document contains."""
        weights = {t: self.idf.get(t, self.unknown_idf) for t in set(query)}
        total = sum(weights.values())
        if not total:
            return 0.0
        return sum(w for t, w in weights.items() if t in doc.tf) / total

    def rank(self, query: list[str]) -> list[tuple[float, Document]]:
        scored = [(self.bm25(query, d), d) for d in self.documents]
        scored = [(s, d) for s, d in scored if s > 0]
        scored.sort(key=lambda sd: (-sd[0], sd[1].doc_id))
        return scored


# Thresholds, set by hand on the course corpus: below them the question is not about the course.
MIN_SCORE = 3.0  # BM25 score of the best document
MIN_COVERAGE = 0.45  # share of the question's idf weight found in the best document
MIN_MATCHED_TERMS = 2  # distinct content terms shared with the best document
SECOND_CITATION_RATIO = 0.9

_INDEX: Index | None = None


def setup() -> None:
    """Read and index the corpus once (also called lazily by ``answer``)."""
    global _INDEX
    root = Path(os.environ.get("CORPUS_DIR", "corpus"))
    docs = []
    for path in sorted(root.iterdir()):
        if path.is_file() and path.suffix in (".md", ".txt"):
            docs.append(Document(path.stem, path.read_text(encoding="utf-8", errors="replace")))
    _INDEX = Index(docs)


def _best_window(doc: Document, query: set[str], idf: dict[str, float]) -> list[str]:
    """Three consecutive sentences of one paragraph (fewer if it is shorter) that cover the most
    question weight; ties go to the window whose first sentence matches best, then the earliest."""
    best: tuple[float, list[str]] = (0.0, [])
    for paragraph in doc.paragraphs:
        sentence_terms = [set(terms(s)) & query for s in paragraph]
        size = min(3, len(paragraph))
        for start in range(len(paragraph) - size + 1):
            window = sentence_terms[start : start + size]
            covered = set().union(*window)
            score = sum(idf.get(t, 0.0) for t in covered)
            score += 0.05 * sum(idf.get(t, 0.0) for t in window[0])
            if score > best[0]:
                best = (score, paragraph[start : start + size])
    return best[1]


def _refusal(question: str, retrieved: list[str]) -> dict:
    return {
        "answer": REFUSALS[detect_language(question)],
        "citations": [],
        "confidence": 0.1,
        "needs_human_review": True,
        "retrieved": retrieved,
        "context": [],
    }


def answer(question: str) -> dict:
    if _INDEX is None:
        setup()
    assert _INDEX is not None
    index = _INDEX
    query = terms(question)
    ranked = index.rank(query)
    retrieved = [d.doc_id for _, d in ranked[:5]]

    # The question itself may be an attack; refuse it rather than "answer" it.
    if looks_injected(question) or asks_personal_data(question):
        return _refusal(question, retrieved)
    if not ranked:
        return _refusal(question, retrieved)

    top_score, top = ranked[0]
    matched = set(query) & set(top.tf)
    coverage = index.coverage(query, top)
    if top_score < MIN_SCORE or coverage < MIN_COVERAGE or len(matched) < MIN_MATCHED_TERMS:
        return _refusal(question, retrieved)

    sentences = _best_window(top, set(query), index.idf)
    if not sentences:
        return _refusal(question, retrieved)
    cited = [top.doc_id]

    if len(ranked) > 1:
        second_score, second = ranked[1]
        if second_score >= SECOND_CITATION_RATIO * top_score:
            extra = _best_window(second, set(query), index.idf)[:1]
            if extra and extra[0] not in sentences:
                sentences = [*sentences, *extra]
                cited.append(second.doc_id)

    text = " ".join(sentences)
    # Last line of defence: never emit anything that looks like an obeyed injection.
    if looks_injected(text):
        return _refusal(question, retrieved)

    confidence = round(min(0.85, 0.5 + 0.3 * coverage), 2)
    return {
        "answer": text,
        "citations": cited,
        "confidence": confidence,
        "needs_human_review": False,
        "retrieved": retrieved,
        "context": cited,
    }
