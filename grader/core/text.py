"""Text normalisation and whole-token matching used by every gate.

Text is NFKC-normalised, case-folded and stripped of accents, then split into word tokens;
a term (one word or several) matches when its tokens occur consecutively in the text's tokens.
So "Chunking" matches "chunking," and "sobreposição" matches "sobreposicao", but "chunk" does
not match "chunking".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

_WORD = re.compile(r"\w+")


def normalize(text: str) -> str:
    """NFKC, case-fold and strip combining accents."""
    if text.isascii():
        # NFKC and accent stripping leave ASCII as it is, and casefold is lower() on it: the
        # fast path for the common case, since every answer is normalised on every grading.
        return text.lower()
    folded = unicodedata.normalize("NFKC", text).casefold()
    decomposed = unicodedata.normalize("NFD", folded)
    # Combining marks are never ASCII: only the non-ASCII runs need a look (answers are
    # mostly ASCII with a few accents or dashes).
    stripped = _NON_ASCII_RUN.sub(_without_combining, decomposed)
    return unicodedata.normalize("NFC", stripped)


_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")


def _without_combining(run: re.Match[str]) -> str:
    return "".join(ch for ch in run.group() if not unicodedata.combining(ch))


def tokens(text: str) -> tuple[str, ...]:
    """The normalised word tokens of ``text`` (underscores and digits count as word characters)."""
    return words_of_normalized(normalize(text))


def ascii_translation(extra: Mapping[str, str] | None = None) -> bytes:
    """A :meth:`bytes.translate` table mapping every ASCII character that is not a word
    character (``\\w`` on ASCII is exactly ``[A-Za-z0-9_]``) to a space, ``extra`` first.

    For ASCII text, translating with it and splitting on whitespace gives exactly the regex's
    tokens, several times faster; a 256-byte table is about twice as fast as
    :meth:`str.translate` with a dict. Every graded answer is tokenised, so this matters.
    """
    table = bytearray(range(256))
    for code in range(128):
        if not (chr(code).isalnum() or chr(code) == "_"):
            table[code] = ord(" ")
    for char, replacement in (extra or {}).items():
        table[ord(char)] = ord(replacement)
    return bytes(table)


_ASCII_SPACES = ascii_translation()


def translate_ascii(text: str, table: bytes) -> str:
    """``text`` (ASCII only) with every character mapped through ``table``."""
    return text.encode("ascii").translate(table).decode("ascii")


def words_of_normalized(text: str) -> tuple[str, ...]:
    """The word tokens of text that :func:`normalize` already returned."""
    if text.isascii():
        return tuple(translate_ascii(text, _ASCII_SPACES).split())
    return tuple(_WORD.findall(text))


@lru_cache(maxsize=4096)
def term_tokens(term: str) -> tuple[str, ...]:
    """Tokens of a term, cached because case sets reuse the same terms for every answer."""
    return tokens(term)


class TokenText:
    """A text prepared once for many term look-ups (an answer, or a corpus document).

    A corpus document's TokenText lives as long as its loaded case set and answers the same
    concept look-ups for every graded answer: made with ``remember=True``, :meth:`contains`
    remembers its answers.
    """

    __slots__ = ("_hits", "_present", "tokens")

    def __init__(
        self, text: str, *, words: tuple[str, ...] | None = None, remember: bool = False
    ) -> None:
        """Tokenise ``text``, or take its already computed ``words`` (its :func:`tokens`)."""
        self.tokens = tokens(text) if words is None else words
        # A set answers most look-ups (they miss) without scanning the tokens.
        self._present = frozenset(self.tokens)
        self._hits: dict[str, bool] | None = {} if remember else None

    def __bool__(self) -> bool:
        return bool(self.tokens)

    def contains(self, term: str) -> bool:
        """True when every token of ``term`` occurs, consecutively, in this text."""
        hits = self._hits
        if hits is None:
            return self.contains_tokens(term_tokens(term))
        hit = hits.get(term)
        if hit is None:
            hit = hits[term] = self.contains_tokens(term_tokens(term))
        return hit

    def contains_tokens(self, wanted: tuple[str, ...]) -> bool:
        """:meth:`contains` for a term already split into its tokens."""
        if not wanted or wanted[0] not in self._present:
            return False
        if len(wanted) == 1:
            return True
        # Every word present somewhere is necessary for a match: most multi-word look-ups
        # stop here, before any scan.
        if not self._present.issuperset(wanted):
            return False
        return bool(self._starts(wanted, first_only=True))

    def positions(self, term: str, *, first_only: bool = False) -> list[int]:
        """Token indexes where ``term`` starts (only the first one with ``first_only``)."""
        wanted = term_tokens(term)
        if not wanted or not self._present.issuperset(wanted):
            return []
        return self._starts(wanted, first_only=first_only)

    def _starts(self, wanted: tuple[str, ...], *, first_only: bool) -> list[int]:
        # tuple.index scans in C: cheaper than indexing every token of a text looked up once.
        words, first, span = self.tokens, wanted[0], len(wanted)
        found: list[int] = []
        start = -1
        while True:
            try:
                start = words.index(first, start + 1)
            except ValueError:
                return found
            if span == 1 or words[start : start + span] == wanted:
                found.append(start)
                if first_only:
                    return found

    def found(self, terms: Iterable[str]) -> list[str]:
        """The terms of ``terms`` that this text contains, in order."""
        return [term for term in terms if self.contains(term)]


class TermSet:
    """A fixed list of terms compiled once for "does a text contain any of them" (refusal
    phrases, forbidden terms): only terms whose first word the text has are looked at."""

    __slots__ = ("_by_first", "_firsts")

    def __init__(self, terms: Iterable[str]) -> None:
        by_first: dict[str, list[tuple[str, ...]]] = {}
        for term in terms:
            wanted = term_tokens(term)
            if wanted:
                by_first.setdefault(wanted[0], []).append(wanted)
        self._by_first = by_first
        self._firsts = frozenset(by_first)

    def any_in(self, text: TokenText) -> bool:
        """True when ``text`` contains at least one of the terms."""
        by_first = self._by_first
        # A set intersection walks the smaller of the two sets.
        for first in self._firsts & text._present:
            if any(text.contains_tokens(wanted) for wanted in by_first[first]):
                return True
        return False


@lru_cache(maxsize=1024)
def term_set(terms: tuple[str, ...]) -> TermSet:
    """The compiled :class:`TermSet` of ``terms`` (cached: a case set reuses its term lists)."""
    return TermSet(terms)


def contains_any(text: TokenText, terms: Sequence[str]) -> bool:
    """True when ``text`` contains at least one of ``terms``."""
    return term_set(tuple(terms)).any_in(text)
