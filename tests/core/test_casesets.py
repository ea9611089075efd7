"""Loading a case set: every validation rule of DESIGN §3, with file, line and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grader.core.casesets import load_case_set
from grader.exceptions import CaseSetError
from tests.conftest import PRIVATE_CASES, write_case_set

GOOD = {
    "id": "c1",
    "kind": "answerable",
    "question": "How do chunks overlap?",
    "expected_citations": ["rag-basics"],
    "required_concepts": [["overlap"]],
}
REFUSAL = {"id": "r1", "kind": "refusal", "question": "Qual foi o placar?"}


def load(tmp_path: Path, cases: list[dict[str, Any]], policy: str = "") -> Any:
    return load_case_set(write_case_set(tmp_path / "set", cases, policy=policy))


def error_of(tmp_path: Path, cases: list[dict[str, Any]], policy: str = "") -> str:
    with pytest.raises(CaseSetError) as info:
        load(tmp_path, cases, policy)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_valid_set_loads_with_a_version_and_counts(tmp_path: Path) -> None:
    """A valid set loads; allowed citations include expected ones."""
    case_set = load(tmp_path, [GOOD, REFUSAL])
    assert case_set.counts() == {"answerable": 1, "refusal": 1}
    assert case_set.cases[0].allowed_citations == ("rag-basics",)
    assert len(case_set.version) == 16


def test_version_changes_with_cases_policy_and_corpus(tmp_path: Path) -> None:
    """The version is a content hash of cases, policy and corpus."""
    root = write_case_set(tmp_path / "s", [GOOD])
    first = load_case_set(root).version
    (root / "policy.toml").write_text("pass_bar = 0.9\n")
    second = load_case_set(root).version
    (root / "corpus" / "rag-basics.md").write_text("Chunks overlap a lot.")
    third = load_case_set(root).version
    assert len({first, second, third}) == 3
    assert load_case_set(root).version == third


def test_unknown_field_names_line_and_field(tmp_path: Path) -> None:
    """An unknown field is refused with its line number and name."""
    message = error_of(tmp_path, [GOOD, {**REFUSAL, "answer_key": "x"}])
    assert "line 2" in message and "unknown field 'answer_key'" in message


def test_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    """A duplicate id is refused naming the first line it was used on."""
    message = error_of(tmp_path, [GOOD, REFUSAL, {**GOOD, "question": "again?"}])
    assert "line 3" in message and "duplicate case id 'c1' (first on line 1)" in message


def test_answerable_without_expected_citation(tmp_path: Path) -> None:
    """An answerable case needs an expected citation."""
    message = error_of(tmp_path, [{**GOOD, "expected_citations": []}])
    assert "line 1" in message and "expected citation" in message


def test_answerable_without_required_concept(tmp_path: Path) -> None:
    """An answerable case needs a required concept group."""
    message = error_of(tmp_path, [{**GOOD, "required_concepts": []}])
    assert "required concept" in message


def test_citation_naming_a_missing_document(tmp_path: Path) -> None:
    """Citations must name corpus documents."""
    message = error_of(tmp_path, [{**GOOD, "allowed_citations": ["nope"]}])
    assert "field 'allowed_citations'" in message and "'nope' is not in the corpus" in message


@pytest.mark.parametrize(
    "extra",
    [
        {"expected_citations": ["rag-basics"]},
        {"allowed_citations": ["rag-basics"]},
        {"required_concepts": [["overlap"]]},
    ],
)
def test_refusal_case_with_citations_or_concepts(tmp_path: Path, extra: dict[str, Any]) -> None:
    """A refusal case cannot carry citations or concepts."""
    message = error_of(tmp_path, [{**REFUSAL, **extra}])
    assert "a refusal case cannot have" in message and next(iter(extra)) in message


def test_bad_provenance_and_kind(tmp_path: Path) -> None:
    """Enumerated fields accept only their values."""
    assert "field 'provenance'" in error_of(tmp_path, [{**GOOD, "provenance": "guess"}])
    assert "field 'kind'" in error_of(tmp_path, [{**GOOD, "kind": "maybe"}])


def test_invalid_json_line(tmp_path: Path) -> None:
    """A line that is not JSON is refused with its number."""
    root = write_case_set(tmp_path / "s", [GOOD])
    with (root / "cases.jsonl").open("a") as handle:
        handle.write("{not json\n")
    with pytest.raises(CaseSetError, match=r"line 2: not valid JSON"):
        load_case_set(root)


def test_bad_policy_value_and_unknown_key(tmp_path: Path) -> None:
    """policy.toml values are checked, and unknown keys are refused."""
    assert "key 'pass_bar'" in error_of(tmp_path / "a", [GOOD], "pass_bar = 1.5\n")
    assert "unknown key 'pass_barr'" in error_of(tmp_path / "b", [GOOD], "pass_barr = 0.5\n")
    assert "key 'feedback'" in error_of(tmp_path / "c", [GOOD], 'feedback = "all"\n')
    assert "not valid TOML" in error_of(tmp_path / "d", [GOOD], "pass_bar = \n")


def test_missing_corpus_and_missing_cases(tmp_path: Path) -> None:
    """A missing corpus folder or cases file is a clear error."""
    root = write_case_set(tmp_path / "s", [GOOD], policy='corpus = "../elsewhere"\n')
    with pytest.raises(CaseSetError, match="corpus folder not found"):
        load_case_set(root)
    with pytest.raises(CaseSetError, match=r"cases\.jsonl: file not found"):
        load_case_set(tmp_path)


def test_corpus_key_points_at_a_shared_corpus(tmp_path: Path) -> None:
    """policy.toml's corpus key names the corpus folder relative to the case set."""
    shared = write_case_set(tmp_path / "shared", [GOOD])
    other = tmp_path / "other"
    other.mkdir()
    (other / "cases.jsonl").write_text(json.dumps(GOOD) + "\n")
    (other / "policy.toml").write_text('corpus = "../shared/corpus"\n')
    assert list(load_case_set(other).corpus) == list(load_case_set(shared).corpus)


def test_unsupported_concept_is_a_warning(tmp_path: Path) -> None:
    """A concept no allowed document contains is reported: the case could never pass."""
    case_set = load(tmp_path, [{**GOOD, "required_concepts": [["embeddings"]]}])
    assert case_set.warnings == ("case c1: no allowed document contains any of ['embeddings']",)


def test_demo_private_set_is_valid() -> None:
    """The shipped demo set loads, with 20+ cases, 12+ answerable and 8+ refusal."""
    case_set = load_case_set(PRIVATE_CASES)
    counts = case_set.counts()
    assert counts["answerable"] >= 12 and counts["refusal"] >= 8
    assert any(case.safety for case in case_set.cases)
    assert case_set.warnings == ()
