"""Sandboxes that run the runner as a local child process (bubblewrap, and unsandboxed).

:class:`ProcessAgent` is the :class:`AgentProcess` over a ``subprocess.Popen``: stdout is read
with ``select`` so deadlines hold, stderr is drained by a thread into a capped tail, and
``terminate`` kills the whole process group and the run's cgroups.

Resource limits: when the grader may create groups under ``/sys/fs/cgroup/{memory,pids}/grader``
on a cgroup v1 host (it is root, or ``scripts/setup.sh`` delegated that subtree to the service
user by ``chown``), each run gets its own cgroups — a hard memory limit with OOM detection and a
process-count limit that also binds root. The child joins them before it drops privileges.
Elsewhere (a student's laptop, a cgroup-v2-only host) the limits fall back to rlimits: address
space and process count of the user.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import resource
import secrets
import select
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from grader.exceptions import SandboxFailure

from .base import AgentProcess, ExitInfo, LaunchSpec
from .hardening import SandboxUser
from .staging import StagedRun, pid_alive

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "grader"
#: A run's cgroup name: its label, a random token, and the pid of the grader that made it (so
#: :func:`sweep_run_cgroups` can tell an orphan from a live run of another grader).
_CGROUP_NAME = re.compile(r".+-[0-9a-f]{8}-g(?P<pid>[0-9]+)")

log = logging.getLogger("grader.sandbox")


class RunCgroups:
    """Per-run cgroup v1 memory and pids groups; absent when the host does not allow them."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths

    @classmethod
    def create(cls, label: str, memory_mb: int, pids: int) -> RunCgroups:
        name = f"{safe_label(label)}-{secrets.token_hex(4)}-g{os.getpid()}"
        paths: dict[str, Path] = {}
        settings = {
            "memory": {
                "memory.limit_in_bytes": str(memory_mb * 1024 * 1024),
                "memory.memsw.limit_in_bytes": str(memory_mb * 1024 * 1024),
                "memory.swappiness": "0",
            },
            "pids": {"pids.max": str(pids)},
        }
        for controller, values in settings.items():
            controller_root = CGROUP_ROOT / controller
            if not (controller_root / "cgroup.procs").exists():
                continue
            path = controller_root / CGROUP_PARENT / name
            try:
                path.mkdir(parents=True, exist_ok=True)
                for key, value in values.items():
                    if (path / key).exists():
                        with contextlib.suppress(OSError):
                            (path / key).write_text(value)
            except OSError:  # not root and not delegated: rlimits stand in
                continue
            paths[controller] = path
        return cls(paths)

    @property
    def limits_memory(self) -> bool:
        return "memory" in self.paths

    @property
    def limits_pids(self) -> bool:
        return "pids" in self.paths

    def join(self) -> None:
        """Move the calling process into every group (runs in the child before exec)."""
        for path in self.paths.values():
            (path / "cgroup.procs").write_text(str(os.getpid()))

    def oom_killed(self) -> bool:
        path = self.paths.get("memory")
        if path is None:
            return False
        try:
            for line in (path / "memory.oom_control").read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill" and int(value) > 0:
                    return True
        except OSError:
            return False
        return False

    def kill_all(self) -> None:
        for path in self.paths.values():
            with contextlib.suppress(OSError):
                for pid in (path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> None:
        for path in self.paths.values():
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # still busy: processes are exiting
                    self.kill_all()
                    time.sleep(0.02)


def sweep_run_cgroups(root: Path = CGROUP_ROOT) -> int:
    """Remove run cgroups whose grader process no longer exists; return how many.

    A grader killed mid-run cannot remove its run's cgroups; its sandbox dies with it
    (bubblewrap's ``--die-with-parent``), but the empty folders stay.
    """
    removed = 0
    for controller in ("memory", "pids"):
        try:
            children = list((root / controller / CGROUP_PARENT).iterdir())
        except OSError:
            continue
        for child in children:
            match = _CGROUP_NAME.fullmatch(child.name)
            if not child.is_dir() or match is None or pid_alive(int(match["pid"])):
                continue
            RunCgroups({controller: child}).kill_all()
            try:
                child.rmdir()
            except OSError as exc:
                log.warning("could not remove orphan cgroup %s: %s", child, exc)
                continue
            removed += 1
    if removed:
        log.warning("removed %d sandbox cgroups left by dead graders", removed)
    return removed


def safe_label(label: str) -> str:
    """A label as it appears in cgroup names (a prefix of each run's group)."""
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in label)[:40] or "run"


