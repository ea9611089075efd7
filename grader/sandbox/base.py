"""The sandbox interface shared by the ``docker``, ``bwrap`` and ``none`` sandboxes.

A sandbox starts the stdlib-only runner (``runner.py``) next to a read-only agent folder and a
read-only corpus, and hands back an :class:`AgentProcess`: a byte pipe to the runner's stdin
and from its stdout. Everything about questions, answers, deadlines and caps lives in
:mod:`grader.sandbox.session`, outside the sandbox, so every sandbox enforces them the same way.

Inside every sandbox the runner sees these environment variables (and no others from the host):
``AGENT_DIR`` (the agent folder), ``CORPUS_DIR`` (the corpus folder), ``AGENT_ENTRYPOINT`` and
``AGENT_SETUP`` (``module:function``, the latter possibly empty), ``HOME=/tmp``,
``PYTHONDONTWRITEBYTECODE=1``, and a fixed ``PATH`` and UTF-8 locale (``LANG``, and for the
process sandboxes ``PYTHONIOENCODING``). A run with a model gateway adds ``OPENAI_API_KEY`` and
``GRADER_GATEWAY_SOCKET`` (the runner turns the latter into ``OPENAI_BASE_URL``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, get_args

RUNNER_PATH = Path(__file__).with_name("runner.py")

#: Every sandbox by name: the one list that settings (``GRADER_SANDBOX``), the command line's
#: ``--sandbox`` and :func:`grader.sandbox.make_sandbox` read. ``none`` runs agents unsandboxed.
SandboxName = Literal["docker", "bwrap", "none"]
SANDBOX_NAMES: tuple[SandboxName, ...] = get_args(SandboxName)


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandboxed run; the grader enforces them from outside."""

    memory_mb: int = 512
    pids: int = 64
    cpus: float = 1.0
    tmp_mb: int = 64
    case_timeout_s: float = 10.0
    setup_timeout_s: float = 30.0
    run_timeout_s: float = 300.0
    max_line_bytes: int = 1_000_000
    max_stderr_bytes: int = 65_536

    def __post_init__(self) -> None:
        for name in ("memory_mb", "pids", "tmp_mb", "max_line_bytes", "max_stderr_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"limit {name} must be positive")
        for name in ("cpus", "case_timeout_s", "setup_timeout_s", "run_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"limit {name} must be positive")


#: Where a run's model-gateway folder (holding ``model.sock``) is mounted inside a sandbox.
GATEWAY_MOUNT = "/grader/gateway"


@dataclass(frozen=True)
class GatewayMount:
    """A run's model gateway: the host folder holding its socket, and the run's token."""

    folder: Path
    token: str
    socket_name: str = "model.sock"


@dataclass(frozen=True)
class LaunchSpec:
    """What to start: the agent, its corpus, how to call it, and the limits."""

    agent_dir: Path
    corpus_dir: Path
    entrypoint: str
    setup: str | None = None
    label: str = "local"
    limits: Limits = field(default_factory=Limits)
    #: The run's model gateway (DESIGN §4a); None: the agent gets no model.
    gateway: GatewayMount | None = None

    def gateway_env(self, mount: str = GATEWAY_MOUNT) -> dict[str, str]:
        """What the runner needs to reach the gateway, with the folder mounted at ``mount``."""
        if self.gateway is None:
            return {}
        return {
            "GRADER_GATEWAY_SOCKET": f"{mount}/{self.gateway.socket_name}",
            "OPENAI_API_KEY": self.gateway.token,
        }


@dataclass(frozen=True)
class ExitInfo:
    """How a sandboxed process ended."""

    returncode: int | None
    oom_killed: bool = False


class AgentProcess(ABC):
    """A running sandbox: write bytes to the runner's stdin, read bytes from its stdout."""

    @abstractmethod
    def write(self, data: bytes) -> None:
        """Send bytes to the runner; raises ``OSError`` (e.g. BrokenPipeError) if it is gone."""

    @abstractmethod
    def read(self, timeout: float) -> bytes | None:
        """Return the next chunk of stdout, ``b""`` at end of stream, ``None`` if none came
        within ``timeout`` seconds."""

    @abstractmethod
    def terminate(self) -> ExitInfo:
        """Kill the sandbox now (every process in it) and release its resources; idempotent."""

    @abstractmethod
    def stderr_tail(self) -> str:
        """The last bytes the agent wrote to stderr (capped); for instructors only."""


class Sandbox(ABC):
    """A way to run an untrusted agent."""

    name: ClassVar[SandboxName]
    #: True when the sandbox isolates the agent from the host (network, files, processes).
    isolating: ClassVar[bool] = True
    #: Host folders the agent can read inside this sandbox besides the agent and corpus.
    exposed_host_paths: ClassVar[tuple[Path, ...]] = ()

    @abstractmethod
    def check(self) -> None:
        """Raise :class:`grader.exceptions.SandboxUnavailable` with what to do if unusable."""

    @abstractmethod
    def launch(self, spec: LaunchSpec) -> AgentProcess:
        """Start the runner for ``spec``; raise ``SandboxFailure`` if the infrastructure fails."""

    def sweep_orphans(self) -> int:
        """Remove what runs of dead graders left behind; return how many were removed.

        Housekeeping for long-lived workers (a worker killed outright cannot clean up). Sandboxes
        whose runs die with their grader have nothing to sweep.
        """
        return 0
