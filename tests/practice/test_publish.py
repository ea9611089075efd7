"""``grader practice publish``, run as a real process: leak refusals, bad input and the output."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from grader import __version__
from grader.cli.helpers import EXIT_AUDIT_FAILED
from grader.core.casesets import load_case_set
from grader.core.text import tokens
from grader.exceptions import PublishError
from grader.practice.publish import PUBLISHED_CORPUS_COMMENT, public_policy_text
from tests.conftest import PRIVATE_CASES, REPO, V1_LIKE_CLAIM_SUPPORT, copy_case_set

PRACTICE_CASES = REPO / "practice_cases"
GRADER = [sys.executable, "-m", "grader"]
EXIT_REFUSED = 4


def publish(
    public: Path, out: Path, *extra: str, private: Path = PRIVATE_CASES
) -> subprocess.CompletedProcess[str]:
    command = [*GRADER, "practice", "publish", "--private", str(private), "--public", str(public)]
    return subprocess.run(
        [*command, "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def copy_practice_set(target: Path, extra_cases: Sequence[Mapping[str, object]] = ()) -> Path:
    """A copy of the shipped practice set with its corpus key made absolute, plus extra cases."""
    shutil.copytree(PRACTICE_CASES, target)
    policy = target / "policy.toml"
    policy.write_text(
        re.sub(
            r'(?m)^corpus = ".*"$',
            f'corpus = "{(PRIVATE_CASES / "corpus").as_posix()}"',
            policy.read_text(encoding="utf-8"),
        ),
        encoding="utf-8",
    )
    with (target / "cases.jsonl").open("a", encoding="utf-8") as cases:
        for case in extra_cases:
            cases.write(json.dumps(case, ensure_ascii=False) + "\n")
    return target


def private_question(case_id: str) -> str:
    return load_case_set(PRIVATE_CASES).by_id()[case_id].question


def assert_no_private_question_text(output: str) -> None:
    """No run of four consecutive tokens of any private question appears in ``output``."""
    seen = " ".join(tokens(output))
    for case in load_case_set(PRIVATE_CASES).cases:
        words = tokens(case.question)
        for start in range(max(1, len(words) - 3)):
            fragment = " ".join(words[start : start + 4])
            assert fragment not in seen, f"private text of {case.id} leaked: {fragment!r}"


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_shipped_practice_set_publishes_with_a_complete_manifest(tmp_path: Path) -> None:
    """The repo's practice set publishes; the folder stands alone and the manifest is right."""
    out = tmp_path / "site" / "practice"
    result = publish(PRACTICE_CASES, out)
    assert result.returncode == 0, result.stderr
    assert "published practice set" in result.stdout
    assert sorted(path.name for path in out.iterdir()) == [
        "README.md",
        "cases.jsonl",
        "corpus",
        "manifest.json",
        "policy.toml",
    ]
    assert (out / "cases.jsonl").read_bytes() == (PRACTICE_CASES / "cases.jsonl").read_bytes()
    assert sorted(path.name for path in (out / "corpus").iterdir()) == sorted(
        path.name for path in (PRIVATE_CASES / "corpus").iterdir()
    )
    policy = tomllib.loads((out / "policy.toml").read_text(encoding="utf-8"))
    assert "corpus" not in policy
    source_policy = tomllib.loads((PRACTICE_CASES / "policy.toml").read_text(encoding="utf-8"))
    assert policy == {key: value for key, value in source_policy.items() if key != "corpus"}

    published = load_case_set(out)
    assert published.corpus.root == (out / "corpus").resolve()
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["format"] == 1
    assert manifest["version"] == published.version
    assert manifest["grader_version"] == __version__
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", manifest["published_at"])
    counts = manifest["counts"]
    assert counts["cases"] == len(published.cases) >= 10
    assert counts["by_kind"] == published.counts()
    assert counts["by_slice"]["lang:en"] == sum("lang:en" in c.slices for c in published.cases)
    assert counts["documents"] == len(published.corpus)
    leak = manifest["leak_check"]
    assert leak["hits"] == 0
    assert leak["private_cases"] == len(load_case_set(PRIVATE_CASES).cases)
    assert leak["closest_similarity"] < leak["thresholds"]["reworded_similarity"]
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    assert set(manifest["files"]) == set(snapshot(out)) - {"manifest.json"}
    assert published.version in (out / "README.md").read_text(encoding="utf-8")
    assert [path.name for path in out.parent.iterdir()] == ["practice"]  # no staging left


