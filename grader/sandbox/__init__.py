"""Sandboxes for running untrusted agents, behind one interface (:mod:`.base`).

``docker`` (:mod:`.docker`), ``bwrap`` (:mod:`.bwrap`) and ``none`` (:mod:`.none`, unsandboxed);
the names are listed once, in :data:`.base.SandboxName`.
"""

from __future__ import annotations

from typing import assert_never

from grader.exceptions import SandboxUnavailable

from .base import SANDBOX_NAMES, AgentProcess, ExitInfo, LaunchSpec, Limits, Sandbox, SandboxName

__all__ = [
    "SANDBOX_NAMES",
    "AgentProcess",
    "ExitInfo",
    "LaunchSpec",
    "Limits",
    "Sandbox",
    "SandboxName",
    "make_sandbox",
    "pick_sandbox",
]


def make_sandbox(name: str) -> Sandbox:
    """The sandbox called ``name`` (not yet checked for usability)."""
    if name not in SANDBOX_NAMES:
        raise SandboxUnavailable(
            f"unknown sandbox '{name}' (choose from {', '.join(SANDBOX_NAMES)})"
        )
    # Imported on demand: the Docker SDK and the process launcher are only loaded when used.
    if name == "docker":
        from .docker import DockerSandbox

        return DockerSandbox()
    if name == "bwrap":
        from .bwrap import BwrapSandbox

        return BwrapSandbox()
    if name == "none":
        from .none import NoSandbox

        return NoSandbox()
    assert_never(name)


def pick_sandbox(preferred: tuple[str, ...] = ("docker", "bwrap")) -> tuple[Sandbox, list[str]]:
    """The first usable isolating sandbox, and why the ones before it were skipped."""
    skipped: list[str] = []
    for name in preferred:
        try:
            sandbox = make_sandbox(name)
            sandbox.check()
        except SandboxUnavailable as exc:
            skipped.append(f"{name}: {exc}")
            continue
        return sandbox, skipped
    raise SandboxUnavailable("no sandbox is usable here (" + "; ".join(skipped) + ")")
