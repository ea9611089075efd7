"""The bubblewrap sandbox's hardening: its host user, its seccomp filter, its staged copies."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from grader.exceptions import SandboxUnavailable
from grader.sandbox.base import AgentProcess, LaunchSpec
from grader.sandbox.bwrap import BwrapSandbox
from grader.sandbox.hardening import DENIED_SYSCALLS, SANDBOX_USER
from grader.sandbox.process import CGROUP_PARENT, sweep_run_cgroups
from grader.sandbox.staging import stage, staging_root, sweep_staged

from .conftest import Driver

MakeSpec = Callable[..., LaunchSpec]

SYSCALL_PROBE = """
import ctypes, errno, threading, os
LIBC = ctypes.CDLL(None, use_errno=True)
NUMBERS = {
    "mount": 165, "umount2": 166, "pivot_root": 155, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428, "mount_setattr": 442,
    "unshare": 272, "setns": 308, "keyctl": 250, "add_key": 248, "request_key": 249,
    "bpf": 321, "perf_event_open": 298, "ptrace": 101, "process_vm_readv": 310,
    "process_vm_writev": 311, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "clone3": 435,
}
def outcome(number):
    result = LIBC.syscall(ctypes.c_long(number), 0, 0, 0, 0, 0)
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]
def answer(question):
    results = {name: outcome(number) for name, number in NUMBERS.items()}
    # Threads and processes still work (glibc falls back from clone3 to clone).
    box = []
    worker = threading.Thread(target=lambda: box.append(1))
    worker.start(); worker.join()
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    return {"answer": "ok", "citations": [], "confidence": 0.5, "needs_human_review": False,
            "results": results, "thread": box, "child": os.waitstatus_to_exitcode(status),
            "seccomp": [line.split()[1] for line in open("/proc/self/status")
                        if line.startswith("Seccomp:")]}
"""


@pytest.fixture
def bwrap_launch() -> Iterator[Callable[[LaunchSpec], Driver]]:
    """Launch specs in a checked bubblewrap sandbox; every run is terminated afterwards."""
    sandbox = BwrapSandbox()
    sandbox.check()
    started: list[AgentProcess] = []

    def start(spec: LaunchSpec) -> Driver:
        started.append(sandbox.launch(spec))
        return Driver(started[-1])

    yield start
    for process in started:
        process.terminate()


def test_seccomp_filter_denies_each_listed_syscall_with_eperm(
    make_spec: MakeSpec, bwrap_launch: Callable[[LaunchSpec], Driver]
) -> None:
    """Every denied syscall fails with EPERM (clone3 ENOSYS), while threads and fork work."""
    driver = bwrap_launch(make_spec(SYSCALL_PROBE))
    driver.ready()
    reply = driver.ask("probe")
    expected = {name: "EPERM" for name in DENIED_SYSCALLS} | {"clone3": "ENOSYS"}
    assert reply["results"] == expected
    assert reply["thread"] == [1] and reply["child"] == 7
    assert reply["seccomp"] == ["2"]  # filter mode, as the kernel reports it


def test_root_grader_refuses_to_run_bwrap_without_the_sandbox_user() -> None:
    """As root, a missing sandbox user is refused with the fix, never run as root instead."""
    sandbox = BwrapSandbox(user="grader-no-such-user")
    if os.geteuid() != 0:  # a student's laptop: bwrap runs as the grader itself
        assert sandbox.run_as() is None
        return
    with pytest.raises(SandboxUnavailable, match=r"scripts/setup\.sh"):
        sandbox.check()
    assert BwrapSandbox().run_as().name == SANDBOX_USER  # type: ignore[union-attr]


def test_staged_copy_drops_special_bits_and_keeps_links_as_links(
    make_spec: MakeSpec, tmp_path: Path
) -> None:
    """Staging never follows a link out of the package and copies no set-uid bit."""
    spec = make_spec("def answer(q):\n    return q\n")
    (spec.agent_dir / "shadow").symlink_to("/etc/shadow")
    tool = spec.agent_dir / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o4755)
    os.mkfifo(spec.agent_dir / "pipe")
    staged = stage(spec)
    try:
        assert (staged.agent / "shadow").is_symlink()
        assert os.readlink(staged.agent / "shadow") == "/etc/shadow"
        assert (staged.agent / "tool").stat().st_mode & 0o7777 == 0o755
        assert not (staged.agent / "pipe").exists()
        assert staged.root.parent == staging_root()
        assert staged.root.stat().st_mode & 0o777 == 0o700
    finally:
        staged.remove()


def test_staged_copies_of_a_dead_grader_are_swept(make_spec: MakeSpec) -> None:
    """A copy named after a grader process that no longer exists is removed by the sweep."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = staging_root() / f"{dead.pid}-0123456789abcdef"
    orphan.mkdir()
    staged = stage(make_spec("def answer(q):\n    return q\n"))  # our own: kept
    try:
        assert sweep_staged() >= 1
        assert not orphan.exists()
        assert staged.root.exists()
    finally:
        staged.remove()


def test_run_cgroups_of_a_dead_grader_are_swept(tmp_path: Path) -> None:
    """Run cgroups marked with a dead grader's pid are removed; a live grader's and foreign
    folders are kept."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    names = {
        "orphan": f"sub-0123456789ab-w{dead.pid}-0a1b2c3d-g{dead.pid}",
        "live": f"sub-0123456789ab-w{os.getpid()}-0a1b2c3d-g{os.getpid()}",
        "foreign": "someone-elses-group",
    }
    for controller in ("memory", "pids"):
        for name in names.values():
            (tmp_path / controller / CGROUP_PARENT / name).mkdir(parents=True)
    assert sweep_run_cgroups(tmp_path) == 2
    for controller in ("memory", "pids"):
        left = {path.name for path in (tmp_path / controller / CGROUP_PARENT).iterdir()}
        assert left == {names["live"], names["foreign"]}
