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
    folded = unicodedata.normalize("NFKC", text).casefold()
    decomposed = unicodedata.normalize("NFD", folded)
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return unicodedata.normalize("NFC", stripped)


def tokens(text: str) -> tuple[str, ...]:
    """The normalised word tokens of ``text`` (underscores and digits count as word characters)."""
    return tuple(_WORD.findall(normalize(text)))


@lru_cache(maxsize=4096)
def term_tokens(term: str) -> tuple[str, ...]:
    """Tokens of a term, cached because case sets reuse the same terms for every answer."""
    return tokens(term)


class TokenText:
    """A text prepared once for many term look-ups (an answer, or a corpus document)."""

    __slots__ = ("_first", "tokens")

    def __init__(self, text: str) -> None:
        self.tokens = tokens(text)
        first: dict[str, list[int]] = {}
        for index, token in enumerate(self.tokens):
            first.setdefault(token, []).append(index)
        self._first = first

    def __bool__(self) -> bool:
        return bool(self.tokens)

    def contains(self, term: str) -> bool:
        """True when every token of ``term`` occurs, consecutively, in this text."""
        return bool(self.positions(term, first_only=True))

    def positions(self, term: str, *, first_only: bool = False) -> list[int]:
        """Token indexes where ``term`` starts (only the first one with ``first_only``)."""
        wanted = term_tokens(term)
        if not wanted:
            return []
        span = len(wanted)
        found = []
        for start in self._first.get(wanted[0], ()):
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
