"""The bubblewrap sandbox: for machines without a Docker engine (a laptop, a demo, CI).

The runner starts in fresh user, PID, network, IPC, UTS and cgroup namespaces (no network but a
down loopback), as uid/gid 65534, with every capability dropped, seeing only: the system's
``/usr`` read-only (for Python and its standard library), the agent at ``/agent``, the corpus
at ``/corpus`` and the runner at ``/grader/runner.py`` (all read-only), a private ``/proc`` and
``/dev``, and a size-limited private ``/tmp``. It dies with the grader (``--die-with-parent``)
and gets a new session so it cannot reach the grader's terminal.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from grader.exceptions import SandboxUnavailable

from .base import RUNNER_PATH, AgentProcess, LaunchSpec, Sandbox
from .process import ProcessAgent, runner_env

SANDBOX_PYTHON = "/usr/bin/python3"


class BwrapSandbox(Sandbox):
    name = "bwrap"
    exposed_host_paths = (Path("/usr"),)

    def __init__(self, bwrap: str | None = None, python: str = SANDBOX_PYTHON) -> None:
        self.bwrap = bwrap or shutil.which("bwrap") or "bwrap"
        self.python = python

    def check(self) -> None:
        if shutil.which(self.bwrap) is None:
            raise SandboxUnavailable(
                "bubblewrap is not installed; install it with 'apt-get install bubblewrap'"
            )
        if not Path(self.python).exists():
            raise SandboxUnavailable(
                f"{self.python} is missing; install Debian's python3 for the bwrap sandbox"
            )
        probe = subprocess.run(
            [*self.argv_prefix(), "--", self.python, "-c", "pass"],
            capture_output=True,
            timeout=20,
            check=False,
        )
        if probe.returncode != 0:
            detail = probe.stderr.decode(errors="replace").strip().splitlines()
            raise SandboxUnavailable(
                "bubblewrap cannot create a sandbox here" + (f": {detail[-1]}" if detail else "")
            )

    def argv_prefix(self, tmp_mb: int = 64) -> list[str]:
        argv = [
            self.bwrap,
            "--unshare-all",
            "--unshare-user",
            "--uid",
            "65534",
            "--gid",
            "65534",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--clearenv",
            "--ro-bind",
            "/usr",
            "/usr",
        ]
        for link in ("bin", "lib", "lib64", "sbin"):
            target = Path("/") / link
            if target.is_symlink():
                argv += ["--symlink", str(target.readlink()), f"/{link}"]
            elif target.is_dir():
                argv += ["--ro-bind", str(target), f"/{link}"]
        argv += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(tmp_mb * 1024 * 1024),
            "--tmpfs",
            "/tmp",
            "--dir",
            "/grader",
        ]
        return argv

    def launch(self, spec: LaunchSpec) -> AgentProcess:
        env = runner_env(spec, agent_dir="/agent", corpus_dir="/corpus")
        argv = self.argv_prefix(spec.limits.tmp_mb)
        argv += [
            "--ro-bind",
            str(spec.agent_dir.resolve()),
            "/agent",
            "--ro-bind",
            str(spec.corpus_dir.resolve()),
            "/corpus",
            "--ro-bind",
            str(RUNNER_PATH),
            "/grader/runner.py",
            "--chdir",
            "/agent",
            # Last: the root bwrap built becomes read-only too; /tmp stays a writable tmpfs.
            "--remount-ro",
            "/",
        ]
        for key, value in env.items():
            argv += ["--setenv", key, value]
        argv += ["--", self.python, "-I", "/grader/runner.py"]
        return ProcessAgent(argv, {}, spec)
