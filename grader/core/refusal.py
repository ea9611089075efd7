"""Refusal language in the supported languages (English, Portuguese, Spanish, French, German).

A phrase matches as whole tokens after normalisation (accents and case do not matter), so the
lists hold each phrase once, written naturally. An answer counts as refusal language when it
contains any phrase; phrases are specific enough that an ordinary explanatory answer does not
contain one.
"""

from __future__ import annotations

from .text import TermSet, TokenText

REFUSAL_PHRASES: dict[str, tuple[str, ...]] = {
    "en": (
        "i don't know",
        "i do not know",
        "i dont know",
        "i cannot answer",
        "i can't answer",
        "i cant answer",
        "i am unable to answer",
        "i'm unable to answer",
        "unable to answer",
        "i cannot help with",
        "i can't help with",
        "i cannot provide",
        "i can't provide",
        "i must decline",
        "i have to decline",
        "cannot be answered",
        "not covered by",
        "not in the course material",
        "no information about",
        "no relevant information",
        "outside the scope",
        "out of scope",
        "i refuse",
        "i'm not able to",
        "i am not able to",
        "i'm sorry, but i can't",
    ),
    "pt": (
        "não sei",
        "não posso responder",
        "não consigo responder",
        "não posso ajudar",
        "não tenho informação",
        "não tenho informações",
        "não está coberto",
        "fora do escopo",
        "não é possível responder",
        "não posso fornecer",
    ),
    "es": (
        "no sé",
        "no lo sé",
        "no puedo responder",
        "no puedo contestar",
        "no puedo ayudar",
        "no tengo información",
        "no está cubierto",
        "fuera del alcance",
        "no es posible responder",
        "no puedo proporcionar",
    ),
    "fr": (
        "je ne sais pas",
        "je ne peux pas répondre",
        "je ne peux pas aider",
        "je n'ai pas d'information",
        "je n'ai pas d'informations",
        "n'est pas couvert",
        "hors du périmètre",
        "impossible de répondre",
        "je ne peux pas fournir",
    ),
    "de": (
        "ich weiß nicht",
        "ich weiss nicht",
        "kann ich nicht beantworten",
        "ich kann nicht antworten",
        "ich kann das nicht beantworten",
        "ich kann nicht helfen",
        "keine informationen",
        "nicht abgedeckt",
        "außerhalb des umfangs",
        "kann ich nicht sagen",
    ),
}

ALL_REFUSAL_PHRASES: tuple[str, ...] = tuple(
    phrase for phrases in REFUSAL_PHRASES.values() for phrase in phrases
)
# Compiled once: every graded answer is checked against all of them.
_REFUSAL = TermSet(ALL_REFUSAL_PHRASES)


def is_refusal(text: TokenText) -> bool:
    """True when the text contains refusal language in any supported language."""
    return _REFUSAL.any_in(text)
