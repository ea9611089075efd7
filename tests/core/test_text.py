"""Text normalisation and whole-token matching."""

import random
import re

from grader.core.refusal import is_refusal
from grader.core.text import TokenText, normalize, tokens, words_of_normalized


def test_normalize_folds_case_accents_and_compatibility_forms() -> None:
    """Case, accents and NFKC compatibility characters do not change what a text says."""
    assert normalize("Sobreposição ÉCOLE ﬁle Straße") == "sobreposicao ecole file strasse"


def test_tokens_split_on_punctuation() -> None:
    """Punctuation separates tokens and is dropped."""
    assert tokens("Chunks, overlap; (embeddings)!") == ("chunks", "overlap", "embeddings")


def test_contains_matches_whole_tokens_only() -> None:
    """A term matches whole tokens: 'chunk' is not found inside 'chunking'."""
    text = TokenText("Chunking splits text.")
    assert text.contains("chunking")
    assert not text.contains("chunk")


def test_contains_multi_word_terms_as_consecutive_tokens() -> None:
    """A multi-word concept matches only when its words are adjacent and in order."""
    text = TokenText("Use a Step-Budget and stopping conditions.")
    assert text.contains("step budget")
    assert text.contains("stopping conditions")
    assert not text.contains("conditions stopping")
    assert not text.contains("step conditions")


def test_contains_ignores_case_and_accents_on_both_sides() -> None:
    """Accents and case are ignored in the term as well as in the text."""
    assert TokenText("a SOBREPOSICAO dos chunks").contains("sobreposição")
    assert TokenText("über alles").contains("Uber")


def test_empty_term_never_matches() -> None:
    """A term with no word characters cannot match anything."""
    assert not TokenText("anything").contains("...")


def test_refusal_phrases_in_five_languages() -> None:
    """Refusal language is recognised in English, Portuguese, Spanish, French and German."""
    for text in (
        "I don't know.",
        "Não sei responder a isso.",
        "Lo siento, no sé la respuesta.",
        "Je ne sais pas.",
        "Das weiß ich nicht — ich weiß nicht.",
    ):
        assert is_refusal(TokenText(text)), text


def test_ordinary_answer_is_not_refusal_language() -> None:
    """An explanatory answer is not mistaken for a refusal."""
    assert not is_refusal(TokenText("Chunks overlap so that context is not lost."))


def test_fast_tokeniser_matches_the_word_regex_on_every_ascii_character() -> None:
    """The ASCII fast path splits exactly where ``\\w+`` does, for every ASCII character and
    random mixes of them (a difference would change which words every gate sees)."""
    rng = random.Random(20261201)
    alphabet = [chr(code) for code in range(128)] + ["ab", "Z9", "_", " "] * 16
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert words_of_normalized(text) == tuple(re.findall(r"\w+", text)), repr(text)


def test_normalize_strips_accents_anywhere_in_mixed_text() -> None:
    """Accents are stripped from letters between ASCII text, including combining marks typed
    separately, while other non-ASCII characters stay."""
    assert normalize("Ação — cafe\u0301 naïve “x”") == "acao — cafe naive “x”"


def test_refusal_phrase_must_be_consecutive_words() -> None:
    """All the words of a refusal phrase in the answer, but apart, are not a refusal."""
    assert not is_refusal(TokenText("I know what the scope of the course is; out of it, nothing."))
    assert is_refusal(TokenText("That is out of scope."))
