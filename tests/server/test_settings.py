"""Configuration from the environment and `.env` (grader/settings.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from grader.exceptions import SettingsError
from grader.settings import Settings
from tests.server.conftest import GRADER_BIN


def test_defaults_work_on_one_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With no variables set, every setting has a working single-machine default."""
    for name in list(os.environ):
        if name.startswith("GRADER_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    settings = Settings()
    assert settings.database_url == "sqlite:///var/grader.db"
    assert settings.redis_url == "redis://localhost:6379/0"
    assert settings.cases_dir == Path("private_cases")
    assert settings.sandbox == "bwrap" and settings.checked_sandbox() == "bwrap"


def test_environment_and_dotenv_are_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """GRADER_* variables win over a .env file, which wins over defaults."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(
        "GRADER_REDIS_URL=redis://cache:6379/2\nGRADER_SANDBOX=docker\nGRADER_CASES_DIR=/srv/cases\n"
    )
    monkeypatch.setenv("GRADER_SANDBOX", "bwrap")
    monkeypatch.setenv("GRADER_MAX_UPLOAD_BYTES", "1234")
    settings = Settings()
    assert settings.redis_url == "redis://cache:6379/2"
    assert settings.cases_dir == Path("/srv/cases")
    assert settings.sandbox == "bwrap" and settings.max_upload_bytes == 1234


def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown sandbox or a malformed rate limit is a clear configuration error."""
    monkeypatch.setenv("GRADER_SANDBOX", "chroot")
    with pytest.raises(ValidationError, match="sandbox"):
        Settings(_env_file=None)  # type: ignore[call-arg]
    monkeypatch.delenv("GRADER_SANDBOX")
    with pytest.raises(ValidationError, match="not a rate limit"):
        Settings(_env_file=None, rate_limit="lots")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="not a rate limit"):
        Settings(_env_file=None, auth_failure_limit="many")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match=r"not an address or network: 'proxy\.local'"):
        Settings(_env_file=None, trusted_proxies="10.0.0.1, proxy.local")  # type: ignore[call-arg]


def test_trusted_proxies_are_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """GRADER_TRUSTED_PROXIES takes addresses and networks separated by commas."""
    monkeypatch.setenv("GRADER_TRUSTED_PROXIES", "127.0.0.1, 10.0.0.0/8,::1")
    networks = Settings(_env_file=None).trusted_proxy_networks()  # type: ignore[call-arg]
    assert [str(network) for network in networks] == ["127.0.0.1/32", "10.0.0.0/8", "::1/128"]


def test_unsandboxed_grading_needs_the_loud_flag() -> None:
    """sandbox=none is refused unless allow_unsandboxed (GRADER_ALLOW_UNSANDBOXED=1) is set."""
    with pytest.raises(SettingsError, match="GRADER_ALLOW_UNSANDBOXED=1"):
        Settings(_env_file=None, sandbox="none").checked_sandbox()  # type: ignore[call-arg]
    allowed = Settings(_env_file=None, sandbox="none", allow_unsandboxed=True)  # type: ignore[call-arg]
    assert allowed.checked_sandbox() == "none"


def test_generated_secret_key_is_kept_and_shared(tmp_path: Path) -> None:
    """Without GRADER_SECRET_KEY, one random key is created in a private file and reused."""
    path = tmp_path / "var" / "secret_key"
    first = Settings(_env_file=None, secret_key="", secret_key_file=path)  # type: ignore[call-arg]
    key = first.resolved_secret_key()
    assert len(key) >= 40 and path.stat().st_mode & 0o077 == 0
    again = Settings(_env_file=None, secret_key="", secret_key_file=path)  # type: ignore[call-arg]
    assert again.resolved_secret_key() == key
    explicit = Settings(_env_file=None, secret_key="given")  # type: ignore[call-arg]
    assert explicit.resolved_secret_key() == "given"


def test_an_unknown_archive_store_is_one_line_of_bad_configuration(tmp_path: Path) -> None:
    """GRADER_STORAGE_URL with a scheme no store serves stops a grader command with one line
    naming the variable and status 2, never a traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_")}
    env["GRADER_STORAGE_URL"] = "s3://bucket/archives"
    result = subprocess.run(
        [GRADER_BIN, "storage", "gc"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "GRADER_STORAGE_URL" in result.stderr and "Traceback" not in result.stderr