def test_published_manifest_carries_no_private_question_or_id(tmp_path: Path) -> None:
    """Everything published is free of private question text and private case ids."""
    out = tmp_path / "out"
    assert publish(PRACTICE_CASES, out).returncode == 0
    published = "\n".join(data.decode() for name, data in snapshot(out).items() if "/" not in name)
    assert_no_private_question_text(published)
    for case in load_case_set(PRIVATE_CASES).cases:
        assert not re.search(rf"\b{re.escape(case.id)}\b", published), case.id


def test_copy_with_one_private_question_reworded_is_refused(tmp_path: Path) -> None:
    """Adding a reworded private question refuses the set, names both ids, writes nothing."""
    public = copy_practice_set(
        tmp_path / "public",
        [
            {
                "id": "p16",
                "kind": "answerable",
                "question": "Which stopping conditions does an agent loop need?",
                "expected_citations": ["agent-loops"],
                "required_concepts": [["budget"]],
            }
        ],
    )
    out = tmp_path / "out"
    result = publish(public, out)
    assert result.returncode == EXIT_REFUSED, result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [public]
    assert "refused" in result.stderr and "nothing was written" in result.stderr
    offending = [line for line in result.stderr.splitlines() if line.startswith("  ")]
    assert offending == [offending[0]]
    assert re.fullmatch(
        r"  p16: reworded: rewording of private case c05 \(similarity \d+\.\d\)", offending[0]
    )
    assert result.stdout == ""
    assert_no_private_question_text(result.stdout + result.stderr)


def test_refusal_lists_every_offending_case_without_private_text(tmp_path: Path) -> None:
    """Exact, accent/case variants, padded and refusal copies are each listed by id."""
    extra = [
        {"id": "p16", "kind": "refusal", "question": private_question("r03").upper()},
        {"id": "p17", "kind": "refusal", "question": "Wíe vièle Einwohner hat HAMBURG"},
        {
            "id": "p18",
            "kind": "refusal",
            "question": "Be honest: " + private_question("r07") + " I need it today.",
        },
        {"id": "p19", "kind": "refusal", "question": "What is the capital of Mars, roughly?"},
    ]
    public = copy_practice_set(tmp_path / "public", extra)
    result = publish(public, tmp_path / "out")
    assert result.returncode == EXIT_REFUSED
    listed = {line.split(":")[0].strip() for line in result.stderr.splitlines()[1:]}
    assert listed == {"p16", "p17", "p18", "p19"}
    assert "p16: exact" in result.stderr and "p18: padded" in result.stderr
    assert_no_private_question_text(result.stderr)


def test_refusal_leaves_an_existing_out_folder_untouched(tmp_path: Path) -> None:
    """A refused publication with --replace does not touch a previous publication."""
    out = tmp_path / "out"
    assert publish(PRACTICE_CASES, out).returncode == 0
    before = snapshot(out)
    public = copy_practice_set(
        tmp_path / "public",
        [{"id": "p16", "kind": "refusal", "question": private_question("r01")}],
    )
    result = publish(public, out, "--replace")
    assert result.returncode == EXIT_REFUSED, result.stderr
    assert snapshot(out) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out", "public"]


def test_public_id_colliding_with_a_private_id_is_refused(tmp_path: Path) -> None:
    """A public case reusing a private case id is refused even with a fresh question."""
    public = copy_practice_set(
        tmp_path / "public",
        [{"id": "r05", "kind": "refusal", "question": "Who composed the Moonlight Sonata?"}],
    )
    result = publish(public, tmp_path / "out")
    assert result.returncode == EXIT_REFUSED
    assert "r05: id_collision" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_set_whose_audit_fails_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """A leak-free practice set whose claim_support checks concepts only (a pasted document
    passes) is not published: one line, status 5, no output folder and no staging left."""
    public = copy_case_set(PRACTICE_CASES, tmp_path / "public", extra_policy=V1_LIKE_CLAIM_SUPPORT)
    out = tmp_path / "out"
    result = publish(public, out)
    assert result.returncode == EXIT_AUDIT_FAILED, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "evaluator audit fails" in lines[0] and "nothing was written" in lines[0]
    assert result.stdout == ""
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [public]


