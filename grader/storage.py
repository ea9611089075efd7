"""Content-addressed storage of uploaded archives.

Two stores keep archives the same way, chosen by ``GRADER_STORAGE_URL``: this module's
:class:`ArchiveStore`, a folder (``GRADER_STORAGE_DIR``, the single-machine default), and
:class:`grader.db.archive_store.DatabaseArchiveStore`, chunks in PostgreSQL (workers on other
hosts need only the database and Redis). :class:`ArchiveStoreBase` is what both promise:

* an archive is kept once under its SHA-256, whoever uploads it and however often;
* an upload is first written to a private spool file on the receiving host while hashed
  (:meth:`~ArchiveStoreBase.receiving`), then stored whole or not at all
  (:meth:`~ArchiveStoreBase.keep`), so a reader never sees a partial archive;
* a read (:meth:`~ArchiveStoreBase.fetched`) streams the archive to a local file and checks its
  SHA-256: damaged bytes are refused with :class:`StorageError`, never graded;
* storing the same bytes again refreshes the archive's time, which the garbage collector
  respects (:meth:`~ArchiveStoreBase.remove_unless_touched`).

In the folder store an archive lives under ``sha256/<first two hex digits>/<sha256>``. Files are
written to a private temporary name, flushed to disk and renamed into place, so two concurrent
uploads of the same bytes end with one file.

Archives no submission needs any more are removed by ``grader storage gc``
(:mod:`grader.storage_gc`), never while an upload of the same bytes may be under way.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NamedTuple

from grader.exceptions import StorageError, UploadTooLarge

_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 256 * 1024
MISSING = "the uploaded archive is missing from storage"


def check_sha256(sha256: str) -> str:
    """``sha256`` if it is 64 lower-case hex digits; ValueError otherwise."""
    if _SHA256.fullmatch(sha256) is None:
        raise ValueError(f"not a hex SHA-256: {sha256!r}")
    return sha256


def corrupt(sha256: str) -> StorageError:
    """The error of an archive whose stored bytes no longer match their SHA-256."""
    return StorageError(
        f"stored archive {sha256[:12]} is damaged: its bytes do not match its SHA-256"
    )


@dataclass(frozen=True)
class ReceivedFile:
    """An upload written to a private temporary file, with its hash and size."""

    path: Path
    sha256: str
    size: int


class StoredArchive(NamedTuple):
    """One stored archive: its SHA-256, size, and when it was stored or last re-uploaded."""

    sha256: str
    size: int
    #: A POSIX time stamp (the file's modification time in the folder store).
    touched: float


class ArchiveStoreBase(ABC):
    """What every archive store offers; uploads are spooled to ``spool`` on this host."""

    def __init__(self, spool: Path) -> None:
        #: Host-local folder of upload spool files (``incoming/``) and removals (``trash/``).
        self.spool = spool

    @property
    def _incoming(self) -> Path:
        return self.spool / "incoming"

    @property
    def _trash(self) -> Path:
        return self.spool / "trash"

    @contextmanager
    def receiving(
        self, stream: IO[bytes], filename: str, *, max_bytes: int
    ) -> Iterator[ReceivedFile]:
        """Write ``stream`` to a private folder as ``filename`` while hashing it.

        The folder (and the file, unless :meth:`keep` moved it) is removed when the block ends.
        Raises :class:`UploadTooLarge` past ``max_bytes``.
        """
        self._incoming.mkdir(parents=True, exist_ok=True)
        folder = self._incoming / secrets.token_hex(16)
        folder.mkdir(mode=0o700)
        try:
            path = folder / filename
            digest = hashlib.sha256()
            size = 0
            with path.open("xb") as out:
                while chunk := stream.read(_CHUNK):
                    size += len(chunk)
                    if size > max_bytes:
                        raise UploadTooLarge(f"upload is larger than {max_bytes} bytes")
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            yield ReceivedFile(path=path, sha256=digest.hexdigest(), size=size)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def sweep_incoming(self, *, older_than: float) -> int:
        """Remove upload folders left by killed server processes; return how many."""
        removed = 0
        for parent in (self._incoming, self._trash):
            if not parent.is_dir():
                continue
            for entry in parent.iterdir():
                try:
                    if entry.lstat().st_mtime >= older_than:
                        continue
                except FileNotFoundError:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                removed += 1
        return removed

    def close(self) -> None:
        """Release what the store holds open (the database store's connections)."""
        return None

    @abstractmethod
    def keep(self, received: ReceivedFile) -> None:
        """Store a received file under its hash (once); refresh the time of one already stored."""

    @abstractmethod
    def exists(self, sha256: str) -> bool:
        """Whether the archive is stored."""

    @abstractmethod
    def count(self) -> int:
        """Archives stored (for tests and metrics)."""

    @abstractmethod
    def archives(self) -> Iterator[StoredArchive]:
        """Every stored archive."""

    @abstractmethod
    def remove_unless_touched(self, sha256: str, *, untouched_since: float) -> bool:
        """Remove the archive unless it was stored or re-uploaded at or after
        ``untouched_since`` (a time stamp); True when it was removed. A concurrent upload of the
        same bytes never loses its archive."""

    @abstractmethod
    def fetched(self, sha256: str) -> contextlib.AbstractContextManager[Path]:
        """A local file holding the archive, checked against its SHA-256, for the block.

        :class:`StorageError` when it is missing or its bytes do not match the hash.
        """


class ArchiveStore(ArchiveStoreBase):
    """The folder store: archives by SHA-256 under ``root`` (which also holds the spool)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.root = root

    @property
    def _objects(self) -> Path:
        return self.root / "sha256"

    def path_for(self, sha256: str) -> Path:
        return self._objects / check_sha256(sha256)[:2] / sha256

    def exists(self, sha256: str) -> bool:
        return self.path_for(sha256).is_file()

    def count(self) -> int:
        """Archives stored (for tests and metrics)."""
        if not self._objects.is_dir():
            return 0
        return sum(1 for path in self._objects.glob("*/*") if path.is_file())

    def keep(self, received: ReceivedFile) -> None:
        """Store a received file under its hash (once).

        An archive already stored gets its modification time refreshed: the garbage collector
        never removes an archive touched within its grace period (see :mod:`grader.db.retention`).
        """
        target = self.path_for(received.sha256)
        try:
            os.utime(target)
            return
        except FileNotFoundError:
            pass  # not stored yet (or just collected): store this copy
        target.parent.mkdir(parents=True, exist_ok=True)
        received.path.chmod(0o444)
        # Same file system (incoming/ is under root): an atomic rename. A concurrent upload of
        # the same bytes renames identical content over it, which is harmless.
        os.replace(received.path, target)
        _fsync_dir(target.parent)

    def archives(self) -> Iterator[StoredArchive]:
        """Every stored archive: its SHA-256, size and modification time."""
        if not self._objects.is_dir():
            return
        for path in self._objects.glob("*/*"):
            if _SHA256.fullmatch(path.name) is None:
                continue
            try:
                status = path.stat()
            except FileNotFoundError:
                continue  # removed meanwhile
            yield StoredArchive(path.name, status.st_size, status.st_mtime)

    def remove_unless_touched(self, sha256: str, *, untouched_since: float) -> bool:
        """Remove the archive unless it was stored or re-uploaded at or after ``untouched_since``
        (a time stamp); True when it was removed.

        The archive is first renamed out of place, then its modification time is read: an upload
        of the same bytes that refreshed it (:meth:`keep`) before the rename shows up in that
        time, and the file is put back; one that comes after the rename finds no file and
        stores its own copy. So a concurrent upload never loses its archive.
        """
        target = self.path_for(sha256)
        self._trash.mkdir(parents=True, exist_ok=True)
        doomed = self._trash / f"{sha256}.{secrets.token_hex(8)}"
        try:
            os.rename(target, doomed)
        except FileNotFoundError:
            return False  # another collector got there first
        try:
            touched = doomed.stat().st_mtime
        except FileNotFoundError:
            return True  # an old file another collector's sweep of trash/ removed meanwhile
        if touched >= untouched_since:
            with contextlib.suppress(FileExistsError):  # a fresh copy is already in place
                os.link(doomed, target)
            doomed.unlink()
            return False
        doomed.unlink()
        return True

    def open_path(self, sha256: str) -> Path:
        """The stored archive for ``sha256``; :class:`StorageError` when it is missing."""
        path = self.path_for(sha256)
        if not path.is_file():
            raise StorageError(MISSING)
        return path

    @contextmanager
    def fetched(self, sha256: str) -> Iterator[Path]:
        """The stored file itself, once its bytes were read and checked against the hash."""
        path = self.open_path(sha256)
        digest = hashlib.sha256()
        with path.open("rb") as source:
            while chunk := source.read(_CHUNK):
                digest.update(chunk)
        if digest.hexdigest() != sha256:
            raise corrupt(sha256)
        yield path


def _fsync_dir(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
