"""Text normalisation and whole-token matching."""

from grader.core.refusal import is_refusal
from grader.core.text import TokenText, normalize, tokens


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
