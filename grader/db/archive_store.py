"""The database archive store (``GRADER_STORAGE_URL=postgresql+psycopg://…``), and the choice of
store from ``GRADER_STORAGE_URL``.

Archives live in two tables (migration ``0006_archive_store``): ``archives`` holds one row per
SHA-256 (size, chunk count, when it was stored or last re-uploaded) and ``archive_chunks`` the
bytes, in pieces of :data:`CHUNK_BYTES`. Neither direction ever holds a whole archive in memory:
an upload is spooled to a local file while hashed (as in the folder store), then inserted one
chunk per statement; a read selects one chunk at a time into a local file, hashing as it goes,
and refuses the archive (:class:`StorageError`) when the bytes do not match their hash.

An archive is stored in one transaction (its ``archives`` row first, then every chunk), so a
reader sees all of it or none. The ``archives`` row is the lock between an upload and the
storage gc: a re-upload of stored bytes updates ``touched``, and the gc deletes only a row whose
``touched`` is older than its grace period — both single-row statements, so whichever commits
second sees the other's effect (an upload that finds the row gone stores its own copy).

A worker on another host therefore needs only the database and Redis URLs; its spool (uploads
and fetched archives, under ``GRADER_STORAGE_DIR``) is private to the host.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from grader.db.engine import make_engine
from grader.db.tables import ArchiveChunkRow, ArchiveRow
from grader.exceptions import SettingsError, StorageError
from grader.storage import (
    MISSING,
    ArchiveStore,
    ArchiveStoreBase,
    ReceivedFile,
    StoredArchive,
    check_sha256,
    corrupt,
)

#: Bytes per ``archive_chunks`` row: memory per statement is about this much.
CHUNK_BYTES = 1024 * 1024

_archives = ArchiveRow.__table__  # type: ignore[attr-defined]
_chunks = ArchiveChunkRow.__table__  # type: ignore[attr-defined]


class DatabaseArchiveStore(ArchiveStoreBase):
    """Archives in chunks in PostgreSQL."""

    def __init__(self, engine: Engine, spool: Path, *, owns_engine: bool = True) -> None:
        super().__init__(spool)
        self.engine = engine
        #: False when the engine is the process's main one (shared pool; not disposed here).
        self.owns_engine = owns_engine

    def close(self) -> None:
        if self.owns_engine:
            self.engine.dispose()

    def exists(self, sha256: str) -> bool:
        with self.engine.connect() as connection:
            found = connection.execute(
                sa.select(_archives.c.sha256).where(_archives.c.sha256 == check_sha256(sha256))
            ).first()
        return found is not None

    def count(self) -> int:
        with self.engine.connect() as connection:
            return int(
                connection.execute(sa.select(sa.func.count()).select_from(_archives)).one()[0]
            )

    def archives(self) -> Iterator[StoredArchive]:
        with self.engine.connect() as connection:
            rows = connection.execute(
                sa.select(_archives.c.sha256, _archives.c.size, _archives.c.touched)
            ).all()
        for sha256, size, touched in rows:
            yield StoredArchive(sha256, int(size), float(touched))

    def _touch(self, sha256: str) -> bool:
        with self.engine.begin() as connection:
            result = connection.execute(
                sa.update(_archives).where(_archives.c.sha256 == sha256).values(touched=time.time())
            )
        return bool(result.rowcount)

    def keep(self, received: ReceivedFile) -> None:
        """Store the spooled upload chunk by chunk in one transaction, unless already stored
        (then its time is refreshed, as the folder store refreshes a file's)."""
        sha256 = check_sha256(received.sha256)
        if self._touch(sha256):
            return
        chunks = -(-received.size // CHUNK_BYTES)
        try:
            with self.engine.begin() as connection, received.path.open("rb") as source:
                # The row first: a concurrent upload of the same bytes waits on it (and fails
                # on its key) before either writes megabytes of chunks.
                connection.execute(
                    sa.insert(_archives).values(
                        sha256=sha256, size=received.size, chunks=chunks, touched=time.time()
                    )
                )
                seq = 0
                while piece := source.read(CHUNK_BYTES):
                    connection.execute(
                        sa.insert(_chunks).values(sha256=sha256, seq=seq, data=piece)
                    )
                    seq += 1
                if seq != chunks:
                    raise StorageError("the spooled upload changed size while it was stored")
        except sa.exc.IntegrityError:
            # Stored meanwhile by a concurrent upload of the same bytes: refresh its time.
            if not self._touch(sha256):
                raise StorageError("the archive could not be stored; try again") from None

    def remove_unless_touched(self, sha256: str, *, untouched_since: float) -> bool:
        """Delete the archive's row (only if ``touched`` is old) and its chunks, atomically."""
        check_sha256(sha256)
        with self.engine.begin() as connection:
            removed = connection.execute(
                sa.delete(_archives).where(
                    _archives.c.sha256 == sha256, _archives.c.touched < untouched_since
                )
            ).rowcount
            if removed:
                connection.execute(sa.delete(_chunks).where(_chunks.c.sha256 == sha256))
        return bool(removed)

    @contextmanager
    def fetched(self, sha256: str) -> Iterator[Path]:
        """Copy the archive to a private spool file, one chunk at a time, checking its hash."""
        check_sha256(sha256)
        self._incoming.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="fetch-", dir=self._incoming))
        try:
            path = folder / "archive"
            with self.engine.connect() as connection, path.open("xb") as out:
                row = connection.execute(
                    sa.select(_archives.c.size, _archives.c.chunks).where(
                        _archives.c.sha256 == sha256
                    )
                ).first()
                if row is None:
                    raise StorageError(MISSING)
                size, chunks = int(row[0]), int(row[1])
                digest = hashlib.sha256()
                written = 0
                for seq in range(chunks):
                    piece = connection.execute(
                        sa.select(_chunks.c.data).where(
                            _chunks.c.sha256 == sha256, _chunks.c.seq == seq
                        )
                    ).scalar()
                    if piece is None:
                        raise corrupt(sha256)
                    digest.update(piece)
                    out.write(piece)
                    written += len(piece)
                    del piece
            if written != size or digest.hexdigest() != sha256:
                raise corrupt(sha256)
            yield path
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def open_archive_store(
    storage_url: str, *, storage_dir: Path, database_url: str, engine: Engine | None = None
) -> ArchiveStoreBase:
    """The store ``GRADER_STORAGE_URL`` names: empty or ``file:///…`` (a folder; empty means
    ``GRADER_STORAGE_DIR``) or a database URL (the database store; uploads and fetched archives
    are spooled under ``storage_dir``).

    When the store's database is ``GRADER_DATABASE_URL`` and the caller passes its ``engine``,
    the store shares that engine's connection pool (no extra connections per process). A
    database other than ``GRADER_DATABASE_URL`` is migrated here, as the main database is at
    start-up."""
    if not storage_url:
        return ArchiveStore(storage_dir)
    scheme = urlsplit(storage_url).scheme
    if scheme == "file":
        path = unquote(urlsplit(storage_url).path)
        if not path:
            raise SettingsError(f"GRADER_STORAGE_URL names no folder: {storage_url!r}")
        return ArchiveStore(Path(path))
    if scheme.split("+")[0] == "postgresql":
        if engine is not None and storage_url == database_url:
            return DatabaseArchiveStore(engine, storage_dir, owns_engine=False)
        own = make_engine(storage_url, pool_size=2)
        if storage_url != database_url:
            from grader.db.migrate import upgrade_database

            upgrade_database(own)
        return DatabaseArchiveStore(own, storage_dir)
    raise SettingsError(
        f"GRADER_STORAGE_URL must start with file:// or postgresql+psycopg:// (got {scheme!r})"
    )
