"""The ``grader`` command line, run as a real process (DESIGN §11)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.cli.helpers import EXIT_AUDIT_FAILED, EXIT_SANDBOX
from tests.conftest import (
    EXAMPLES,
    PRIVATE_CASES,
    V1_LIKE_CLAIM_SUPPORT,
    copy_case_set,
    write_agent,
    write_case_set,
)
from tests.sandbox.hostile_agents import source

GRADER = [sys.executable, "-m", "grader"]


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GRADER, *map(str, args)], capture_output=True, text=True, timeout=300)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("agent", "decision"),
    [("reference", "awarded"), ("refuse_all", "not_awarded"), ("cite_all", "blocked")],
)
def test_example_agents_get_their_intended_decision_in_bwrap(agent: str, decision: str) -> None:
    """The shipped examples are awarded / not awarded / blocked, graded through bubblewrap."""
    result = run(
        "grade", EXAMPLES / agent, "--cases", PRIVATE_CASES, "--sandbox", "bwrap", "--json"
    )
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert view["status"] == "graded"
    assert view["certificate"]["decision"] == decision
    assert view["overall"]["total"] >= 20


def test_reference_agent_passes_nearly_everything() -> None:
    """The reference agent is a real bar: at least 90% of cases and no safety failure."""
    view = json.loads(
        run(
            "grade",
            EXAMPLES / "reference",
            "--cases",
            PRIVATE_CASES,
            "--sandbox",
            "bwrap",
            "--json",
        ).stdout
    )
    assert view["overall"]["passed"] / view["overall"]["total"] >= 0.9
    assert view["safety_failures"] == 0


def test_zipped_package_grades_like_the_folder(tmp_path: Path) -> None:
    """A .zip of a package folder grades exactly like the folder."""
    archive = tmp_path / "agent.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for path in (EXAMPLES / "refuse_all").iterdir():
            bundle.write(path, f"refuse_all/{path.name}")
    result = run("grade", archive, "--cases", PRIVATE_CASES, "--sandbox", "bwrap", "--json")
    assert json.loads(result.stdout)["certificate"]["decision"] == "not_awarded"


def test_instructor_view_lists_every_case(tmp_path: Path) -> None:
    """--view instructor adds per-case rows with gates and answers."""
    result = run(
        "grade",
        EXAMPLES / "cite_all",
        "--cases",
        PRIVATE_CASES,
        "--sandbox",
        "bwrap",
        "--view",
        "instructor",
        "--json",
    )
    view = json.loads(result.stdout)
    assert len(view["cases"]) == view["overall"]["total"]
    unsafe = [row for row in view["cases"] if row["safety_failure"]]
    assert unsafe and all(row["kind"] == "refusal" for row in unsafe)


def test_table_output_is_readable() -> None:
    """Without --json the student view prints as tables with the decision."""
    result = run("grade", EXAMPLES / "refuse_all", "--cases", PRIVATE_CASES, "--sandbox", "bwrap")
    assert result.returncode == 0
    assert "Certificate: not_awarded" in result.stdout
    assert "citation_recall" in result.stdout


def test_question_text_never_reaches_student_output(tmp_path: Path) -> None:
    """An agent that raises, prints and exits with question text leaks nothing to the CLI."""
    cases = [
        {
            "id": "h1",
            "kind": "answerable",
            "question": "hostile zq-heron-417 chunk overlap?",
            "expected_citations": ["rag-basics"],
            "required_concepts": [["overlap"]],
        },
        {"id": "h2", "kind": "refusal", "question": "hostile zq-osprey-993 the score?"},
    ]
    case_dir = write_case_set(tmp_path / "cases", cases)
    for name in ("exception_with_question", "exit_code_and_stderr", "non_json_line"):
        agent = write_agent(tmp_path / name, source(name))
        result = run("grade", agent, "--cases", case_dir, "--sandbox", "bwrap", "--json")
        assert result.returncode == 0, result.stderr
        seen = (result.stdout + result.stderr).lower()
        for fragment in ("heron", "osprey", "zq-", "hostile", "417", "993", "h1", "h2"):
            assert fragment not in seen, (name, fragment)


def test_check_cases_prints_version_and_counts() -> None:
    """check-cases validates the demo set, prints its version and counts, and its evaluator
    audit passes (in the JSON too)."""
    result = run("check-cases", PRIVATE_CASES, "--json")
    data = json.loads(result.stdout)
    assert result.returncode == 0
    assert len(data["version"]) == 16 and data["by_kind"]["refusal"] >= 8
    assert data["audit"]["ok"] is True and data["audit"]["case_set_version"] == data["version"]
    text = run("check-cases", PRIVATE_CASES)
    assert text.returncode == 0 and "evaluator audit passed" in text.stdout


def test_check_cases_fails_with_its_own_status_when_the_audit_fails(tmp_path: Path) -> None:
    """A valid set whose claim_support checks concepts only lets a pasted document through:
    check-cases names the scoring canaries, ends with one line on stderr and status 5; --json
    carries the failed audit; --no-audit only validates (status 0, no audit)."""
    weak = copy_case_set(PRIVATE_CASES, tmp_path / "weak", extra_policy=V1_LIKE_CLAIM_SUPPORT)
    result = run("check-cases", weak)
    assert_one_line_error(result, "evaluator audit FAILED")
    assert result.returncode == EXIT_AUDIT_FAILED
    assert "valid, version" in result.stdout
    assert "refusing_paste_document (awarded): earned the certificate" in result.stdout
    as_json = run("check-cases", weak, "--json")
    assert as_json.returncode == EXIT_AUDIT_FAILED
    audit = json.loads(as_json.stdout)["audit"]
    assert audit["ok"] is False and any(not c["ok"] for c in audit["canaries"])
    skipped = run("check-cases", weak, "--no-audit", "--json")
    assert skipped.returncode == 0 and skipped.stderr == ""
    assert json.loads(skipped.stdout)["audit"] is None


def test_missing_agent_toml_is_one_line(tmp_path: Path) -> None:
    """A package without agent.toml fails with one line naming the file."""
    (tmp_path / "agent").mkdir()
    result = run("grade", tmp_path / "agent", "--cases", PRIVATE_CASES, "--sandbox", "bwrap")
    assert_one_line_error(result, "agent.toml")


def test_malformed_agent_toml_is_one_line(tmp_path: Path) -> None:
    """A malformed manifest fails with one line naming the problem."""
    agent = write_agent(tmp_path / "agent", "def answer(q):\n    return {}\n")
    (agent / "agent.toml").write_text('name = "x"\nentrypoint = "agent"\n')
    result = run("grade", agent, "--cases", PRIVATE_CASES, "--sandbox", "bwrap")
    assert_one_line_error(result, "entrypoint")


def test_entrypoint_that_does_not_import_is_one_line(tmp_path: Path) -> None:
    """An agent whose module fails to import ends with its import error, in one line."""
    agent = write_agent(tmp_path / "agent", "import no_such_module_xyz\n")
    result = run("grade", agent, "--cases", PRIVATE_CASES, "--sandbox", "bwrap")
    assert_one_line_error(result, "failed to start", "no_such_module_xyz")


def test_setup_that_hangs_is_one_line(tmp_path: Path) -> None:
    """A setup function that never returns is stopped at the setup deadline."""
    agent = write_agent(
        tmp_path / "agent",
        "import time\ndef setup():\n    time.sleep(60)\ndef answer(q):\n    return {}\n",
        setup="agent:setup",
    )
    case_dir = write_case_set(
        tmp_path / "cases",
        [{"id": "r", "kind": "refusal", "question": "x?"}],
        policy="setup_timeout_seconds = 1\n",
    )
    result = run("grade", agent, "--cases", case_dir, "--sandbox", "bwrap")
    assert_one_line_error(result, "did not finish starting within 1 s")


def test_broken_case_set_is_one_line(tmp_path: Path) -> None:
    """A broken case set fails before anything runs, naming file, line and field."""
    case_dir = write_case_set(
        tmp_path / "cases", [{"id": "a", "kind": "answerable", "question": "q?"}]
    )
    result = run("grade", EXAMPLES / "reference", "--cases", case_dir, "--sandbox", "bwrap")
    assert_one_line_error(result, "cases.jsonl line 1", "expected citation")


def test_missing_corpus_is_one_line(tmp_path: Path) -> None:
    """A case set whose corpus folder is missing fails in one line."""
    case_dir = write_case_set(
        tmp_path / "cases", [{"id": "r", "kind": "refusal", "question": "q?"}]
    )
    for document in (case_dir / "corpus").iterdir():
        document.unlink()
    (case_dir / "corpus").rmdir()
    result = run("check-cases", case_dir)
    assert_one_line_error(result, "corpus folder not found")


def test_missing_package_is_one_line(tmp_path: Path) -> None:
    """A package path that does not exist fails in one line."""
    result = run("grade", tmp_path / "nope.zip", "--cases", PRIVATE_CASES, "--sandbox", "bwrap")
    assert_one_line_error(result, "nope.zip")


def test_unsandboxed_run_says_so(tmp_path: Path) -> None:
    """--sandbox none warns loudly that the agent runs unsandboxed."""
    result = run(
        "grade", EXAMPLES / "refuse_all", "--cases", PRIVATE_CASES, "--sandbox", "none", "--json"
    )
    assert result.returncode == 0
    assert "UNSANDBOXED" in result.stderr


@pytest.mark.docker
@pytest.mark.parametrize("agent", ["reference", "refuse_all", "cite_all"])
def test_docker_sandbox_grades_examples_like_bwrap(agent: str) -> None:
    """The Docker sandbox gives the same per-case outcomes as bubblewrap on every example."""
    views = {}
    for sandbox in ("bwrap", "docker"):
        result = run(
            "grade",
            EXAMPLES / agent,
            "--cases",
            PRIVATE_CASES,
            "--sandbox",
            sandbox,
            "--view",
            "instructor",
            "--json",
        )
        assert result.returncode == 0, result.stderr
        view = json.loads(result.stdout)
        views[sandbox] = [(c["case_id"], c["gates"], c["error"]) for c in view["cases"]]
        views[sandbox + "-decision"] = view["certificate"]
    assert views["docker"] == views["bwrap"]
    assert views["docker-decision"] == views["bwrap-decision"]


def test_sandbox_build_without_an_engine_is_one_line(tmp_path: Path) -> None:
    """``grader sandbox build`` against an engine that does not answer says so in one line
    (with the fix) and exits with the sandbox status, never a traceback."""
    result = subprocess.run(
        [*GRADER, "sandbox", "build", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"},
    )
    assert_one_line_error(result, "Docker engine not reachable", "scripts/docker-engine.sh")
    assert result.returncode == EXIT_SANDBOX
