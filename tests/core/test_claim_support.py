"""claim_support v2 (DESIGN §5): concepts, located support and concision, on the demo corpus."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grader.core.casesets import Corpus, load_case_set, load_corpus
from grader.core.gates import GATES_VERSION, evaluate_gates
from grader.core.models import Case, ClaimFailure, Gate, Policy
from grader.core.support import AnswerSentences, detect_language, window_holds
from grader.core.text import tokens
from grader.exceptions import CaseSetError
from tests.conftest import PRIVATE_CASES, make_answer, make_case, write_case_set

OVERLAP_CASE: dict[str, Any] = {
    "question": "Why do consecutive chunks share some overlap?",
    "expected_citations": ["rag-basics"],
    "allowed_citations": ["rag-basics", "agent-loops"],
    "required_concepts": [["overlap"], ["split point", "straddles a boundary"]],
}
SET_CASE = {**OVERLAP_CASE, "id": "c1", "kind": "answerable", "allowed_citations": ["rag-basics"]}
EXTRACTIVE = (
    "Overlap keeps a sentence that straddles a boundary intact in at least one chunk, so an "
    "answer is never cut in half at the split point."
)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load_corpus(PRIVATE_CASES / "corpus")


def claim(
    corpus: Corpus,
    text: str,
    *,
    citations: tuple[str, ...] = ("rag-basics",),
    policy: Policy | None = None,
    **case: Any,
) -> ClaimFailure | bool | None:
    """The claim_support failure (None when it passes) of ``text`` on the overlap case."""
    gates, failure = evaluate_gates(
        make_case(**{**OVERLAP_CASE, **case}),
        make_answer(answer=text, citations=list(citations)),
        policy=policy or Policy(),
        documents=corpus,
    )
    assert gates[Gate.CLAIM_SUPPORT] is (failure is None)
    return failure


def test_concise_extractive_answer_passes(corpus: Corpus) -> None:
    """One sentence of the cited document holding both concepts passes claim_support."""
    assert claim(corpus, EXTRACTIVE) is None


def test_a_light_paraphrase_with_the_document_words_passes(corpus: Corpus) -> None:
    """Reordered words and other inflections (stemming) of one passage still count as support."""
    text = (
        "Chunks overlap so that a sentence straddles a boundary without being cut at a split point."
    )
    assert claim(corpus, text) is None


def test_missing_concept_is_reported_first(corpus: Corpus) -> None:
    """Without the second concept group the reason is missing_concept."""
    text = "Overlap repeats the last fifty tokens of one chunk at the start of the next."
    assert claim(corpus, text) is ClaimFailure.MISSING_CONCEPT


def test_concept_only_in_an_uncited_document_is_missing(corpus: Corpus) -> None:
    """Correct sentences citing the wrong document: its concepts are not in the cited one."""
    assert claim(corpus, EXTRACTIVE, citations=("agent-loops",)) is ClaimFailure.MISSING_CONCEPT


def test_sentence_assembled_from_all_over_the_document_is_unsupported(corpus: Corpus) -> None:
    """Words from far-apart passages of one document make a sentence no window supports."""
    text = (
        "Overlap straddles a boundary at the split point while BM25 hybrid search embeds "
        "cosine vectors, training data and context budget rankings."
    )
    assert claim(corpus, text) is ClaimFailure.UNSUPPORTED_SENTENCE


def test_every_sentence_with_content_words_must_be_supported(corpus: Corpus) -> None:
    """By default a correct sentence next to an unsupported one fails: the whole answer must
    follow from the passage, not only the sentences holding the concepts."""
    assert claim(corpus, EXTRACTIVE + " Thanks for asking.") is None  # no content word
    padded = EXTRACTIVE + " Also, the moon landing used hybrid cosine budgets on training rankings."
    assert claim(corpus, padded) is ClaimFailure.UNSUPPORTED_SENTENCE
    assert claim(corpus, EXTRACTIVE + " Thanks; the moon is made of cheese.") is (
        ClaimFailure.UNSUPPORTED_SENTENCE
    )


def test_without_support_every_sentence_only_concept_sentences_are_judged(
    corpus: Corpus,
) -> None:
    """support_every_sentence = false is DESIGN §5's minimum: each group needs one occurrence
    in a supported sentence, and sentences without a concept are not judged."""
    literal = Policy(support_every_sentence=False)
    padded = EXTRACTIVE + " Also, the moon landing used hybrid cosine budgets on training rankings."
    assert claim(corpus, padded, policy=literal) is None
    unsupported_first = "Overlap hybrid cosine vectors budget training split point rankings."
    assert claim(corpus, unsupported_first, policy=literal) is ClaimFailure.UNSUPPORTED_SENTENCE


def test_sentence_longer_than_max_sentence_words_is_unsupported(corpus: Corpus) -> None:
    """A run-on sentence is unsupported whatever its words, at the policy's length."""
    assert claim(corpus, EXTRACTIVE, policy=Policy(max_sentence_words=20)) is (
        ClaimFailure.UNSUPPORTED_SENTENCE
    )
    assert claim(corpus, EXTRACTIVE, policy=Policy(max_sentence_words=30)) is None


