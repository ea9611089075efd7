"""What the server needs for ``/practice``: finding the release, page data and downloads."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from grader.core.casesets import load_case_set
from grader.practice.publish import publish_practice_set
from grader.practice.site import (
    PracticeUnavailable,
    build_download,
    cached_download,
    find_release,
    page_data,
)
from tests.conftest import PRIVATE_CASES, REPO

PRACTICE_CASES = REPO / "practice_cases"


def published(out: Path, when: datetime = datetime(2026, 9, 22, 9, 0, tzinfo=UTC)) -> Path:
    """Publish the shipped practice set to ``out`` at a fixed time."""
    publish_practice_set(PRACTICE_CASES, PRIVATE_CASES, out, clock=lambda: when)
    return out


def test_page_data_describes_the_published_set(tmp_path: Path) -> None:
    """The page gets the version, date, counts, every public question and the README."""
    release = find_release(published(tmp_path / "practice"))
    data = page_data(release)
    source = load_case_set(PRACTICE_CASES)
    assert data["version"] == release.version == load_case_set(tmp_path / "practice").version
    assert data["published_at"] == "2026-09-22T09:00:00Z"
    assert data["counts"]["by_kind"] == source.counts()
    assert [case["question"] for case in data["cases"]] == [c.question for c in source.cases]
    assert data["readme"].startswith("# Capstone practice set")
    assert data["downloads"] == {
        "tar.gz": f"practice-set-{release.version}.tar.gz",
        "zip": f"practice-set-{release.version}.zip",
    }


def test_newest_release_in_a_folder_of_releases_is_served(tmp_path: Path) -> None:
    """Given a folder of published sets, the newest by publication date is served."""
    published(tmp_path / "2026-09", datetime(2026, 9, 1, tzinfo=UTC))
    published(tmp_path / "2026-10", datetime(2026, 10, 1, tzinfo=UTC))
    published(tmp_path / "2026-08", datetime(2026, 8, 1, tzinfo=UTC))
    (tmp_path / "notes").mkdir()
    assert find_release(tmp_path).root == tmp_path / "2026-10"


@pytest.mark.parametrize("exists", [True, False])
def test_nothing_published_is_unavailable(tmp_path: Path, exists: bool) -> None:
    """An empty or missing practice folder raises PracticeUnavailable, not a crash."""
    folder = tmp_path / "practice"
    if exists:
        folder.mkdir()
    with pytest.raises(PracticeUnavailable):
        find_release(folder)


def test_tar_gz_download_holds_the_set_under_one_folder(tmp_path: Path) -> None:
    """The .tar.gz unpacks to practice-set-<version>/ with every published file, and loads."""
    out = published(tmp_path / "practice")
    (out / "corpus" / "link.md").symlink_to("/etc/passwd")
    data = build_download(out)
    stem = f"practice-set-{find_release(out).version}"
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        names = archive.getnames()
        assert all(name == stem or name.startswith(f"{stem}/") for name in names)
        assert f"{stem}/corpus/link.md" not in names
        assert all(member.isfile() or member.isdir() for member in archive.getmembers())
        archive.extractall(tmp_path / "unpacked", filter="data")
    unpacked = tmp_path / "unpacked" / stem
    assert load_case_set(unpacked).version == find_release(out).version
    manifest = json.loads((unpacked / "manifest.json").read_text())
    assert set(manifest["files"]) <= {name.removeprefix(f"{stem}/") for name in names}


def test_zip_download_matches_the_tar_gz(tmp_path: Path) -> None:
    """The .zip holds the same files as the .tar.gz."""
    out = published(tmp_path / "practice")
    with zipfile.ZipFile(io.BytesIO(build_download(out, "zip"))) as archive:
        zip_files = {info.filename: archive.read(info) for info in archive.infolist()}
    with tarfile.open(fileobj=io.BytesIO(build_download(out, "tar.gz"))) as archive:
        tar_files = {
            member.name: archive.extractfile(member).read()  # type: ignore[union-attr]
            for member in archive.getmembers()
            if member.isfile()
        }
    assert zip_files == tar_files


def test_downloads_are_deterministic_and_cached(tmp_path: Path) -> None:
    """Two builds of one release give the same bytes, so the SHA-256 can be an ETag."""
    out = published(tmp_path / "practice")
    assert build_download(out) == build_download(out)
    assert build_download(out, "zip") == build_download(out, "zip")
    release = find_release(out)
    first = cached_download(release, "tar.gz")
    assert first is cached_download(release, "tar.gz")
    assert first.filename.endswith(".tar.gz") and first.media_type == "application/gzip"
    assert first.data == build_download(out)


def test_download_of_an_unpublished_folder_is_refused(tmp_path: Path) -> None:
    """Only a published folder (with a manifest) can be packed."""
    with pytest.raises(PracticeUnavailable):
        build_download(PRACTICE_CASES)
