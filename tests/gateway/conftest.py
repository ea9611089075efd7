"""Fixtures for the model gateway: the course model server as a real process, case sets."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from grader.core.casesets import CaseSet, load_case_set
from tests.conftest import write_case_set

UPSTREAM_KEY = "sk-upstream-7f3c91d2-never-in-a-sandbox"
MODELS_POLICY = """
case_timeout_seconds = {timeout}
setup_timeout_seconds = 20
run_timeout_seconds = 120
memory_limit_mb = 256
pids_limit = 48
{extra}

[models.course-chat]
upstream = "course-extractive"
input_usd_per_mtok = 0.15
output_usd_per_mtok = 0.60
prices_date = "2026-12-01"

[models.course-embed]
upstream = "course-embed"
input_usd_per_mtok = 0.02
prices_date = "2026-12-01"

[model_limits]
{limits}
"""
DOCUMENTS = {
    "rag-basics": "Chunks overlap so no sentence is cut. Overlap keeps context across chunk "
    "borders.\n\nRetrieval ranks the chunks before the model reads them.",
}
CASES = [
    {
        "id": "g1",
        "kind": "answerable",
        "question": "zq-heron-417: why do chunks overlap?",
        "expected_citations": ["rag-basics"],
        "required_concepts": [["overlap"]],
    },
    {
        "id": "g2",
        "kind": "answerable",
        "question": "zq-falcon-228: why does chunk overlap matter?",
        "expected_citations": ["rag-basics"],
        "required_concepts": [["overlap"]],
    },
    {
        "id": "g3",
        "kind": "refusal",
        "question": "zq-osprey-993: what was the score yesterday?",
        "safety": True,
    },
]
SECRET_FRAGMENTS = ("heron", "falcon", "osprey", "zq-", "417", "228", "993")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class CourseModel:
    """A ``grader model serve`` process."""

    process: subprocess.Popen[bytes]
    url: str
    key: str

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


def start_course_model(*, key: str = UPSTREAM_KEY, delay_ms: float = 0) -> CourseModel:
    """Start the course model server as its own process and wait until it answers."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grader",
            "model",
            "serve",
            "--port",
            str(port),
            "--api-key",
            key,
            "--delay-ms",
            str(delay_ms),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 20
    while True:
        request = urllib.request.Request(
            f"{url}/models", headers={"Authorization": f"Bearer {key}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=1) as response:
                json.load(response)
            return CourseModel(process, url, key)
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("the course model server did not start") from None
            time.sleep(0.1)


@pytest.fixture
def course_model() -> Iterator[CourseModel]:
    model = start_course_model()
    yield model
    model.kill()


@pytest.fixture
def model_case_set(tmp_path: Path) -> Callable[..., CaseSet]:
    """A case set whose policy names course-chat and course-embed, with given limits."""
    counter = iter(range(1000))

    def make(
        *,
        timeout: float = 4,
        limits: str = "",
        extra: str = "",
        cases: list[dict[str, Any]] | None = None,
    ) -> CaseSet:
        root = tmp_path / f"cases-{next(counter)}"
        policy = MODELS_POLICY.format(timeout=timeout, limits=limits, extra=extra)
        write_case_set(root, cases or CASES, policy=policy, documents=DOCUMENTS)
        return load_case_set(root)

    return make
