"""Bad settings end every command with one line naming the variable, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GRADER_BIN = str(Path(sys.executable).with_name("grader"))
#: Nothing listens on port 1, so connecting fails at once.
UNREACHABLE_POSTGRES = "postgresql+psycopg://nobody@127.0.0.1:1/none"


def run_grader(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("GRADER_")}
    # The working directory holds no .env file, so only ``env`` configures the command.
    return subprocess.run(
        [GRADER_BIN, *args],
        env={**clean, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        ({"GRADER_MAX_UPLOAD_BYTES": "abc"}, ["serve"], "GRADER_MAX_UPLOAD_BYTES: "),
        ({"GRADER_TRUSTED_PROXIES": "zz"}, ["serve"], "GRADER_TRUSTED_PROXIES: "),
        ({"GRADER_SANDBOX": "bogus"}, ["worker", "--burst"], "GRADER_SANDBOX: "),
        ({"GRADER_RATE_LIMIT": "often"}, ["users", "list"], "GRADER_RATE_LIMIT: "),
        ({"GRADER_DATABASE_URL": "bogus"}, ["users", "list"], "GRADER_DATABASE_URL: "),
        ({"GRADER_LEASE_SECONDS": "-1"}, ["regrade", "--as", "x"], "GRADER_LEASE_SECONDS: "),
        ({"GRADER_DATABASE_URL": "bogus"}, ["regrade", "--as", "x"], "GRADER_DATABASE_URL: "),
        ({"GRADER_DATABASE_URL": "bogus"}, ["storage", "gc"], "GRADER_DATABASE_URL: "),
        ({"GRADER_MAX_ATTEMPTS": "0"}, ["reconcile"], "GRADER_MAX_ATTEMPTS: "),
        (
            {"GRADER_DATABASE_URL": UNREACHABLE_POSTGRES},
            ["reconcile"],
            "database postgresql+psycopg://nobody@127.0.0.1:1/none: ",
        ),
    ],
)
def test_bad_settings_are_one_line(
    tmp_path: Path, env: dict[str, str], args: list[str], expected: str
) -> None:
    """Each command refuses bad settings with exit 2 and one ``grader:`` line that names them."""
    if args[0] == "regrade":
        # regrade loads the case set before it opens the database.
        env = {"GRADER_CASES_DIR": str(Path(__file__).parents[2] / "private_cases"), **env}
    result = run_grader(tmp_path, env, *args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("grader: ") and expected in lines[0], lines[0]
