"""Located support and concision for claim_support v2 (DESIGN §5), kept apart from the gates.

Words are the gates' tokens (:mod:`.text`). *Content words* are the words outside the stop-word
lists of the five supported languages (PyPI ``stop-words``), lightly stemmed with the Snowball
stemmer (PyPI ``snowballstemmer``) of the cited document's language, so an answer sentence and
the document it is checked against are always stemmed alike. A document's language is the one
whose *distinctive* stop words (those in no other list) it uses most; English on a tie.

Per-document structures (the stem at each token position, stem → positions and frequency,
distinct content stems, language) are built once per document and memoised by the corpus
(:class:`grader.core.casesets.Corpus`), so the gate stays a pure function of its inputs while
grading thousands of answers against one set. Word → stem is memoised per language too.
"""

from __future__ import annotations

import re
import threading
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from functools import lru_cache
from itertools import accumulate, chain
from typing import Any, cast

import snowballstemmer
from stop_words import get_stop_words

from .text import ascii_translation, normalize, tokens, translate_ascii, words_of_normalized

LANGUAGES = ("english", "portuguese", "spanish", "french", "german")
DEFAULT_LANGUAGE = "english"

# Sentence ends: . ! ? ; and their full-width / ideographic forms, and line breaks. Text is
# NFKC-normalised first, which already maps the full-width ASCII forms to . ! ? ;
_ENDS = ".!?;\u3002\uff0e\uff01\uff1f\uff1b\n\r\u2028\u2029\x0b\x0c\x85"
_SENTENCE_END = re.compile(f"[{re.escape(_ENDS)}]+")
# For ASCII text: sentence ends become line breaks and other non-word characters spaces, so
# str.split does the regex's work (the same sentences and words, several times faster).
_ASCII_SENTENCES = ascii_translation(dict.fromkeys(filter(str.isascii, _ENDS), "\n"))


def split_sentences(normalized: str) -> list[tuple[str, ...]]:
    """The word tokens of each sentence of normalised text, skipping sentences without words."""
    if normalized.isascii():
        ends_marked = translate_ascii(normalized, _ASCII_SENTENCES)
        parts = [part.split() for part in ends_marked.split("\n")]
        return [tuple(words) for words in parts if words]
    parts2 = (words_of_normalized(part) for part in _SENTENCE_END.split(normalized))
    return [words for words in parts2 if words]


def _stop_lists() -> dict[str, frozenset[str]]:
    lists = {}
    for language in LANGUAGES:
        words: set[str] = set()
        for word in get_stop_words(language):
            words.update(tokens(word))
        lists[language] = frozenset(words)
    return lists


_STOP_LISTS = _stop_lists()
STOP_WORDS: frozenset[str] = frozenset().union(*_STOP_LISTS.values())
# Stop words found in exactly one language's list: evidence for that language.
_DISTINCTIVE = {
    language: words.difference(*(other for name, other in _STOP_LISTS.items() if name != language))
    for language, words in _STOP_LISTS.items()
}

# A Snowball stemmer object keeps its working string between calls, and the server regrades
# in threads: each thread stems with its own stemmers (no lock to contend for).
_THREAD = threading.local()


def _stemmer(language: str) -> Any:
    stemmers: dict[str, Any] | None = getattr(_THREAD, "stemmers", None)
    if stemmers is None:
        stemmers = _THREAD.stemmers = {}
    found = stemmers.get(language)
    if found is None:
        found = stemmers[language] = snowballstemmer.stemmer(language)
    return found


@lru_cache(maxsize=200_000)
def stem(language: str, word: str) -> str:
    """The Snowball stem of a normalised word in ``language`` (memoised: corpora repeat words)."""
    return str(_stemmer(language).stemWord(word))


#: Per language, word → its stem, or "" for a stop word: one dict look-up per answer word on
#: the grading path. Cleared when it grows past the bound, so answers full of made-up words
#: cannot grow it without limit.
_CONTENT_STEMS: dict[str, dict[str, str]] = {language: {} for language in LANGUAGES}
_CONTENT_STEMS_BOUND = 200_000


