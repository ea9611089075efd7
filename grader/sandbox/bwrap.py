"""The bubblewrap sandbox: for machines without a Docker engine (a laptop, a demo, CI).

The runner starts in fresh user, PID, network, IPC, UTS and cgroup namespaces (no network but a
down loopback), as uid/gid 65534 inside, with every capability dropped, further user namespaces
disabled and a seccomp filter loaded (:mod:`.hardening`), seeing only: the system's ``/usr``
read-only (for Python and its standard library), copies of the agent at ``/agent``, the corpus
at ``/corpus`` and the runner at ``/grader/runner.py`` (all read-only, staged under a neutral
path by :mod:`.staging`), a private read-only ``/proc`` (so ``/proc/sys`` and
``/proc/sysrq-trigger`` cannot be written), a private ``/dev``, no ``/sys``, and a size-limited
private ``/tmp``. It dies with the grader (``--die-with-parent``) and gets a new session so it
cannot reach the grader's terminal.

On the host, bubblewrap runs as the ``grader-sandbox`` user when the grader is root (never as
root: bubblewrap's user namespace would then map the agent to host root), and as the grader's
own user otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from grader.exceptions import SandboxUnavailable

from .base import GATEWAY_MOUNT, AgentProcess, LaunchSpec, Sandbox
from .hardening import SANDBOX_USER, SandboxUser, sandbox_user, seccomp_fd, seccomp_program
from .process import ProcessAgent, runner_env, sweep_run_cgroups
from .staging import stage, sweep_staged

SANDBOX_PYTHON = "/usr/bin/python3"
#: The agent's uid and gid inside the sandbox (outside it is the sandbox user).
INNER_ID = "65534"


class BwrapSandbox(Sandbox):
    name = "bwrap"
    exposed_host_paths = (Path("/usr"),)

    def __init__(
        self, bwrap: str | None = None, python: str = SANDBOX_PYTHON, user: str = SANDBOX_USER
    ) -> None:
        self.bwrap = bwrap or shutil.which("bwrap") or "bwrap"
        self.python = python
        self.user = user

    def run_as(self) -> SandboxUser | None:
        """The host user bubblewrap runs as (``None``: the grader's own)."""
        return sandbox_user(self.user)

    def check(self) -> None:
        if shutil.which(self.bwrap) is None:
            raise SandboxUnavailable(
                "bubblewrap is not installed; install it with 'apt-get install bubblewrap'"
            )
        if not Path(self.python).exists():
            raise SandboxUnavailable(
                f"{self.python} is missing; install Debian's python3 for the bwrap sandbox"
            )
        user = self.run_as()
        seccomp_program()  # raises with the fix when python3-seccomp is missing
        descriptor = seccomp_fd()
        try:
            probe = subprocess.run(
                [*self.argv_prefix(seccomp=descriptor), "--", self.python, "-c", "pass"],
                capture_output=True,
                timeout=20,
                check=False,
                pass_fds=(descriptor,),
                cwd="/",
                preexec_fn=user.drop if user else None,
            )
        finally:
            os.close(descriptor)
        if probe.returncode != 0:
            detail = probe.stderr.decode(errors="replace").strip().splitlines()
            raise SandboxUnavailable(
                "bubblewrap cannot create a sandbox here" + (f": {detail[-1]}" if detail else "")
            )

    def argv_prefix(self, *, seccomp: int, tmp_mb: int = 64) -> list[str]:
        """bubblewrap's options up to the run's own mounts; ``seccomp`` is the filter's fd."""
        argv = [
            self.bwrap,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--uid",
            INNER_ID,
            "--gid",
            INNER_ID,
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
            # Read-only: /proc/sys (sysctls), /proc/sysrq-trigger and every /proc/<pid> knob.
            "--remount-ro",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(tmp_mb * 1024 * 1024),
            "--tmpfs",
            "/tmp",
            "--dir",
            "/grader",
            "--seccomp",
            str(seccomp),
        ]
        return argv

    def sweep_orphans(self) -> int:
        """Remove the run cgroups and staged copies of graders that died (their sandboxes died
        with them)."""
        return sweep_run_cgroups() + sweep_staged()

    def launch(self, spec: LaunchSpec) -> AgentProcess:
        user = self.run_as()
        env = runner_env(spec, agent_dir="/agent", corpus_dir="/corpus")
        staged = stage(spec, group=user.gid if user else None)
        try:
            descriptor = seccomp_fd()
        except BaseException:
            staged.remove()
            raise
        argv = self.argv_prefix(seccomp=descriptor, tmp_mb=spec.limits.tmp_mb)
        argv += [
            "--ro-bind",
            str(staged.agent),
            "/agent",
            "--ro-bind",
            str(staged.corpus),
            "/corpus",
            "--ro-bind",
            str(staged.runner),
            "/grader/runner.py",
            *(
                ["--ro-bind", str(spec.gateway.folder), GATEWAY_MOUNT]
                if spec.gateway is not None
                else []
            ),
            "--chdir",
            "/agent",
            # Last: the root bwrap built becomes read-only too; /tmp stays a writable tmpfs.
            "--remount-ro",
            "/",
        ]
        for key, value in env.items():
            argv += ["--setenv", key, value]
        argv += ["--", self.python, "-I", "/grader/runner.py"]
        return ProcessAgent(argv, {}, spec, run_as=user, pass_fds=(descriptor,), staged=staged)
