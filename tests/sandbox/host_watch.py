"""Watching a sandboxed run from the host: its processes' host uids and the host's settings.

:class:`SandboxWatch` polls ``/proc`` while a grading runs and records every process of *this*
run's sandbox (other runs, e.g. of other test sessions, may be going on meanwhile): for bwrap,
the test process's descendants that live in another PID namespace (bubblewrap's init and what
it runs); for Docker, the processes in the PID namespace of the container labelled with the run.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

#: Host settings a sandboxed agent must not be able to change, read before and after each run.
HOST_SETTINGS = (
    "/proc/sys/kernel/core_pattern",
    "/proc/sys/kernel/pid_max",
    "/proc/sys/kernel/printk_ratelimit_burst",
    "/proc/sys/user/max_user_namespaces",
    "/sys/kernel/mm/transparent_hugepage/enabled",
)


def host_settings() -> dict[str, str]:
    """The current host values of :data:`HOST_SETTINGS` (those this kernel has)."""
    values = {}
    for path in HOST_SETTINGS:
        try:
            values[path] = Path(path).read_text()
        except OSError:
            continue
    return values


def restore_host_settings(before: dict[str, str]) -> list[str]:
    """Write back every setting that differs from ``before``; return the paths that had changed.

    A regressed sandbox must not leave the machine running with an agent's core_pattern.
    """
    changed = [path for path, value in host_settings().items() if before.get(path) != value]
    for path in changed:
        try:
            Path(path).write_text(before[path])
        except OSError:
            continue
    return changed


@dataclass(frozen=True)
class SeenProcess:
    """A sandboxed process as the host saw it."""

    pid: int
    comm: str
    cmdline: str
    uids: tuple[int, ...]  # real, effective, saved, filesystem: as the host kernel knows them


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return None


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read(f"/proc/{entry}/stat")
            if stat:
                # The command name may hold spaces and parentheses: fields start after the last ")".
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


class SandboxWatch:
    """Polls the host's ``/proc`` for this run's sandboxed processes until stopped."""

    def __init__(self, sandbox: str, label: str, *, interval: float = 0.02) -> None:
        self.sandbox = sandbox
        self.label = label
        self.interval = interval
        self.seen: dict[tuple[int, str], SeenProcess] = {}
        self._own_namespace = _pid_namespace(os.getpid())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._container_pids: dict[str, int] = {}
        self._docker: Any = None
        self.error: BaseException | None = None
        self._sampling = threading.Lock()

    def __enter__(self) -> SandboxWatch:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._docker is not None:
            self._docker.close()
        if self.error is not None:
            raise AssertionError(f"the host watch failed: {self.error!r}")

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.sample()
                self._stop.wait(self.interval)
        except BaseException as exc:  # reported by __exit__: a silent watch proves nothing
            self.error = exc

    def sample(self) -> None:
        """Record this run's sandboxed processes as they are now."""
        with self._sampling:
            for pid in self._candidates():
                self._record(pid)

    # The session's case observer (grader.sandbox.session.CaseObserver): a fast run can end
    # between two polls of a busy machine, but when a question starts the runner is alive.
    def begin_case(self, key: str, deadline: float) -> None:
        self.sample()

    def end_case(self) -> None:
        pass

    def _candidates(self) -> set[int]:
        if self.sandbox == "docker":
            namespaces = {
                ns for pid in self._docker_init_pids() if (ns := _pid_namespace(pid)) is not None
            }
            return {
                int(entry)
                for entry in os.listdir("/proc")
                if entry.isdigit() and _pid_namespace(int(entry)) in namespaces
            }
        parents = _parents()
        ours = {os.getpid()}
        changed = True
        while changed:
            grown = {pid for pid, parent in parents.items() if parent in ours} | ours
            changed = grown != ours
            ours = grown
        return {pid for pid in ours if _pid_namespace(pid) not in (None, self._own_namespace)}

    def _docker_init_pids(self) -> list[int]:
        if self._docker is None:
            import docker

            self._docker = docker.from_env()
        api = self._docker.api
        for summary in api.containers(filters={"label": f"grader.submission={self.label}"}):
            if summary["Id"] not in self._container_pids:
                with contextlib.suppress(Exception):  # gone between the list and the inspect
                    pid = int(api.inspect_container(summary["Id"])["State"]["Pid"])
                    if pid:
                        self._container_pids[summary["Id"]] = pid
        return list(self._container_pids.values())

    def _record(self, pid: int) -> None:
        status = _read(f"/proc/{pid}/status")
        cmdline = _read(f"/proc/{pid}/cmdline")
        if status is None or cmdline is None:
            return
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        seen = SeenProcess(
            pid=pid,
            comm=fields.get("Name", "").strip(),
            cmdline=cmdline.replace("\0", " ").strip(),
            uids=tuple(int(uid) for uid in fields.get("Uid", "").split()),
        )
        self.seen.setdefault((pid, seen.comm), seen)
