"""Content-addressed archive storage: the folder store (grader/storage.py) and the database store
(grader/db/archive_store.py) pass the same tests, chosen by GRADER_STORAGE_URL."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.db.archive_store import DatabaseArchiveStore, open_archive_store
from grader.exceptions import SettingsError, StorageError, UploadTooLarge
from grader.storage import ArchiveStore, ArchiveStoreBase
from tests.server.conftest import REPO, flip_a_byte, set_touched

_MIB = 1024 * 1024


@pytest.fixture
def store(storage_url: str, tmp_path: Path) -> Iterator[ArchiveStoreBase]:
    """The store GRADER_STORAGE_URL names (its spool under tmp_path/spool), empty."""
    chosen = open_archive_store(
        storage_url, storage_dir=tmp_path / "spool", database_url="sqlite:///unused.db"
    )
    yield chosen
    chosen.close()


def put(store: ArchiveStoreBase, data: bytes) -> str:
    """Receive and keep ``data`` as an upload would; its SHA-256."""
    with store.receiving(io.BytesIO(data), "a.zip", max_bytes=len(data) + 1000) as received:
        store.keep(received)
    return received.sha256


def read(store: ArchiveStoreBase, sha256: str) -> bytes:
    with store.fetched(sha256) as path:
        return path.read_bytes()


def test_the_url_chooses_the_store(tmp_path: Path, database_store_url: str) -> None:
    """Empty and file:// URLs give the folder store, a PostgreSQL URL the database store, and
    anything else is refused with one line."""
    folder = open_archive_store("", storage_dir=tmp_path / "a", database_url="sqlite://")
    assert isinstance(folder, ArchiveStore) and folder.root == tmp_path / "a"
    other = open_archive_store(
        (tmp_path / "b").as_uri(), storage_dir=tmp_path / "a", database_url="sqlite://"
    )
    assert isinstance(other, ArchiveStore) and other.root == tmp_path / "b"
    database = open_archive_store(
        database_store_url, storage_dir=tmp_path / "a", database_url="sqlite://"
    )
    assert isinstance(database, DatabaseArchiveStore)
    database.close()
    with pytest.raises(SettingsError, match="GRADER_STORAGE_URL"):
        open_archive_store("s3://bucket", storage_dir=tmp_path, database_url="sqlite://")


def test_archives_are_stored_once_under_their_sha256(store: ArchiveStoreBase) -> None:
    """The same bytes received twice end as one archive named by their hash, read back intact,
    with nothing left in the spool."""
    data = b"PK\x03\x04 some archive bytes"
    digest = hashlib.sha256(data).hexdigest()
    for _ in range(2):
        with store.receiving(io.BytesIO(data), "a.zip", max_bytes=1000) as received:
            assert received.sha256 == digest and received.size == len(data)
            store.keep(received)
    assert store.count() == 1 and store.exists(digest)
    assert [(a.sha256, a.size) for a in store.archives()] == [(digest, len(data))]
    assert read(store, digest) == data
    assert list((store.spool / "incoming").iterdir()) == []  # nothing left behind
    if isinstance(store, ArchiveStore):
        path = store.path_for(digest)
        assert path == store.root / "sha256" / digest[:2] / digest
        assert path.stat().st_mode & 0o222 == 0


def test_receiving_more_than_the_limit_fails_and_keeps_nothing(store: ArchiveStoreBase) -> None:
    """A stream over max_bytes raises UploadTooLarge and leaves no archive and no spool file."""
    with pytest.raises(UploadTooLarge), store.receiving(io.BytesIO(b"x" * 101), "a", max_bytes=100):
        pass
    assert store.count() == 0 and list((store.spool / "incoming").iterdir()) == []


def test_a_missing_archive_is_a_storage_error(store: ArchiveStoreBase) -> None:
    """Asking for an archive that is not there is infrastructure trouble, with a safe message;
    a name that is not a SHA-256 is refused before any lookup."""
    with pytest.raises(StorageError, match="missing from storage"), store.fetched("0" * 64):
        pass
    assert not store.exists("0" * 64)
    with pytest.raises(ValueError):
        store.exists("../../etc/passwd")


@pytest.mark.parametrize("offset", [0, 1_500_000])
def test_a_flipped_byte_is_refused_on_read(store: ArchiveStoreBase, offset: int) -> None:
    """An archive damaged after it was stored (one byte inverted, in the first or a later
    chunk) is refused with a clear StorageError instead of being handed to a grader."""
    data = os.urandom(2 * _MIB)
    digest = put(store, data)
    flip_a_byte(store, digest, offset)
    with (
        pytest.raises(StorageError, match=f"stored archive {digest[:12]} is damaged"),
        store.fetched(digest),
    ):
        pass
    assert list((store.spool / "incoming").iterdir()) == []  # the damaged copy is not kept


def test_gc_removal_spares_an_archive_a_new_upload_of_the_same_bytes_refreshed(
    store: ArchiveStoreBase,
) -> None:
    """Re-uploading stored bytes refreshes the archive's time, so the collector leaves it; an
    untouched old archive is removed, and a later upload stores it again."""
    data = b"PK\x03\x04 archive"
    long_ago = time.time() - 7200
    cutoff = time.time() - 3600
    digest = put(store, data)
    set_touched(store, digest, long_ago)
    put(store, data)  # the same bytes again: no new archive, a fresh time
    assert not store.remove_unless_touched(digest, untouched_since=cutoff)
    assert read(store, digest) == data
    set_touched(store, digest, long_ago)
    assert store.remove_unless_touched(digest, untouched_since=cutoff)
    assert not store.exists(digest) and store.count() == 0
    if isinstance(store, ArchiveStore):
        assert list((store.root / "trash").iterdir()) == []
    put(store, data)
    assert read(store, digest) == data


#: Run in a fresh interpreter. The kernel's peak RSS (VmHWM) is reset (``clear_refs`` 5) before
#: each phase and read after it, so each figure is the peak of that phase alone. The control
#: phase reads the archive whole: it shows the measure sees a 20 MiB buffer.
STREAM_SCRIPT = """
import hashlib, json, os, re, sys
from pathlib import Path
from grader.db.archive_store import open_archive_store