def test_invalid_public_set_is_one_line_bad_input(tmp_path: Path) -> None:
    """A public set the loader rejects ends with one line naming the line and status 2."""
    public = copy_practice_set(tmp_path / "public", [{"id": "p16", "kind": "refusal"}])
    result = publish(public, tmp_path / "out")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "public set" in lines[0] and "line 16" in lines[0]
    assert not (tmp_path / "out").exists()


def test_missing_private_set_is_one_line_bad_input(tmp_path: Path) -> None:
    """A missing private set is bad input, not a pass."""
    result = publish(PRACTICE_CASES, tmp_path / "out", private=tmp_path / "nowhere")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "private set" in result.stderr
    assert not (tmp_path / "out").exists()


def test_previous_publication_is_replaced_only_with_replace(tmp_path: Path) -> None:
    """Republishing over a publication needs --replace, which swaps the whole folder."""
    out = tmp_path / "out"
    assert publish(PRACTICE_CASES, out).returncode == 0
    (out / "stray.txt").write_text("left over")
    refused = publish(PRACTICE_CASES, out)
    assert refused.returncode == 2
    assert "--replace" in refused.stderr
    assert (out / "stray.txt").is_file()
    replaced = publish(PRACTICE_CASES, out, "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert not (out / "stray.txt").exists()
    assert (out / "manifest.json").is_file()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]


def test_replace_refuses_a_folder_that_is_not_a_publication(tmp_path: Path) -> None:
    """--replace never deletes a non-empty folder that holds no published set."""
    out = tmp_path / "home"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    result = publish(PRACTICE_CASES, out, "--replace")
    assert result.returncode == 2
    assert "not a published practice set" in result.stderr
    assert snapshot(out) == {"notes.txt": b"precious"}


def test_empty_out_folder_is_filled(tmp_path: Path) -> None:
    """An existing empty --out folder is used as is."""
    out = tmp_path / "out"
    out.mkdir()
    assert publish(PRACTICE_CASES, out).returncode == 0
    assert (out / "manifest.json").is_file()


def test_out_inside_an_input_folder_is_refused(tmp_path: Path) -> None:
    """Publishing into (or over) an input folder is refused before anything is written."""
    public = copy_practice_set(tmp_path / "public")
    result = publish(public, public / "published")
    assert result.returncode == 2
    assert "overlaps" in result.stderr
    assert not (public / "published").exists()


def test_json_flag_prints_the_manifest(tmp_path: Path) -> None:
    """--json prints the manifest as one JSON object."""
    out = tmp_path / "out"
    result = publish(PRACTICE_CASES, out, "--json")
    assert result.returncode == 0
    assert json.loads(result.stdout) == json.loads((out / "manifest.json").read_text())


def test_public_policy_text_drops_the_corpus_key_and_its_comment() -> None:
    """The published policy keeps every other key and comment, and says where the corpus is."""
    source = (
        "# Pass bar.\npass_bar = 0.7\n\n# Shared corpus, relative to this folder.\n"
        'corpus = "../elsewhere"\nfeedback = "none"\n'
    )
    text = public_policy_text(source)
    assert tomllib.loads(text) == {"pass_bar": 0.7, "feedback": "none"}
    assert "# Pass bar." in text and "Shared corpus" not in text
    assert PUBLISHED_CORPUS_COMMENT in text


def test_public_policy_text_refuses_a_corpus_key_it_cannot_remove() -> None:
    """A corpus key that is not on its own line is an error, never silently published."""
    with pytest.raises(PublishError):
        public_policy_text('pass_bar = 0.7\ncorpus = """\n../elsewhere"""\n')
