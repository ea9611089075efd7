"""Located support and concision for claim_support v2 (DESIGN §5), kept apart from the gates.

Words are the gates' tokens (:mod:`.text`). *Content words* are the words outside the stop-word
lists of the five supported languages (PyPI ``stop-words``), lightly stemmed with the Snowball
stemmer (PyPI ``snowballstemmer``) of the cited document's language, so an answer sentence and
the document it is checked against are always stemmed alike. A document's language is the one
whose *distinctive* stop words (those in no other list) it uses most; English on a tie.

Per-document structures (stem → token positions, distinct content stems, language) are built
once per document and memoised by the corpus (:class:`grader.core.casesets.Corpus`), so the
gate stays a pure function of its inputs while grading thousands of answers against one set.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from functools import lru_cache
from itertools import chain

import snowballstemmer
from stop_words import get_stop_words

from .text import normalize, tokens, words_of_normalized

LANGUAGES = ("english", "portuguese", "spanish", "french", "german")
DEFAULT_LANGUAGE = "english"

# Sentence ends: . ! ? ; and their full-width / ideographic forms, and line breaks. Text is
# NFKC-normalised first, which already maps the full-width ASCII forms to . ! ? ;
_SENTENCE_END = re.compile(r"[.!?;\u3002\uff0e\uff01\uff1f\uff1b\n\r\u2028\u2029\x0b\x0c\x85]+")


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

_STEMMERS = {language: snowballstemmer.stemmer(language) for language in LANGUAGES}
# A Snowball stemmer object keeps its working string between calls: serialise the (cached,
# so rare) calls, because the server regrades in threads.
_STEM_LOCK = threading.Lock()


@lru_cache(maxsize=200_000)
def stem(language: str, word: str) -> str:
    """The Snowball stem of a normalised word in ``language`` (memoised: corpora repeat words)."""
    with _STEM_LOCK:
        return str(_STEMMERS[language].stemWord(word))


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


def content_stems(words: Iterable[str], language: str) -> list[str]:
    """The stems of the words that are not stop words, in order."""
    return [stem(language, word) for word in words if word not in STOP_WORDS]


class SupportIndex:
    """A document prepared for located-support and coverage checks."""

    __slots__ = ("language", "positions", "stems")

    def __init__(self, text: str) -> None:
        words = tokens(text)
        self.language = detect_language(words)
        positions: dict[str, list[int]] = {}
        for index, word in enumerate(words):
            if word not in STOP_WORDS:
                positions.setdefault(stem(self.language, word), []).append(index)
        self.positions = positions
        #: The document's distinct content words (stemmed).
        self.stems = frozenset(positions)


class AnswerSentences:
    """An answer split into sentences, with the sentence of each token of the whole answer.

    Sentence ends are never word characters, so the sentences' tokens, concatenated, are
    exactly the answer's tokens: a concept found at token ``i`` lies in ``sentence_of[i]``.
    """

    __slots__ = ("_stems", "sentence_of", "sentences")

    def __init__(self, text: str) -> None:
        self.sentences: list[tuple[str, ...]] = []
        self.sentence_of: list[int] = []
        for part in _SENTENCE_END.split(normalize(text)):
            words = words_of_normalized(part)
            if words:
                self.sentence_of.extend([len(self.sentences)] * len(words))
                self.sentences.append(words)
        self._stems: dict[tuple[int, str], frozenset[str]] = {}

    def words(self) -> tuple[str, ...]:
        """Every word of the answer, in order (the same as :func:`tokens` of its text)."""
        return tuple(chain.from_iterable(self.sentences))

    def stems(self, sentence: int, language: str) -> frozenset[str]:
        """Distinct content stems of one sentence, stemmed as ``language``."""
        key = (sentence, language)
        found = self._stems.get(key)
        if found is None:
            found = self._stems[key] = frozenset(content_stems(self.sentences[sentence], language))
        return found


def best_window_share(wanted: frozenset[str], document: SupportIndex, window: int) -> int:
    """The most distinct ``wanted`` stems found together in ``window`` consecutive document
    words (a two-pointer sweep over the merged positions of the wanted stems)."""
    events = sorted(
        (position, word) for word in wanted for position in document.positions.get(word, ())
    )
    counts: dict[str, int] = {}
    best = start = 0
    for position, word in events:
        counts[word] = counts.get(word, 0) + 1
        while events[start][0] <= position - window:
            gone = events[start][1]
            counts[gone] -= 1
            if not counts[gone]:
                del counts[gone]
            start += 1
        best = max(best, len(counts))
    return best


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
        wanted = answer.stems(sentence, document.language)
        if not wanted:
            return True  # no content word: the sentence claims nothing that needs support
        # Integer comparison, so 0.6 × 5 words needs exactly 3 (no float rounding surprises).
        needed = -(-round(min_share * 1_000_000) * len(wanted) // 1_000_000)
        if len(wanted & document.stems) < needed:
            continue
        if best_window_share(wanted, document, window) >= needed:
            return True
    return False


def cited_coverage(answer: AnswerSentences, documents: Sequence[SupportIndex]) -> tuple[int, int]:
    """(distinct content words of the cited documents the answer uses, how many there are)."""
    vocabulary: set[str] = set()
    used: set[str] = set()
    for document in documents:
        vocabulary |= document.stems
        for sentence in range(len(answer.sentences)):
            used |= answer.stems(sentence, document.language) & document.stems
    return len(used), len(vocabulary)
