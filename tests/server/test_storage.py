"""Content-addressed archive storage (grader/storage.py)."""

from __future__ import annotations

import hashlib
import io
import os
import time
from pathlib import Path

import pytest

from grader.exceptions import StorageError, UploadTooLarge
from grader.storage import ArchiveStore


def test_archives_are_stored_once_under_their_sha256(tmp_path: Path) -> None:
    """The same bytes received twice end as one read-only file named by their hash."""
    store = ArchiveStore(tmp_path)
    data = b"PK\x03\x04 some archive bytes"
    digest = hashlib.sha256(data).hexdigest()
    for _ in range(2):
        with store.receiving(io.BytesIO(data), "a.zip", max_bytes=1000) as received:
            assert received.sha256 == digest and received.size == len(data)
            path = store.keep(received)
    assert path == tmp_path / "sha256" / digest[:2] / digest
    assert path.read_bytes() == data and store.count() == 1
    assert path.stat().st_mode & 0o222 == 0
    assert list((tmp_path / "incoming").iterdir()) == []  # nothing left behind


def test_receiving_more_than_the_limit_fails_and_keeps_nothing(tmp_path: Path) -> None:
    """A stream over max_bytes raises UploadTooLarge and leaves no file."""
    store = ArchiveStore(tmp_path)
    with pytest.raises(UploadTooLarge), store.receiving(io.BytesIO(b"x" * 101), "a", max_bytes=100):
        pass
    assert store.count() == 0 and list((tmp_path / "incoming").iterdir()) == []


def test_a_missing_archive_is_a_storage_error(tmp_path: Path) -> None:
    """Asking for an archive that is not there is infrastructure trouble, with a safe message."""
    with pytest.raises(StorageError, match="missing from storage"):
        ArchiveStore(tmp_path).open_path("0" * 64)
    with pytest.raises(ValueError):
        ArchiveStore(tmp_path).path_for("../../etc/passwd")


def test_gc_removal_spares_an_archive_a_new_upload_of_the_same_bytes_refreshed(
    tmp_path: Path,
) -> None:
    """Re-uploading stored bytes refreshes the file's time, so the collector leaves it; an
    untouched old archive is removed, and a later upload stores it again."""
    store = ArchiveStore(tmp_path)
    data = b"PK\x03\x04 archive"
    long_ago = time.time() - 7200
    cutoff = time.time() - 3600

    def upload_again() -> Path:
        with store.receiving(io.BytesIO(data), "a.zip", max_bytes=1000) as received:
            return store.keep(received)

    path = upload_again()
    os.utime(path, (long_ago, long_ago))
    upload_again()  # the same bytes again: no new file, a fresh time
    digest = hashlib.sha256(data).hexdigest()
    assert not store.remove_unless_touched(digest, untouched_since=cutoff)
    assert path.read_bytes() == data
    os.utime(path, (long_ago, long_ago))
    assert store.remove_unless_touched(digest, untouched_since=cutoff)
    assert not path.exists() and list((tmp_path / "trash").iterdir()) == []
    assert upload_again().read_bytes() == data
