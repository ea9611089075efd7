"""Compile a deny-list seccomp filter to BPF with libseccomp's Python bindings.

Run as ``/usr/bin/python3 -I seccomp_helper.py`` (Debian's ``python3-seccomp`` is installed for
the system Python, not for the grader's virtualenv). Reads the policy as JSON on stdin::

    {"errno": {"EPERM": ["mount", ...], "ENOSYS": ["clone3"]},
     "clone_flags": {"EPERM": [268435456, ...]}}

and writes the raw BPF program for the native architecture to stdout (what ``bwrap --seccomp``
reads). Every syscall not named is allowed; a named one fails with the given errno instead of
killing the process, so an agent sees a clear error. Stdlib + ``seccomp`` only.
"""

import errno
import json
import sys
from typing import Any

try:
    import seccomp
except ImportError:
    sys.stderr.write("python3-seccomp is not installed\n")
    sys.exit(2)


def build(policy: dict[str, dict[str, list[Any]]]) -> Any:
    program = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for errno_name, syscalls in policy.get("errno", {}).items():
        action = seccomp.ERRNO(getattr(errno, errno_name))
        for name in syscalls:
            program.add_rule(action, name)
    for errno_name, flags in policy.get("clone_flags", {}).items():
        action = seccomp.ERRNO(getattr(errno, errno_name))
        for flag in flags:
            # One rule per flag: libseccomp compares (arg & mask) == datum, so "any of these
            # bits set" is a union of single-bit rules.
            program.add_rule(action, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    return program


def main() -> None:
    build(json.load(sys.stdin)).export_bpf(sys.stdout)


if __name__ == "__main__":
    main()
