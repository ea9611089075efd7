"""Fixtures for the Docker sandbox tests.

These tests are never skipped: CI starts the engine and builds the image first
(``scripts/docker-engine.sh && scripts/build-base-image.sh``), so a missing engine or image is
a broken CI set-up and the fixture fails with what to run.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from grader.exceptions import SandboxUnavailable
from grader.sandbox.base import AgentProcess, LaunchSpec, Limits
from grader.sandbox.docker import DockerSandbox


@pytest.fixture(scope="session")
def docker_sandbox() -> DockerSandbox:
    """A checked DockerSandbox; fails (not skips) when the engine or image is missing."""
    sandbox = DockerSandbox()
    try:
        sandbox.check()
    except SandboxUnavailable as exc:
        pytest.fail(
            f"Docker sandbox unavailable: {exc}. Run scripts/docker-engine.sh and "
            "scripts/build-base-image.sh (or grader sandbox build) before these tests.",
            pytrace=False,
        )
    return sandbox


@pytest.fixture(scope="session")
def docker_api(docker_sandbox: DockerSandbox) -> docker.DockerClient:
    """The engine client the sandbox uses (for inspecting containers from the tests)."""
    return docker_sandbox._connect()


class Driver:
    """A minimal line-level driver over an AgentProcess (the real one is grader.sandbox.session)."""

    def __init__(self, process: AgentProcess) -> None:
        self.process = process
        self.buffer = b""

    def line(self, timeout: float = 15.0) -> Any:
        """The next JSON line, or ``None`` at end of stream; fails the test on timeout."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no line from the sandbox within {timeout} s: {self.buffer[:200]!r}")
            chunk = self.process.read(left)
            if chunk == b"":
                return None
            if chunk:
                self.buffer += chunk
        raw, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(raw)

    def ready(self, timeout: float = 15.0) -> None:
        first = self.line(timeout)
        assert first == {"ready": True}, f"{first!r}; stderr: {self.process.stderr_tail()}"

    def ask(self, question: str, timeout: float = 15.0) -> Any:
        """Send one question and return the ``answer`` value (fails on an error line)."""
        qid = uuid.uuid4().hex
        payload = json.dumps({"qid": qid, "question": question}, ensure_ascii=False)
        self.process.write(payload.encode() + b"\n")
        reply = self.line(timeout)
        assert reply is not None, f"stream ended; stderr: {self.process.stderr_tail()}"
        assert reply.get("qid") == qid, reply
        assert "answer" in reply, f"{reply!r}; stderr: {self.process.stderr_tail()}"
        return reply["answer"]

    def wait_eof(self, timeout: float = 30.0) -> None:
        """Read until the stream ends (the container exited)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.read(deadline - time.monotonic()) == b"":
                return
        pytest.fail(f"sandbox still running after {timeout} s")


@pytest.fixture
def make_spec(tmp_path: Path) -> Callable[..., LaunchSpec]:
    """Write a tiny agent (agent.toml + agent.py with ``body``) and a corpus; return its spec."""
    counter = iter(range(1000))

    def factory(
        body: str,
        *,
        entrypoint: str = "agent:answer",
        setup: str | None = None,
        limits: Limits | None = None,
    ) -> LaunchSpec:
        root = tmp_path / f"run{next(counter)}"
        agent = root / "agent"
        corpus = root / "corpus"
        agent.mkdir(parents=True)
        corpus.mkdir()
        manifest = f'name = "test-agent"\nentrypoint = "{entrypoint}"\n'
        if setup:
            manifest += f'setup = "{setup}"\n'
        (agent / "agent.toml").write_text(manifest)
        (agent / "agent.py").write_text(textwrap.dedent(body))
        (corpus / "rag-basics.md").write_text("Chunks overlap so no sentence is cut.\n")
        # The sandbox user is not root and not the owner: everything must be world-readable.
        for path in (root, agent, corpus):
            os.chmod(path, 0o755)
        for path in (*agent.iterdir(), *corpus.iterdir()):
            os.chmod(path, 0o644)
        return LaunchSpec(
            agent_dir=agent,
            corpus_dir=corpus,
            entrypoint=entrypoint,
            setup=setup,
            label=f"test-{uuid.uuid4().hex[:12]}",
            limits=limits or Limits(),
        )

    return factory


@pytest.fixture
def launch(docker_sandbox: DockerSandbox) -> Iterator[Callable[[LaunchSpec], Driver]]:
    """Launch specs in the Docker sandbox; every container is terminated after the test."""
    processes: list[AgentProcess] = []

    def start(spec: LaunchSpec) -> Driver:
        process = docker_sandbox.launch(spec)
        processes.append(process)
        return Driver(process)

    yield start
    for process in processes:
        process.terminate()
