"""The one grading path (grader.grading) and the guards it applies before running anything."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from grader.core.casesets import load_case_set
from grader.exceptions import SandboxUnavailable
from grader.grading import grade_agent
from grader.sandbox import make_sandbox
from tests.conftest import EXAMPLES, write_case_set


def test_bwrap_refuses_a_case_set_its_agents_could_read() -> None:
    """A case set under /usr (bound into the bwrap sandbox) is refused before any agent runs."""
    root = Path(tempfile.mkdtemp(prefix="grader-test-", dir="/usr/local/share"))
    try:
        case_set = load_case_set(
            write_case_set(root, [{"id": "r", "kind": "refusal", "question": "Score?"}])
        )
        with pytest.raises(SandboxUnavailable, match="under /usr"):
            grade_agent(
                EXAMPLES / "refuse_all",
                entrypoint="agent:answer",
                setup=None,
                case_set=case_set,
                sandbox=make_sandbox("bwrap"),
            )
    finally:
        shutil.rmtree(root)