url, spool, size = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
source = spool / "source.bin"
spool.mkdir(parents=True, exist_ok=True)
digest = hashlib.sha256()
with source.open("wb") as out:
    for _ in range(size // (1 << 20)):
        piece = os.urandom(1 << 20)
        digest.update(piece)
        out.write(piece)
del piece
store = open_archive_store(url, storage_dir=spool, database_url="sqlite:///unused.db")
store.exists("0" * 64)  # connect before measuring

def status(field):
    text = Path("/proc/self/status").read_text()
    return int(re.search(field + r":\\s+(\\d+) kB", text).group(1)) * 1024

def reset():
    Path("/proc/self/clear_refs").write_text("5")
    return status("VmRSS")

base = reset()
with source.open("rb") as stream, store.receiving(stream, "a.zip", max_bytes=size) as received:
    store.keep(received)
upload_growth = status("VmHWM") - base
base = reset()
check = hashlib.sha256()
with store.fetched(received.sha256) as path, path.open("rb") as fetched:
    while piece := fetched.read(1 << 16):
        check.update(piece)
read_growth = status("VmHWM") - base
base = reset()
whole = source.read_bytes()
control_growth = status("VmHWM") - base
del whole
store.close()
print(json.dumps({
    "sha256": received.sha256, "expected": digest.hexdigest(), "read": check.hexdigest(),
    "size": received.size, "upload_growth": upload_growth, "read_growth": read_growth,
    "control_growth": control_growth,
}))
"""


def test_a_20_mib_upload_is_streamed_with_bounded_memory(storage_url: str, tmp_path: Path) -> None:
    """A 20 MiB upload is stored and read back intact while the process's peak RSS grows by
    far less than the archive (the kernel's VmHWM in a fresh interpreter; a control read of the
    whole file shows the measure would see it)."""
    size = 20 * _MIB
    result = subprocess.run(
        [sys.executable, "-c", STREAM_SCRIPT, storage_url, str(tmp_path / "spool"), str(size)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    print(f"\n20 MiB via {storage_url.split(':')[0]}: {figures}")
    assert figures["sha256"] == figures["expected"] == figures["read"]
    assert figures["size"] == size
    assert figures["upload_growth"] < 10 * _MIB, figures
    assert figures["read_growth"] < 10 * _MIB, figures
    assert figures["control_growth"] >= size, figures
