"""The ``none`` sandbox: the agent runs as a plain child process with the grader's privileges.

Only for trusted local code (your own agent on your own machine). It still gets the listed
environment only, rlimits (or run cgroups), per-case deadlines and output caps, but it can read
and write anything the grader can, and reach the network.
"""

from __future__ import annotations

import sys

from .base import RUNNER_PATH, AgentProcess, LaunchSpec, Sandbox
from .process import ProcessAgent, runner_env, sweep_run_cgroups


class NoSandbox(Sandbox):
    name = "none"
    isolating = False

    def check(self) -> None:
        return None

    def launch(self, spec: LaunchSpec) -> AgentProcess:
        env = runner_env(
            spec,
            agent_dir=str(spec.agent_dir.resolve()),
            corpus_dir=str(spec.corpus_dir.resolve()),
            gateway_mount=str(spec.gateway.folder) if spec.gateway else None,
        )
        return ProcessAgent([sys.executable, "-I", str(RUNNER_PATH)], env, spec)

    def sweep_orphans(self) -> int:
        """Remove the run cgroups of graders that died."""
        return sweep_run_cgroups()
