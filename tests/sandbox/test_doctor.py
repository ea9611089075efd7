"""`grader sandbox doctor`, run for real against this machine's Docker engine and bubblewrap."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from grader.cli.sandbox import sandbox
from grader.sandbox.images import SANDBOX_IMAGE, SANDBOX_UID

pytestmark = pytest.mark.docker


def test_doctor_finds_both_sandboxes_usable_and_smoke_runs_as_the_sandbox_user() -> None:
    """On a set-up machine every check passes and the smoke run answers as uid 10001."""
    result = CliRunner().invoke(sandbox, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    checks = {check["name"]: check for check in report["checks"]}
    assert report["docker_usable"] is True
    assert checks["docker sandbox"]["ok"] and SANDBOX_IMAGE in checks["docker sandbox"]["detail"]
    assert f"uid {SANDBOX_UID}" in checks["hardened smoke run"]["detail"]
    assert checks["bubblewrap"]["ok"] and "seccomp" in checks["bubblewrap"]["detail"]


def test_doctor_reports_a_missing_image_as_unusable_with_what_to_run() -> None:
    """A missing image fails the Docker check with the sandbox's own message and exit 1."""
    result = CliRunner().invoke(sandbox, ["doctor", "--json", "--image", "grader-sandbox:nope"])
    assert result.exit_code == 1
    report = json.loads(result.output)
    docker_check = report["checks"][0]
    assert report["docker_usable"] is False and docker_check["name"] == "docker sandbox"
    assert "grader-sandbox:nope not found" in docker_check["detail"]
    assert "grader sandbox build" in docker_check["fix"]
    assert [check["name"] for check in report["checks"]] == ["docker sandbox", "bubblewrap"]