def _child_setup(
    cgroups: RunCgroups, spec: LaunchSpec, run_as: SandboxUser | None
) -> Callable[[], None]:
    limits = spec.limits

    def setup() -> None:
        cgroups.join()  # first: joining a root-owned group needs the grader's privileges
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        tmp_bytes = limits.tmp_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (tmp_bytes, tmp_bytes))
        if not cgroups.limits_memory:
            # Address space is a coarse stand-in for memory, but it stops a memory bomb.
            address_space = limits.memory_mb * 1024 * 1024 * 2
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        if not cgroups.limits_pids and (os.geteuid() != 0 or run_as is not None):
            # Counts every process of the user, so concurrent runs share it: a fallback only.
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.pids, limits.pids))
        if run_as is not None:
            run_as.drop()

    return setup


class ProcessAgent(AgentProcess):
    """An AgentProcess over a local child process started in its own session.

    ``run_as`` is the user the child becomes before it runs ``argv``; ``pass_fds`` stay open in
    the child (and are closed here once it started); ``staged`` is removed when the run ends.
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: dict[str, str],
        spec: LaunchSpec,
        *,
        run_as: SandboxUser | None = None,
        pass_fds: Sequence[int] = (),
        staged: StagedRun | None = None,
    ) -> None:
        self._staged = staged
        self._cgroups = RunCgroups.create(spec.label, spec.limits.memory_mb, spec.limits.pids)
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self._stderr_cap = spec.limits.max_stderr_bytes
        self._lock = threading.Lock()
        self._exit: ExitInfo | None = None
        try:
            self._popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd="/",
                start_new_session=True,
                pass_fds=tuple(pass_fds),
                preexec_fn=_child_setup(self._cgroups, spec, run_as),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            self._cgroups.remove()
            if staged is not None:
                staged.remove()
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise SandboxFailure(f"could not start the sandbox: {reason}") from None
        finally:
            for fd in pass_fds:
                os.close(fd)
        assert self._popen.stdout is not None and self._popen.stderr is not None
        self._stdout_fd = self._popen.stdout.fileno()
        os.set_blocking(self._stdout_fd, False)
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True)
        self._drain.start()

    def _drain_stderr(self) -> None:
        stream = self._popen.stderr
        assert stream is not None
        descriptor = stream.fileno()
        for chunk in iter(lambda: os.read(descriptor, 65536), b""):
            with self._lock:
                self._stderr.append(chunk)
                self._stderr_size += len(chunk)
                while self._stderr_size > self._stderr_cap and len(self._stderr) > 1:
                    self._stderr_size -= len(self._stderr.popleft())

    def write(self, data: bytes) -> None:
        stdin = self._popen.stdin
        if stdin is None or self._exit is not None:
            raise BrokenPipeError("sandbox stopped")
        stdin.write(data)
        stdin.flush()

    def read(self, timeout: float) -> bytes | None:
        if self._exit is not None:
            return b""
        ready, _, _ = select.select([self._stdout_fd], [], [], max(timeout, 0))
        if not ready:
            return None
        try:
            return os.read(self._stdout_fd, 65536)
        except BlockingIOError:
            return None

    def terminate(self) -> ExitInfo:
        if self._exit is not None:
            return self._exit
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, signal.SIGKILL)
        self._cgroups.kill_all()
        try:
            returncode = self._popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            raise SandboxFailure("the sandbox process could not be killed") from None
        oom = self._cgroups.oom_killed()
        for stream in (self._popen.stdin, self._popen.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        self._drain.join(timeout=2)
        self._cgroups.remove()
        if self._staged is not None:
            self._staged.remove()
        self._exit = ExitInfo(returncode=returncode, oom_killed=oom)
        return self._exit

    def stderr_tail(self) -> str:
        with self._lock:
            data = b"".join(self._stderr)
        return data[-self._stderr_cap :].decode("utf-8", "replace")


def runner_env(
    spec: LaunchSpec, *, agent_dir: str, corpus_dir: str, gateway_mount: str | None = None
) -> dict[str, str]:
    """The only environment the runner gets (DESIGN §4: listed variables only)."""
    gateway = spec.gateway_env(gateway_mount) if gateway_mount else spec.gateway_env()
    return {
        **gateway,
        "AGENT_DIR": agent_dir,
        "CORPUS_DIR": corpus_dir,
        "AGENT_ENTRYPOINT": spec.entrypoint,
        "AGENT_SETUP": spec.setup or "",
        "HOME": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
    }