def detect_language(words: Iterable[str]) -> str:
    """The supported language whose distinctive stop words occur most often; English on a tie."""
    counts = dict.fromkeys(LANGUAGES, 0)
    for word in words:
        for language, distinctive in _DISTINCTIVE.items():
            if word in distinctive:
                counts[language] += 1
    best = max(LANGUAGES, key=lambda language: counts[language])
    tied = sum(count == counts[best] for count in counts.values()) > 1
    return DEFAULT_LANGUAGE if tied or not counts[best] else best


def _content_stem(language: str, word: str) -> str:
    """The stem of ``word``, or "" for a stop word, remembered in ``_CONTENT_STEMS``."""
    table = _CONTENT_STEMS[language]
    if len(table) >= _CONTENT_STEMS_BOUND:
        table.clear()
    stemmed = table[word] = "" if word in STOP_WORDS else stem(language, word)
    return stemmed


def content_stems(words: Iterable[str], language: str) -> list[str]:
    """The stems of the words that are not stop words, in order."""
    table = _CONTENT_STEMS[language]
    found = []
    for word in words:
        stemmed = table.get(word)
        if stemmed is None:
            stemmed = _content_stem(language, word)
        if stemmed:
            found.append(stemmed)
    return found


def content_stem_set(words: Sequence[str], language: str) -> frozenset[str]:
    """The distinct stems of the words that are not stop words (as :func:`content_stems`)."""
    table = _CONTENT_STEMS[language]
    # One C-level pass when every word is known, as it is once a corpus's words were seen.
    seen = set(map(table.get, words))
    if None in seen:
        found = {
            known if (known := table.get(word)) is not None else _content_stem(language, word)
            for word in words
        }
    else:
        found = cast(set[str], seen)
    found.discard("")
    return frozenset(found)


class SupportIndex:
    """A document prepared for located-support and coverage checks."""

    __slots__ = ("frequency", "language", "positions", "stem_at", "stems")

    def __init__(self, text: str) -> None:
        words = tokens(text)
        self.language = detect_language(words)
        #: The stem of the content word at each token position ("" for a stop word).
        self.stem_at = ["" if word in STOP_WORDS else stem(self.language, word) for word in words]
        #: Each content stem's token positions, ascending.
        positions: dict[str, list[int]] = {}
        for index, stemmed in enumerate(self.stem_at):
            if stemmed:
                positions.setdefault(stemmed, []).append(index)
        self.positions = positions
        #: How often each content stem occurs.
        self.frequency = {stemmed: len(found) for stemmed, found in positions.items()}
        #: The document's distinct content words (stemmed).
        self.stems = frozenset(positions)


class AnswerSentences:
    """An answer split into sentences, and which sentence each token of the whole answer is in.

    Sentence ends are never word characters, so the sentences' tokens, concatenated, are
    exactly the answer's tokens: a concept found at token ``i`` lies in ``sentence_at(i)``.
    """

    __slots__ = ("_starts", "_stems", "sentences")

    def __init__(self, text: str, *, normalized: str | None = None) -> None:
        """Split ``text``, or its already computed :func:`normalize` form ``normalized``."""
        self.sentences = split_sentences(normalize(text) if normalized is None else normalized)
        self._starts: list[int] | None = None
        self._stems: dict[str, list[frozenset[str]]] = {}

    def sentence_at(self, token: int) -> int:
        """The sentence holding the answer's ``token``-th word."""
        if self._starts is None:
            # Token index of each sentence's first word; built only when a concept is found.
            self._starts = list(
                accumulate((len(words) for words in self.sentences[:-1]), initial=0)
            )
        return bisect_right(self._starts, token) - 1

    @property
    def sentence_of(self) -> list[int]:
        """The sentence of every token of the answer, in order."""
        return [number for number, words in enumerate(self.sentences) for _ in words]

    def words(self) -> tuple[str, ...]:
        """Every word of the answer, in order (the same as :func:`tokens` of its text)."""
        return tuple(chain.from_iterable(self.sentences))

    def stems(self, language: str) -> list[frozenset[str]]:
        """Distinct content stems of each sentence, stemmed as ``language``."""
        found = self._stems.get(language)
        if found is None:
            found = self._stems[language] = [
                content_stem_set(words, language) for words in self.sentences
            ]
        return found


