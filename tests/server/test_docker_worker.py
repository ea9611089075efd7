"""A real `grader worker` grading in the Docker sandbox, including after a SIGKILL."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import docker
import pytest
from flask.testing import FlaskClient
from sqlalchemy.engine import Engine
from sqlmodel import Session

from grader.db.results import list_gradings
from grader.db.tables import SubmissionStatus
from grader.sandbox.docker_orphans import OWNER_LABEL, ROLE_LABEL, SUBMISSION_LABEL
from grader.settings import Settings
from tests.server.conftest import Account, Proc, honest_agent, submission_row, wait_for
from tests.server.test_worker_processes import assert_graded_exactly_once, start_worker

pytestmark = pytest.mark.docker


def sandbox_containers(submission_id: str) -> list[dict[str, Any]]:
    """The submission's sandbox containers, as the engine lists them (id and labels). The
    listing alone, not an inspect per container: another test's container may be removed
    between the two."""
    client = docker.from_env()
    found = client.api.containers(all=True, filters={"label": f"{ROLE_LABEL}=sandbox"})
    prefix = f"sub-{submission_id[:12]}-"  # grader.worker.service.run_label
    return [
        c for c in found if (c.get("Labels") or {}).get(SUBMISSION_LABEL, "").startswith(prefix)
    ]


def test_killed_docker_worker_leaves_no_container_and_the_submission_is_graded_once(
    client: FlaskClient,
    student: Account,
    submit: Callable[..., str],
    engine: Engine,
    make_settings: Callable[..., Settings],
    processes: Callable[..., Proc],
) -> None:
    """A worker grading in Docker is SIGKILLed mid-run; its container is orphaned until the
    next worker sweeps it, and the submission is then graded once, in Docker."""
    settings = make_settings(sandbox="docker")
    submission_id = submit(student, honest_agent(delay=0.8, salt="docker"))
    doomed = start_worker(processes, settings, "docker-a")
    wait_for(
        lambda: submission_row(engine, submission_id).status == SubmissionStatus.RUNNING,
        timeout=30,
        message=f"docker-a never started grading\n{doomed.output()}",
    )
    orphan = wait_for(
        lambda: sandbox_containers(submission_id),
        timeout=20,
        message="no sandbox container for the submission",
    )[0]
    assert f":{doomed.process.pid}:" in orphan["Labels"][OWNER_LABEL]
    os.kill(doomed.process.pid, signal.SIGKILL)
    doomed.process.wait(timeout=10)

    survivor = start_worker(processes, settings, "docker-b")
    wait_for(
        lambda: submission_row(engine, submission_id).status == SubmissionStatus.GRADED,
        timeout=90,
        message=f"not graded after the kill\n{survivor.output()}",
    )
    assert_graded_exactly_once(engine, [submission_id])
    with Session(engine) as session:
        (grading,) = list_gradings(session=session, submission_id=submission_id)
    assert grading.sandbox == "docker"
    assert (grading.sandbox_image or "").startswith("sha256:")
    wait_for(
        lambda: sandbox_containers(submission_id) == [],
        timeout=20,
        message="a sandbox container outlived its grading",
    )
    assert orphan["Id"] not in {c["Id"] for c in docker.from_env().api.containers(all=True)}
