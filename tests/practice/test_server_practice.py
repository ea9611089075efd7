"""The ``/practice`` blueprint: page, manifest and downloads, without authentication."""

from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from grader.core.casesets import load_case_set
from grader.db.engine import make_engine
from grader.practice.publish import publish_practice_set
from grader.server import create_app
from grader.server import practice as practice_pages
from grader.settings import Settings
from tests.conftest import PRIVATE_CASES, REPO

PRACTICE_CASES = REPO / "practice_cases"
REDIS_URL = os.environ.get("GRADER_TEST_REDIS_URL", "redis://127.0.0.1:6379") + "/15"


class PracticeSettings(Settings):
    """Settings with ``practice_dir`` (GRADER_PRACTICE_DIR), which the server reads."""

    practice_dir: Path = Path("var/practice")


@pytest.fixture
def practice_dir(tmp_path: Path) -> Path:
    return tmp_path / "practice"


@pytest.fixture
def app(tmp_path: Path, practice_dir: Path) -> Iterator[Flask]:
    """The real app (SQLite, the test Redis database) serving ``practice_dir``."""
    settings = PracticeSettings(
        _env_file=None,  # type: ignore[call-arg]
        database_url=f"sqlite:///{tmp_path / 'grader.db'}",
        redis_url=REDIS_URL,
        cases_dir=PRIVATE_CASES,
        storage_dir=tmp_path / "storage",
        secret_key="test-secret-key",
        rate_limit="1000 per minute",
        practice_dir=practice_dir,
    )
    application = create_app(settings, engine=make_engine(settings.database_url))
    if "practice" not in application.blueprints:  # until create_app registers it
        application.register_blueprint(practice_pages.bp)
    application.config["TESTING"] = True
    yield application
    application.extensions["grader"].redis.close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def publish_shipped_set(out: Path) -> None:
    publish_practice_set(PRACTICE_CASES, PRIVATE_CASES, out, replace=True)


def test_page_shows_the_published_set_without_login(
    client: FlaskClient, practice_dir: Path
) -> None:
    """/practice lists the version, every public question and the download links."""
    publish_shipped_set(practice_dir)
    response = client.get("/practice")
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    version = load_case_set(practice_dir).version
    assert version in page
    assert "/practice/download/tar.gz" in page and "/practice/download/zip" in page
    for case in load_case_set(PRACTICE_CASES).cases:
        assert case.id in page
    assert "Mona Lisa" in page


def test_page_never_shows_private_questions(client: FlaskClient, practice_dir: Path) -> None:
    """Nothing of the private set appears on the public page or in the manifest."""
    publish_shipped_set(practice_dir)
    served = client.get("/practice").get_data(as_text=True)
    served += client.get("/practice/manifest.json").get_data(as_text=True)
    for case in load_case_set(PRIVATE_CASES).cases:
        assert case.question not in served


def test_downloads_unpack_to_the_published_set(client: FlaskClient, practice_dir: Path) -> None:
    """Both archives download as attachments holding the manifest and the corpus."""
    publish_shipped_set(practice_dir)
    version = load_case_set(practice_dir).version
    tar_response = client.get("/practice/download/tar.gz")
    assert tar_response.status_code == 200
    assert tar_response.mimetype == "application/gzip"
    assert f"practice-set-{version}.tar.gz" in tar_response.headers["Content-Disposition"]
    with tarfile.open(fileobj=io.BytesIO(tar_response.data)) as archive:
        manifest_member = archive.extractfile(f"practice-set-{version}/manifest.json")
        assert manifest_member is not None
        assert json.load(manifest_member)["version"] == version
    zip_response = client.get("/practice/download/zip")
    assert zip_response.status_code == 200
    with zipfile.ZipFile(io.BytesIO(zip_response.data)) as archive:
        assert f"practice-set-{version}/corpus/rag-basics.md" in archive.namelist()


def test_download_answers_304_to_its_etag(client: FlaskClient, practice_dir: Path) -> None:
    """The archive's SHA-256 is its ETag, so an unchanged release is not sent twice."""
    publish_shipped_set(practice_dir)
    first = client.get("/practice/download/tar.gz")
    etag = first.headers["ETag"]
    again = client.get("/practice/download/tar.gz", headers={"If-None-Match": etag})
    assert again.status_code == 304


def test_manifest_is_served_as_json(client: FlaskClient, practice_dir: Path) -> None:
    """/practice/manifest.json is the published manifest."""
    publish_shipped_set(practice_dir)
    response = client.get("/practice/manifest.json")
    assert response.status_code == 200
    assert response.json == json.loads((practice_dir / "manifest.json").read_text())


def test_nothing_published_is_a_404_page(client: FlaskClient) -> None:
    """Before the first publication every practice route answers 404."""
    assert client.get("/practice").status_code == 404
    assert client.get("/practice/manifest.json").status_code == 404
    assert client.get("/practice/download/tar.gz").status_code == 404


def test_unknown_archive_format_is_a_404(client: FlaskClient, practice_dir: Path) -> None:
    """Only .tar.gz and .zip are offered."""
    publish_shipped_set(practice_dir)
    assert client.get("/practice/download/rar").status_code == 404
    assert client.get("/practice/download/..%2fmanifest.json").status_code == 404
