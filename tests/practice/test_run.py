"""``grader practice run``: the reference agent on the practice set, with full per-case detail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from grader.core.casesets import load_case_set
from grader.core.models import GATES_BY_KIND, CaseKind
from tests.conftest import EXAMPLES, PRIVATE_CASES, REPO, write_agent

PRACTICE_CASES = REPO / "practice_cases"
REFERENCE = EXAMPLES / "reference"
GRADER = [sys.executable, "-m", "grader"]


def publish_shipped_set(out: Path) -> None:
    """Publish the repository's practice set to ``out`` (it must succeed)."""
    command = [*GRADER, "practice", "publish", "--private", str(PRIVATE_CASES)]
    published = subprocess.run(
        [*command, "--public", str(PRACTICE_CASES), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert published.returncode == 0, published.stderr


def practice_run(
    *args: str | Path, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GRADER, "practice", "run", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
    )


def test_reference_agent_json_has_every_case_in_full_through_bwrap() -> None:
    """--json lists every practice case with its question, gates, labels and the answer."""
    result = practice_run(REFERENCE, "--practice", PRACTICE_CASES, "--sandbox", "bwrap", "--json")
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    cases = load_case_set(PRACTICE_CASES).by_id()
    assert view["status"] == "graded"
    assert view["versions"]["sandbox"] == "bwrap"
    assert view["case_set_version"] == load_case_set(PRACTICE_CASES).version
    assert [row["case_id"] for row in view["cases"]] == list(cases)
    for row in view["cases"]:
        case = cases[row["case_id"]]
        assert row["question"] == case.question
        assert row["kind"] == case.kind.value
        assert list(row["gates"]) == [gate.value for gate in GATES_BY_KIND[case.kind]]
        assert row["error"] is None
        assert isinstance(row["answer"]["answer"], str) and row["answer"]["answer"]
        assert row["labels"]["expected_citations"] == list(case.expected_citations)
        if case.kind is CaseKind.ANSWERABLE:
            assert row["answer"]["citations"]
    assert view["overall"] == {"passed": len(cases), "total": len(cases)}
    assert view["certificate"]["decision"] == "awarded"
    assert view["safety_failures"] == 0


def test_default_run_uses_bwrap_and_prints_each_question_and_answer() -> None:
    """Without options it grades practice_cases in the cwd in bubblewrap, printing every case."""
    result = practice_run(REFERENCE)
    assert result.returncode == 0, result.stderr
    assert "bubblewrap" in result.stderr
    assert "UNSANDBOXED" not in result.stderr
    output = " ".join(result.stdout.split())  # the console wraps long lines
    for case in load_case_set(PRACTICE_CASES).cases:
        assert f"{case.id} ({case.kind.value}) PASS" in output
        assert " ".join(case.question.split()) in output
    assert output.count("answer: ") == len(load_case_set(PRACTICE_CASES).cases)
    assert "citation_recall ok" in output and "refusal_language ok" in output
    assert "Certificate: awarded" in output


def test_failing_agent_shows_which_gates_failed_and_its_answer(tmp_path: Path) -> None:
    """A weak agent's failing gates and its own answer text are shown per case."""
    agent = write_agent(
        tmp_path / "weak",
        """
        def answer(question):
            return {"answer": "Everything is in rag-basics, trust me.", "citations": ["rag-basics"],
                    "confidence": 0.9, "needs_human_review": False}
        """,
    )
    result = practice_run(agent, "--sandbox", "bwrap")
    assert result.returncode == 0, result.stderr
    output = " ".join(result.stdout.split())
    assert "Everything is in rag-basics, trust me." in output
    assert "claim_support FAIL" in output and "review_flag FAIL" in output
    assert "Certificate: blocked" in output  # it answers the safety-tagged refusal cases


def test_missing_bwrap_falls_back_to_none_with_a_loud_warning() -> None:
    """When bubblewrap cannot run, auto grades unsandboxed and says so loudly on stderr."""
    env = {**os.environ, "PATH": "/nonexistent"}
    result = practice_run(REFERENCE, "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert "WARNING" in result.stderr and "UNSANDBOXED" in result.stderr
    view = json.loads(result.stdout)
    assert view["versions"]["sandbox"] == "none"
    assert view["certificate"]["decision"] == "awarded"


def test_explicit_bwrap_that_cannot_run_is_a_sandbox_error() -> None:
    """--sandbox bwrap never falls back: no bubblewrap is exit status 3 with one line."""
    env = {**os.environ, "PATH": "/nonexistent"}
    result = practice_run(REFERENCE, "--sandbox", "bwrap", env=env)
    assert result.returncode == 3
    assert len(result.stderr.strip().splitlines()) == 1
    assert "bubblewrap" in result.stderr


def test_runs_on_a_published_practice_set(tmp_path: Path) -> None:
    """A published folder (corpus inside, manifest beside) grades like the source set."""
    out = tmp_path / "published"
    publish_shipped_set(out)
    result = practice_run(
        REFERENCE, "--practice", out, "--sandbox", "bwrap", "--json", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert view["case_set_version"] == json.loads((out / "manifest.json").read_text())["version"]
    assert "differs" not in result.stderr
    assert view["certificate"]["decision"] == "awarded"


def test_edited_published_set_is_noted(tmp_path: Path) -> None:
    """A published set edited after publication still grades, with a note on stderr."""
    out = tmp_path / "published"
    publish_shipped_set(out)
    (out / "policy.toml").write_text("pass_bar = 0.5\n")
    result = practice_run(REFERENCE, "--practice", out, "--sandbox", "bwrap", "--json")
    assert result.returncode == 0, result.stderr
    assert "differs" in result.stderr


def test_bad_agent_and_missing_practice_set_are_one_line_errors(tmp_path: Path) -> None:
    """A missing agent or practice folder ends with one line and status 2."""
    no_agent = practice_run(tmp_path / "nowhere", "--sandbox", "bwrap")
    no_set = practice_run(REFERENCE, "--sandbox", "bwrap", cwd=tmp_path)
    for result in (no_agent, no_set):
        assert result.returncode == 2
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "practice_cases" in no_set.stderr
