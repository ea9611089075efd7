"""An upload through the API graded by a worker, with each archive store (GRADER_STORAGE_URL):
the database store leaves no archive on disk, and a damaged archive is never graded."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy.engine import Engine

from grader.db.archive_store import open_archive_store
from grader.db.tables import FailureKind, SubmissionStatus
from grader.settings import Settings
from grader.storage import ArchiveStoreBase
from grader.worker.service import INFRASTRUCTURE_REASON
from tests.server.conftest import Account, flip_a_byte, submission_row


@pytest.fixture
def settings(make_settings: Callable[..., Settings], storage_url: str) -> Settings:
    """This module's settings: each archive store in turn."""
    return make_settings(storage_url=storage_url)


@pytest.fixture
def store(settings: Settings) -> Iterator[ArchiveStoreBase]:
    chosen = open_archive_store(
        settings.storage_url, storage_dir=settings.storage_dir, database_url=settings.database_url
    )
    yield chosen
    chosen.close()


def test_an_upload_is_graded_from_the_configured_store(
    client: FlaskClient,
    student: Account,
    submit: Callable[..., str],
    run_worker_burst: Callable[[], None],
    engine: Engine,
    settings: Settings,
    store: ArchiveStoreBase,
) -> None:
    """A package uploaded through the API lands in the configured store (and, for the database
    store, nowhere under GRADER_STORAGE_DIR but the empty spool) and a worker grades it."""
    submission_id = submit(student)
    sha256 = submission_row(engine, submission_id).package_sha256
    assert store.exists(sha256) and store.count() == 1
    if settings.storage_url.startswith("postgresql"):
        leftovers = [p for p in settings.storage_dir.rglob("*") if p.is_file()]
        assert leftovers == []
    run_worker_burst()
    body: dict[str, Any] = client.get(
        f"/api/submissions/{submission_id}", headers=student.headers
    ).get_json()
    assert body["status"] == "graded" and body["feedback"] is not None


def test_a_damaged_archive_fails_the_submission_as_infrastructure(
    student: Account,
    submit: Callable[..., str],
    run_worker_burst: Callable[[], None],
    engine: Engine,
    store: ArchiveStoreBase,
) -> None:
    """An archive whose stored bytes were altered is refused on read: the submission ends failed
    with the generic infrastructure reason, not graded from the damaged bytes."""
    submission_id = submit(student)
    flip_a_byte(store, submission_row(engine, submission_id).package_sha256, 10)
    run_worker_burst()
    row = submission_row(engine, submission_id)
    assert row.status == SubmissionStatus.FAILED
    assert row.failure_kind == FailureKind.INFRASTRUCTURE
    assert row.failure_reason == INFRASTRUCTURE_REASON
