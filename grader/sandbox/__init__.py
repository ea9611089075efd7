"""Sandboxes for running untrusted agents, behind one interface (:mod:`.base`)."""

from __future__ import annotations

from grader.exceptions import SandboxUnavailable

from .base import AgentProcess, ExitInfo, LaunchSpec, Limits, Sandbox

SANDBOX_NAMES = ("docker", "bwrap", "none")

__all__ = [
    "SANDBOX_NAMES",
    "AgentProcess",
    "ExitInfo",
    "LaunchSpec",
    "Limits",
    "Sandbox",
    "make_sandbox",
    "pick_sandbox",
]


def make_sandbox(name: str) -> Sandbox:
    """The sandbox called ``name`` (not yet checked for usability)."""
    if name == "bwrap":
        from .bwrap import BwrapSandbox

        return BwrapSandbox()
    if name == "docker":
        from .docker import DockerSandbox

        return DockerSandbox()
    if name == "none":
        from .unsafe import UnsandboxedRunner

        return UnsandboxedRunner()
    raise SandboxUnavailable(f"unknown sandbox '{name}' (choose from {', '.join(SANDBOX_NAMES)})")


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
