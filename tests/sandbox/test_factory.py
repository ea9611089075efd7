"""The one list of sandbox names, as settings, the factory and the command line read it."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from grader.cli import main
from grader.exceptions import SandboxUnavailable
from grader.sandbox import SANDBOX_NAMES, make_sandbox
from grader.settings import Settings


def test_every_listed_name_makes_its_sandbox_and_is_a_valid_setting() -> None:
    """Each sandbox name builds the sandbox of that name and is accepted as GRADER_SANDBOX."""
    assert set(SANDBOX_NAMES) == {"docker", "bwrap", "none"}
    for name in SANDBOX_NAMES:
        assert make_sandbox(name).name == name
        assert Settings(sandbox=name).sandbox == name


def test_an_unlisted_name_is_refused_everywhere_with_the_list() -> None:
    """A name not in the list is refused by the factory, the settings and `grader grade`."""
    with pytest.raises(SandboxUnavailable, match="choose from docker, bwrap, none"):
        make_sandbox("firejail")
    with pytest.raises(ValidationError):
        Settings(sandbox="firejail")
    result = CliRunner().invoke(main, ["grade", ".", "--sandbox", "firejail"])
    assert result.exit_code == 2 and "'firejail' is not one of" in result.output