def test_sentence_support_threshold_is_the_policy_share(corpus: Corpus) -> None:
    """With 4 content words of 5 in the passage, 0.8 passes and 0.9 fails."""
    text = "Overlap keeps a sentence intact at the split point, zebra."  # 4 of 5 in the passage
    assert claim(corpus, text, policy=Policy(sentence_support=0.8)) is None
    assert claim(corpus, text, policy=Policy(sentence_support=0.9)) is (
        ClaimFailure.UNSUPPORTED_SENTENCE
    )


def test_answer_longer_than_max_answer_words_is_too_long(corpus: Corpus) -> None:
    """Concision: the policy's word cap, or the case's own max_answer_words before it."""
    assert claim(corpus, EXTRACTIVE, policy=Policy(max_answer_words=20)) is ClaimFailure.TOO_LONG
    assert claim(corpus, EXTRACTIVE, policy=Policy(max_answer_words=20), max_answer_words=40) is (
        None
    )
    assert claim(corpus, EXTRACTIVE, max_answer_words=10) is ClaimFailure.TOO_LONG


def test_pasted_document_is_too_long(corpus: Corpus) -> None:
    """The whole cited document pasted as the answer fails concision."""
    assert claim(corpus, corpus["rag-basics"]) is ClaimFailure.TOO_LONG


def test_using_most_of_a_documents_vocabulary_is_too_long() -> None:
    """Under the word cap, an answer using over half the cited vocabulary fails concision;
    documents with fewer than 40 distinct content words are exempt."""
    words = [f"term{i}" for i in range(60)]
    document = ". ".join(" ".join(words[i : i + 6]) for i in range(0, 60, 6)) + "."
    small = Corpus(Path("/nonexistent"), {"big": document, "small": " ".join(words[:30])})
    case = make_case(
        expected_citations=["big"],
        allowed_citations=["big", "small"],
        required_concepts=[["term0"]],
    )
    for cited, text, expected in (
        (
            "big",
            ". ".join(" ".join(words[i : i + 6]) for i in range(0, 36, 6)),
            ClaimFailure.TOO_LONG,
        ),
        ("big", ". ".join(" ".join(words[i : i + 6]) for i in range(0, 24, 6)), None),
        ("small", " ".join(words[:20]), None),
    ):
        answer = make_answer(answer=text, citations=[cited])
        _, failure = evaluate_gates(case, answer, policy=Policy(), documents=small)
        assert failure is expected, (cited, failure)


@pytest.mark.parametrize("separator", [". ", "! ", "? ", "; ", "\n", "。", "．", "；", "！"])
def test_sentences_split_at_every_documented_end(separator: str) -> None:
    """. ! ? ; their full-width forms, the ideographic full stop and line breaks end sentences."""
    sentences = AnswerSentences(f"Chunks overlap{separator}Vectors embed meaning")
    assert sentences.sentences == [("chunks", "overlap"), ("vectors", "embed", "meaning")]
    assert sentences.sentence_of == [0, 0, 1, 1, 1]


def test_window_check_agrees_with_a_scan_of_every_window(corpus: Corpus) -> None:
    """The fast located-support check (anchored windows, then a sweep) finds a window exactly
    when scanning every window of the document does, for random stem sets, windows and
    thresholds (and for sets taken from one passage, as extracted sentences are)."""
    rng = random.Random(20261201)
    for doc_id in sorted(corpus):
        document = corpus.support_index(doc_id)
        vocabulary = sorted(document.stems)
        size = len(document.stem_at)
        for _ in range(150):
            if rng.random() < 0.5:
                start = rng.randrange(size)
                passage = document.stem_at[start : start + rng.randint(3, 40)]
                wanted = {word for word in passage if word} | {"zzz-not-in-it"}
            else:
                wanted = set(rng.sample(vocabulary, rng.randint(1, 12)))
            wanted_set = frozenset(wanted)
            window, needed = rng.randint(1, 120), rng.randint(0, len(wanted_set) + 1)
            scan = needed == 0 or any(
                len(wanted_set.intersection(document.stem_at[max(0, end - window + 1) : end + 1]))
                >= needed
                for end in range(size)
            )
            assert window_holds(wanted_set, document, window, needed) is scan


