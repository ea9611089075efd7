"""No sandbox at all: the agent runs as a plain child process with the grader's privileges.

Only for trusted local code (your own agent on your own machine). It still gets the listed
environment only, rlimits, per-case deadlines and output caps, but it can read and write
anything the grader can, and reach the network.
"""

from __future__ import annotations

import sys

from .base import RUNNER_PATH, AgentProcess, LaunchSpec, Sandbox
from .process import ProcessAgent, runner_env


class UnsandboxedRunner(Sandbox):
    name = "none"
    isolating = False

    def check(self) -> None:
        return None

    def launch(self, spec: LaunchSpec) -> AgentProcess:
        env = runner_env(
            spec, agent_dir=str(spec.agent_dir.resolve()), corpus_dir=str(spec.corpus_dir.resolve())
        )
        return ProcessAgent([sys.executable, "-I", str(RUNNER_PATH)], env, spec)
