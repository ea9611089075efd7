"""What the process sandboxes add around bubblewrap: an unprivileged host user and seccomp.

**The sandbox user.** When the grader runs as root, the bubblewrap child drops to the
``grader-sandbox`` system user (``scripts/setup.sh`` creates it: no login shell, no home)
before it runs ``bwrap``. bubblewrap then builds its user namespace as that user, so whatever
uid the agent has inside maps to ``grader-sandbox`` on the host, never to root: a process that
escaped the sandbox would be nobody in particular. A root grader refuses to run bubblewrap
without the user rather than fall back to root. A grader that is not root (a student's laptop)
runs ``bwrap`` as itself, as before: the agent is then that user outside the sandbox.

**The seccomp filter.** A deny list, compiled once per grader process by libseccomp's Python
bindings (Debian's ``python3-seccomp``, run under ``/usr/bin/python3`` by
:mod:`grader.sandbox.seccomp_helper`) and handed to ``bwrap --seccomp FD``, which loads it just
before it runs the runner (bubblewrap's own mounts happen before that). Denied calls fail with
``EPERM`` (``clone3`` with ``ENOSYS``, so the C library falls back to ``clone``, whose namespace
flags are checked).
"""

from __future__ import annotations

import contextlib
import functools
import grp
import json
import os
import pwd
import subprocess
from dataclasses import dataclass
from pathlib import Path

from grader.exceptions import SandboxUnavailable

SANDBOX_USER = "grader-sandbox"
SYSTEM_PYTHON = "/usr/bin/python3"
HELPER = Path(__file__).with_name("seccomp_helper.py")
SETUP_FIX = "run scripts/setup.sh as root"

#: Syscalls that fail with EPERM inside the bubblewrap sandbox. Mounting (old and new mount
#: API), namespaces, keyrings, BPF, perf, every form of ptrace and cross-process memory access
#: (an agent has no debugger to run; denying it whole is simpler than "non-children only"),
#: and loading kernels or modules.
DENIED_SYSCALLS: tuple[str, ...] = (
    "mount",
    "umount2",
    "pivot_root",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "unshare",
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
)
#: clone() flags that create namespaces: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER,
#: NEWPID, NEWNET. clone3 passes its flags in memory a filter cannot read, so it gets ENOSYS.
NAMESPACE_CLONE_FLAGS: tuple[int, ...] = (
    0x00020000,
    0x02000000,
    0x04000000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)


@dataclass(frozen=True)
class SandboxUser:
    """The host user bubblewrap runs as."""

    name: str
    uid: int
    gid: int

    def drop(self) -> None:
        """Become this user for good (in the child, after joining cgroups as root)."""
        os.setgroups([])
        os.setresgid(self.gid, self.gid, self.gid)
        os.setresuid(self.uid, self.uid, self.uid)


def sandbox_user(name: str = SANDBOX_USER) -> SandboxUser | None:
    """The user to drop to: ``None`` when the grader is not root (bwrap runs as the grader).

    Raises :class:`SandboxUnavailable` when the grader is root and the user is missing or is
    itself privileged.
    """
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise SandboxUnavailable(
            f"the grader runs as root but the sandbox user '{name}' does not exist; "
            f"{SETUP_FIX} (it runs useradd --system --no-create-home --shell "
            f"/usr/sbin/nologin {name})"
        ) from None
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise SandboxUnavailable(f"the sandbox user '{name}' must not be root or in group root")
    return SandboxUser(name, entry.pw_uid, entry.pw_gid)


def sandbox_group_name(user: SandboxUser) -> str:
    with contextlib.suppress(KeyError):
        return grp.getgrgid(user.gid).gr_name
    return str(user.gid)


def seccomp_policy() -> dict[str, dict[str, list[str] | list[int]]]:
    """The filter as the helper reads it (see :mod:`grader.sandbox.seccomp_helper`)."""
    return {
        "errno": {"EPERM": list(DENIED_SYSCALLS), "ENOSYS": ["clone3"]},
        "clone_flags": {"EPERM": list(NAMESPACE_CLONE_FLAGS)},
    }


@functools.cache
def seccomp_program(python: str = SYSTEM_PYTHON) -> bytes:
    """The compiled BPF program; built once per process (about 30 ms) since the list is fixed."""
    fix = "install python3-seccomp (apt-get install python3-seccomp, or scripts/setup.sh)"
    try:
        done = subprocess.run(
            [python, "-I", str(HELPER)],
            input=json.dumps(seccomp_policy()).encode(),
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"cannot build the seccomp filter with {python}: {exc}") from None
    if done.returncode != 0 or not done.stdout or len(done.stdout) % 8:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        reason = detail[-1] if detail else f"exit {done.returncode}"
        raise SandboxUnavailable(f"cannot build the seccomp filter ({reason}); {fix}")
    return done.stdout


def seccomp_fd() -> int:
    """A fresh in-memory file holding the program, positioned at its start, for one run."""
    fd = os.memfd_create("grader-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, seccomp_program())
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
