"""Server and worker configuration, read once from the environment (DESIGN §12).

Every variable is ``GRADER_``-prefixed and has a working single-machine default; a ``.env`` file
in the working directory may supply them. A :class:`Settings` value is built once at start-up
(``Settings()``) and passed explicitly to whatever needs it: there is no module-level instance.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from grader.exceptions import SettingsError
from grader.sandbox.base import SandboxName

_MIB = 1024 * 1024
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class Settings(BaseSettings):
    """What the web server, the rq workers and the ``grader users``/``reconcile`` commands share."""

    model_config = SettingsConfigDict(
        env_prefix="GRADER_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    #: SQLAlchemy URL. SQLite (one file, WAL mode) for one machine; PostgreSQL
    #: (``postgresql+psycopg://user@host/db``) when workers run on several hosts.
    database_url: str = "sqlite:///var/grader.db"
    #: Redis carries the rq queue and the rate-limit counters; it holds no state that matters.
    redis_url: str = "redis://localhost:6379/0"
    #: The hidden case set (cases.jsonl, policy.toml, corpus) the workers grade against.
    cases_dir: Path = Path("private_cases")
    #: Uploaded archives, content-addressed by SHA-256 (the folder store); with a database store
    #: (``storage_url``) only this host's spool of uploads and fetched archives.
    storage_dir: Path = Path("var/archives")
    #: Where archives are kept: empty or ``file:///folder`` (the folder store; empty means
    #: ``storage_dir``) or ``postgresql+psycopg://…`` (the database store: workers on other hosts
    #: need no shared folder). See grader/db/archive_store.py.
    storage_url: str = ""
    #: ``bwrap`` (bubblewrap; needs nothing but the Debian package) or ``docker``; ``none`` runs
    #: agents unsandboxed and is refused unless ``allow_unsandboxed`` is set.
    sandbox: SandboxName = "bwrap"
    #: GRADER_ALLOW_UNSANDBOXED=1: let ``sandbox = none`` run untrusted code with the worker's
    #: privileges. Never in production.
    allow_unsandboxed: bool = False
    #: Signs session cookies and CSRF tokens; must be the same for every server process.
    #: Empty: a random key is kept in ``secret_key_file``.
    secret_key: str = ""
    secret_key_file: Path = Path("var/secret_key")
    #: Largest accepted upload (the archive); bigger requests get 413.
    max_upload_bytes: Annotated[int, Field(gt=0)] = 20 * _MIB
    #: Per-token limit on every authenticated call (Flask-Limiter syntax).
    rate_limit: str = "300 per minute"
    #: Per-token limit on uploads, on top of the policy's daily quota.
    upload_rate_limit: str = "10 per minute"
    #: The rq queue name (and Redis key prefix of the rate limiter).
    queue_name: str = "grader"
    #: How often a grading worker refreshes its lease on the submission it is grading.
    heartbeat_seconds: Annotated[float, Field(gt=0)] = 5.0
    #: A running submission whose heartbeat is older than this is considered abandoned.
    lease_seconds: Annotated[float, Field(gt=0)] = 60.0
    #: A queued submission must be this old before the reconciler may re-enqueue it.
    requeue_grace_seconds: Annotated[float, Field(ge=0)] = 30.0
    #: How often each worker runs the reconciler (0 disables the periodic run).
    reconcile_interval_seconds: Annotated[float, Field(ge=0)] = 30.0
    #: Gradings of one submission that may be abandoned before it is failed for good.
    max_attempts: Annotated[int, Field(ge=1)] = 3
    #: rq's hard limit on one job, above the policy's own run deadline.
    job_timeout_seconds: Annotated[int, Field(gt=0)] = 3600
    #: Secure flag on the session cookie (set it when serving over HTTPS).
    secure_cookies: bool = False
    #: The published public practice set served at /practice (``grader practice publish``).
    practice_dir: Path = Path("var/practice")
    #: Course name shown on certificates (empty: the instructor console's default).
    course_name: str = ""
    #: Bytes one student may upload in a rolling 24 hours (every upload counts its archive size,
    #: whatever its outcome); past it an upload gets 429.
    storage_bytes_per_day: Annotated[int, Field(gt=0)] = 200 * _MIB
    #: Uploads per student in a rolling 24 hours whose agent failed to start (import error, setup
    #: crash or setup timeout) or whose grading was abandoned; past it an upload gets 429.
    failed_starts_per_day: Annotated[int, Field(gt=0)] = 10
    #: ``grader storage gc`` keeps the archive of a graded submission this many days (a student's
    #: best and latest graded submissions and certificate bases are kept for good).
    archive_retention_days: Annotated[float, Field(ge=0)] = 30.0
    #: … and the archive of a failed submission this many days (no result set needs it).
    failed_archive_retention_days: Annotated[float, Field(ge=0)] = 2.0
    #: How often the workers' reconciler runs the storage gc (one worker per interval; 0: never).
    storage_gc_interval_seconds: Annotated[float, Field(ge=0)] = 3600.0
    #: Failed authentications (bad bearer or login token) per client address (Flask-Limiter
    #: syntax); past it every token-carrying request from that address gets 429.
    auth_failure_limit: str = "30 per minute"
    #: Comma-separated addresses or networks of reverse proxies whose ``X-Forwarded-For`` and
    #: ``X-Forwarded-Proto`` are believed (one hop); from anyone else they are ignored.
    trusted_proxies: str = ""
    #: A bearer token that may read ``/metrics`` from anywhere (empty: instructors and loopback
    #: only).
    metrics_token: str = ""
    #: Open connections one ``grader serve`` process keeps before it stops accepting more
    #: (a waiting client costs a socket and its buffered body, never a thread).
    serve_connection_limit: Annotated[int, Field(ge=10)] = 1000
    #: A connection that sends nothing for this long is closed (idle keep-alive or a stalled
    #: upload).
    serve_idle_timeout_seconds: Annotated[int, Field(gt=0)] = 60
    #: The model upstream the gateway forwards agents' calls to (DESIGN §4a), an
    #: OpenAI-compatible base URL such as ``http://127.0.0.1:8400/v1`` (``grader model serve``).
    #: Empty: agents' model calls get 503.
    model_upstream_url: str = ""
    #: The upstream's API key; it stays in the grader and never enters a sandbox.
    model_upstream_key: SecretStr = SecretStr("")
    #: Where the gateway keeps cached answers for case sets with ``model_cache = true``.
    model_cache_dir: Path = Path("var/model-cache")

    @field_validator("storage_url")
    @classmethod
    def _valid_storage_url(cls, value: str) -> str:
        scheme = value.split(":", 1)[0].split("+")[0] if ":" in value else value
        if value and scheme not in ("file", "postgresql"):
            raise ValueError("must be empty, file:///folder or postgresql+psycopg://…")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _valid_networks(cls, value: str) -> str:
        for item in value.split(","):
            if item.strip():
                try:
                    ipaddress.ip_network(item.strip(), strict=False)
                except ValueError:
                    raise ValueError(f"not an address or network: {item.strip()!r}") from None
        return value

    def trusted_proxy_networks(self) -> tuple[IPNetwork, ...]:
        """``trusted_proxies`` parsed (validated when the settings were read)."""
        return tuple(
            ipaddress.ip_network(item.strip(), strict=False)
            for item in self.trusted_proxies.split(",")
            if item.strip()
        )

    @field_validator("rate_limit", "upload_rate_limit", "auth_failure_limit")
    @classmethod
    def _valid_limit(cls, value: str) -> str:
        from limits import parse_many

        try:
            parse_many(value)
        except ValueError as exc:
            raise ValueError(f"not a rate limit ({exc})") from None
        return value

    def checked_sandbox(self) -> str:
        """The sandbox name, refusing ``none`` without the explicit unsafe flag."""
        if self.sandbox == "none" and not self.allow_unsandboxed:
            raise SettingsError(
                "GRADER_SANDBOX=none runs student code unsandboxed; set "
                "GRADER_ALLOW_UNSANDBOXED=1 to allow it (never in production)"
            )
        return self.sandbox

    def resolved_secret_key(self) -> str:
        """``secret_key``, or the key kept in ``secret_key_file`` (created on first use)."""
        if self.secret_key:
            return self.secret_key
        path = self.secret_key_file
        try:
            return path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(48)
        # Write a private temporary file, then link it into place: readers never see a partial
        # key, and when several processes start at once the first link wins for all of them.
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
        temporary.write_text(key, encoding="utf-8")
        temporary.chmod(0o600)
        try:
            os.link(temporary, path)
        except FileExistsError:
            key = path.read_text(encoding="utf-8").strip()
        finally:
            temporary.unlink()
        return key
