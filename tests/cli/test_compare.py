"""``grader compare`` run as a real process on the practice set, through bubblewrap."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.casesets import load_case_set
from grader.core.models import CaseKind
from tests.conftest import EXAMPLES, PRACTICE_CASES

GRADER = [sys.executable, "-m", "grader"]

#: Appended to a copy of the reference agent: every answer it does not refuse loses its
#: citations, so every answerable case the reference passes fails citation_recall.
WEAKENING = '''

_strong_answer = answer


def answer(question: str) -> dict:
    """Weakened on purpose: drops the citations of every non-refusal answer."""
    result = _strong_answer(question)
    if not result.get("needs_human_review"):
        result["citations"] = []
    return result
'''


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GRADER, *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture
def weakened(tmp_path: Path) -> Path:
    """A copy of the reference agent that cites nothing when it answers."""
    target = tmp_path / "weakened"
    shutil.copytree(EXAMPLES / "reference", target)
    with (target / "agent.py").open("a", encoding="utf-8") as handle:
        handle.write(WEAKENING)
    return target


def test_reference_against_a_weakened_copy_reports_candidate_worse(weakened: Path) -> None:
    """Reference (baseline) vs the copy that drops citations: "candidate worse", one
    baseline-only discordant case per answerable practice case, none the other way, exit 0."""
    answerable = sorted(
        case.id for case in load_case_set(PRACTICE_CASES).cases if case.kind is CaseKind.ANSWERABLE
    )
    args = ("compare", EXAMPLES / "reference", weakened, "--cases", PRACTICE_CASES)
    result = run(*args, "--sandbox", "bwrap", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["verdict"] == "worse"
    assert data["mcnemar"]["baseline_only"] == len(answerable) == 9
    assert data["mcnemar"]["candidate_only"] == 0
    assert data["mcnemar"]["p_value"] == pytest.approx(2 / 2**9)
    assert data["primary"]["metric"] == "answerable_pass_rate"
    assert data["primary"]["difference"] == pytest.approx(-1.0)
    assert data["primary"]["ci95"] == [-1.0, -1.0]
    assert data["case_set_version"] == load_case_set(PRACTICE_CASES).version
    assert sorted(flip["case_id"] for flip in data["flipped"]) == answerable
    assert {(flip["from"], flip["to"]) for flip in data["flipped"]} == {("passed", "failed")}
    guards = data["guardrails"]
    assert guards["gate:answerable:citation_recall"]["regressed"] is True
    assert guards["refusal_pass_rate"]["regressed"] is False
    assert set(guards["safety_failures"]) >= {"baseline", "candidate", "difference", "regressed"}
    assert data["slices"]["lang:en"]["baseline_only"] == 9

    text = run(*args, "--sandbox", "bwrap")
    assert text.returncode == 0, text.stderr
    assert "candidate worse: answerable_pass_rate -100.0 pp" in text.stdout
    assert "9 baseline-only vs 0 candidate-only" in " ".join(text.stdout.split())
    assert "REGRESSED" in text.stdout


def test_a_package_against_itself_shows_no_detectable_difference() -> None:
    """The reference against itself: no discordant case, p = 1, CI [0, 0], exit 0."""
    result = run(
        "compare",
        EXAMPLES / "reference",
        EXAMPLES / "reference",
        "--cases",
        PRACTICE_CASES,
        "--primary",
        "pass_rate",
        "--sandbox",
        "bwrap",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["verdict"] == "no_detectable_difference"
    assert data["mcnemar"] == {"baseline_only": 0, "candidate_only": 0, "p_value": 1.0}
    assert data["primary"]["ci95"] == [0.0, 0.0]
    assert data["flipped"] == []


def test_a_missing_candidate_is_one_line_and_status_2(tmp_path: Path) -> None:
    """Bad input ends with one line on stderr, no traceback, exit status 2."""
    result = run(
        "compare",
        EXAMPLES / "reference",
        tmp_path / "nowhere",
        "--cases",
        PRACTICE_CASES,
        "--sandbox",
        "bwrap",
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 2  # the "grading …" note, then the reason
    assert result.stderr.strip().splitlines()[-1].startswith("grader: ")
