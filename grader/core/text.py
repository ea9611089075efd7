"""Text normalisation and whole-token matching used by every gate.

Text is NFKC-normalised, case-folded and stripped of accents, then split into word tokens;
a term (one word or several) matches when its tokens occur consecutively in the text's tokens.
So "Chunking" matches "chunking," and "sobreposição" matches "sobreposicao", but "chunk" does
not match "chunking".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
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
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return unicodedata.normalize("NFC", stripped)


def tokens(text: str) -> tuple[str, ...]:
    """The normalised word tokens of ``text`` (underscores and digits count as word characters)."""
    return words_of_normalized(normalize(text))


def words_of_normalized(text: str) -> tuple[str, ...]:
    """The word tokens of text that :func:`normalize` already returned."""
    return tuple(_WORD.findall(text))


@lru_cache(maxsize=4096)
def term_tokens(term: str) -> tuple[str, ...]:
    """Tokens of a term, cached because case sets reuse the same terms for every answer."""
    return tokens(term)


class TokenText:
    """A text prepared once for many term look-ups (an answer, or a corpus document)."""

    __slots__ = ("_first", "_present", "tokens")

    def __init__(self, text: str, *, words: tuple[str, ...] | None = None) -> None:
        """Tokenise ``text``, or take its already computed ``words`` (its :func:`tokens`)."""
        self.tokens = tokens(text) if words is None else words
        # A set answers most look-ups (they miss); token positions are built only on a hit.
        self._present = frozenset(self.tokens)
        self._first: dict[str, list[int]] | None = None

    def __bool__(self) -> bool:
        return bool(self.tokens)

    def contains(self, term: str) -> bool:
        """True when every token of ``term`` occurs, consecutively, in this text."""
        wanted = term_tokens(term)
        # Most look-ups (refusal phrases, forbidden terms) miss on the first word: answer
        # those without building anything, since every grading makes dozens of them.
        if not wanted or wanted[0] not in self._present:
            return False
        return bool(self.positions(term, first_only=True))

    def positions(self, term: str, *, first_only: bool = False) -> list[int]:
        """Token indexes where ``term`` starts (only the first one with ``first_only``)."""
        wanted = term_tokens(term)
        if not wanted:
            return []
        if wanted[0] not in self._present:
            return []
        if self._first is None:
            first: dict[str, list[int]] = {}
            for index, token in enumerate(self.tokens):
                first.setdefault(token, []).append(index)
            self._first = first
        span = len(wanted)
        found = []
        for start in self._first[wanted[0]]:
            if self.tokens[start : start + span] == wanted:
                found.append(start)
                if first_only:
                    break
        return found

    def found(self, terms: Iterable[str]) -> list[str]:
        """The terms of ``terms`` that this text contains, in order."""
        return [term for term in terms if self.contains(term)]


def contains_any(text: TokenText, terms: Sequence[str]) -> bool:
    """True when ``text`` contains at least one of ``terms``."""
    return any(text.contains(term) for term in terms)