def window_holds(wanted: frozenset[str], document: SupportIndex, window: int, needed: int) -> bool:
    """True when at least ``needed`` distinct ``wanted`` stems occur together in ``window``
    consecutive document words."""
    present = wanted & document.stems
    if len(present) < needed:
        return False
    if needed <= 1:
        return True
    # A window holding ``needed`` of the m present stems misses at most m - needed of them, so
    # it holds an occurrence of one of the m - needed + 1 rarest ("anchors") and lies within
    # ``window`` words of it. Around each anchor occurrence the window centred on it is tried
    # first (an extracted sentence is found there: one slice and one set intersection, in C);
    # the whole neighbourhood holding enough stems is necessary for any window, so the exact
    # sweep runs only when some neighbourhood could hold one.
    ranked = sorted(present, key=document.frequency.__getitem__)
    stem_at = document.stem_at
    half = window // 2
    possible = False
    for word in ranked[: len(present) - needed + 1]:
        for anchor in document.positions[word]:
            start = max(0, anchor - half)
            if len(present.intersection(stem_at[start : start + window])) >= needed:
                return True
            if not possible:
                start = max(0, anchor - window + 1)
                neighbourhood = stem_at[start : anchor + window]
                possible = len(present.intersection(neighbourhood)) >= needed
    return possible and _sweep(present, document, window, needed)


def _sweep(present: frozenset[str], document: SupportIndex, window: int, needed: int) -> bool:
    """The exact check: a two-pointer sweep over the merged positions of the ``present``
    stems, stopping as soon as a window holds ``needed`` of them."""
    positions = document.positions
    events: list[int] = []
    for word in present:
        events += positions[word]
    events.sort()
    stem_at = document.stem_at
    counts = dict.fromkeys(present, 0)
    distinct = start = 0
    for position in events:
        word = stem_at[position]
        if not counts[word]:
            distinct += 1
        counts[word] += 1
        horizon = position - window
        while events[start] <= horizon:
            gone = stem_at[events[start]]
            counts[gone] -= 1
            if not counts[gone]:
                distinct -= 1
            start += 1
        if distinct >= needed:
            return True
    return False


def sentence_supported(
    answer: AnswerSentences,
    sentence: int,
    documents: Sequence[SupportIndex],
    *,
    max_words: int,
    min_share: float,
) -> bool:
    """At most ``max_words`` words, and at least ``min_share`` of its content words within one
    window of ``max(20, 3 × its word count)`` words of one of ``documents``."""
    length = len(answer.sentences[sentence])
    if length > max_words:
        return False
    window = max(20, 3 * length)
    for document in documents:
        wanted = answer.stems(document.language)[sentence]
        if not wanted:
            return True  # no content word: the sentence claims nothing that needs support
        # Integer comparison, so 0.6 × 5 words needs exactly 3 (no float rounding surprises).
        needed = -(-round(min_share * 1_000_000) * len(wanted) // 1_000_000)
        if window_holds(wanted, document, window, needed):
            return True
    return False


def cited_coverage(answer: AnswerSentences, documents: Sequence[SupportIndex]) -> tuple[int, int]:
    """(distinct content words of the cited documents the answer uses, how many there are)."""
    if len(documents) == 1:
        # The common case, without copying the document's vocabulary.
        (document,) = documents
        in_answer = set().union(*answer.stems(document.language))
        return len(document.stems.intersection(in_answer)), len(document.stems)
    vocabulary: set[str] = set()
    used: set[str] = set()
    for document in documents:
        vocabulary |= document.stems
        used |= document.stems.intersection(set().union(*answer.stems(document.language)))
    return len(used), len(vocabulary)