@pytest.mark.parametrize(
    "text",
    [
        "Overlap keeps a sentence intact. Vectors embed meaning; done!\nNext line? yes",
        "A sobreposição mantém a frase — inteira… Não? Sí. Straße。ＡＢ１２；über_alles",
        "...!!  ;; \n\n",
        "snake_case, 3.14 and e.g. v2.0 i.e. the end",
    ],
)
def test_sentence_split_and_tokeniser_agree_on_the_words(text: str) -> None:
    """The sentences' words, in order, are the answer's tokens: the gates that look at
    sentences and those that look at tokens see the same words (ASCII and Unicode paths)."""
    assert AnswerSentences(text).words() == tokens(text)


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("The chunks are split before the retriever sees them.", "english"),
        ("Os pedaços são divididos antes de o recuperador os ver.", "portuguese"),
        ("Los fragmentos se dividen antes de que el buscador los vea.", "spanish"),
        ("Les morceaux sont découpés avant que le moteur ne les voie.", "french"),
        ("Die Abschnitte werden geteilt, bevor der Suchdienst sie sieht.", "german"),
    ],
)
def test_document_language_comes_from_its_stop_words(text: str, language: str) -> None:
    """Each supported language is recognised from its distinctive stop words."""
    assert detect_language(AnswerSentences(text).sentences[0]) == language


def test_answer_in_the_documents_language_is_supported() -> None:
    """A Portuguese answer to a Portuguese document: stop words and stems of that language."""
    document = (
        "A sobreposição repete as últimas cinquenta palavras de um pedaço no início do seguinte. "
        "Assim, uma frase que atravessa a fronteira fica inteira em pelo menos um pedaço."
    )
    corpus = Corpus(Path("/nonexistent"), {"rag-pt": document})
    case = make_case(
        expected_citations=["rag-pt"],
        allowed_citations=["rag-pt"],
        required_concepts=[["sobreposicao"], ["fronteira"]],
    )
    good = "A sobreposição mantém inteira a frase que atravessa a fronteira dos pedaços."
    salad = "Sobreposição fronteira cinquenta palavras início seguinte frase inteira assim pedaço"
    for text, expected in ((good, None), (salad + " " + salad, ClaimFailure.UNSUPPORTED_SENTENCE)):
        answer = make_answer(answer=text, citations=["rag-pt"])
        policy = Policy(max_sentence_words=15)
        assert evaluate_gates(case, answer, policy=policy, documents=corpus)[1] is expected


def policy_error(tmp_path: Path, text: str) -> str:
    root = write_case_set(tmp_path, [SET_CASE])
    (root / "policy.toml").write_text(text)
    with pytest.raises(CaseSetError) as info:
        load_case_set(root)
    return str(info.value)


@pytest.mark.parametrize(
    "line",
    [
        "sentence_support = 1.5",
        "sentence_support = -0.1",
        "max_cited_coverage = 0",
        "max_cited_coverage = 1.2",
        "max_answer_words = 0",
        "max_sentence_words = 0",
        'max_answer_words = "many"',
        'support_every_sentence = "yes"',
        "support_every_sentence = 1",
    ],
)
def test_out_of_range_claim_support_keys_name_the_key(tmp_path: Path, line: str) -> None:
    """Each new policy key is range-checked with a one-line error naming it."""
    message = policy_error(tmp_path, line + "\n")
    assert f"key '{line.split()[0]}'" in message and "\n" not in message


@pytest.mark.parametrize("command", ["check-cases", "grade"])
def test_cli_refuses_an_out_of_range_threshold_with_status_2(tmp_path: Path, command: str) -> None:
    """`grader grade` and `grader check-cases` end in one line and status 2 on sentence_support 1.5."""
    root = write_case_set(tmp_path / "set", [SET_CASE])
    (root / "policy.toml").write_text("sentence_support = 1.5\n")
    args = [root] if command == "check-cases" else [tmp_path, "--cases", root, "--sandbox", "none"]
    result = subprocess.run(
        [sys.executable, "-m", "grader", command, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "sentence_support" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_case_may_set_max_answer_words_but_a_refusal_may_not(tmp_path: Path) -> None:
    """max_answer_words is a case field of answerable cases only."""
    assert make_case(max_answer_words=30).max_answer_words == 30
    with pytest.raises(ValueError, match="max_answer_words"):
        Case.model_validate(
            {"id": "r1", "kind": "refusal", "question": "q?", "max_answer_words": 30}
        )


def test_version_covers_the_new_keys_and_the_gates_version(tmp_path: Path) -> None:
    """Setting a claim_support key changes the case-set version; the gates' version is hashed in."""
    root = write_case_set(tmp_path / "set", [SET_CASE])
    before = load_case_set(root).version
    (root / "policy.toml").write_text("sentence_support = 0.7\n")
    after = load_case_set(root)
    assert after.version != before and after.policy.sentence_support == 0.7
    (root / "policy.toml").write_text("support_every_sentence = false\n")
    literal = load_case_set(root)
    assert literal.version not in {before, after.version}
    assert literal.policy.support_every_sentence is False
    assert GATES_VERSION == "2"
