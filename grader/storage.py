"""Content-addressed storage of uploaded archives (``GRADER_STORAGE_DIR``).

An archive is kept once under ``sha256/<first two hex digits>/<sha256>``, whoever uploads it and
however often. Files are written to a private temporary name, flushed to disk and renamed into
place, so a reader never sees a partial archive and two concurrent uploads of the same bytes
end with one file. The folder may be shared storage read by workers on other hosts.

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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from grader.exceptions import StorageError, UploadTooLarge

_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 256 * 1024


@dataclass(frozen=True)
class ReceivedFile:
    """An upload written to a private temporary file, with its hash and size."""

    path: Path
    sha256: str
    size: int


class ArchiveStore:
    """Archives by SHA-256 under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def _objects(self) -> Path:
        return self.root / "sha256"

    @property
    def _incoming(self) -> Path:
        return self.root / "incoming"

    @property
    def _trash(self) -> Path:
        return self.root / "trash"

    def path_for(self, sha256: str) -> Path:
        if _SHA256.fullmatch(sha256) is None:
            raise ValueError(f"not a hex SHA-256: {sha256!r}")
        return self._objects / sha256[:2] / sha256

    def exists(self, sha256: str) -> bool:
        return self.path_for(sha256).is_file()

    def count(self) -> int:
        """Archives stored (for tests and metrics)."""
        if not self._objects.is_dir():
            return 0
        return sum(1 for path in self._objects.glob("*/*") if path.is_file())

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

    def keep(self, received: ReceivedFile) -> Path:
        """Store a received file under its hash (once) and return the stored path.

        An archive already stored gets its modification time refreshed: the garbage collector
        never removes an archive touched within its grace period (see :mod:`grader.db.retention`).
        """
        target = self.path_for(received.sha256)
        try:
            os.utime(target)
            return target
        except FileNotFoundError:
            pass  # not stored yet (or just collected): store this copy
        target.parent.mkdir(parents=True, exist_ok=True)
        received.path.chmod(0o444)
        # Same file system (incoming/ is under root): an atomic rename. A concurrent upload of
        # the same bytes renames identical content over it, which is harmless.
        os.replace(received.path, target)
        _fsync_dir(target.parent)
        return target

    def archives(self) -> Iterator[tuple[str, os.stat_result]]:
        """Every stored archive: its SHA-256 and file status."""
        if not self._objects.is_dir():
            return
        for path in self._objects.glob("*/*"):
            if _SHA256.fullmatch(path.name) is None:
                continue
            try:
                status = path.stat()
            except FileNotFoundError:
                continue  # removed meanwhile
            yield path.name, status

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

    def open_path(self, sha256: str) -> Path:
        """The stored archive for ``sha256``; :class:`StorageError` when it is missing."""
        path = self.path_for(sha256)
        if not path.is_file():
            raise StorageError("the uploaded archive is missing from storage")
        return path


def _fsync_dir(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
