"""Engines for SQLite (the single-machine default, WAL mode) and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session

#: Seconds a SQLite connection waits for another process's write lock before failing.
SQLITE_BUSY_TIMEOUT_S = 30


def is_sqlite(url: str | sa.URL) -> bool:
    return sa.make_url(url).get_backend_name() == "sqlite"


def sqlite_path(url: str | sa.URL) -> Path | None:
    """The database file of a SQLite URL (None for an in-memory database)."""
    database = sa.make_url(url).database
    if not database or database == ":memory:":
        return None
    return Path(database)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        # WAL lets the web server read while a worker writes; NORMAL is durable in WAL mode
        # against process crashes (a power cut may lose the last commits, never corrupt).
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_S * 1000}")
    finally:
        cursor.close()


def make_engine(url: str, *, pool_size: int = 5) -> Engine:
    """An engine for ``url``; a SQLite file (and its folder) is created on first use."""
    if is_sqlite(url):
        path = sqlite_path(url)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(
            url,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
            pool_size=pool_size,
            max_overflow=10,
        )
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return sa.create_engine(url, pool_pre_ping=True, pool_size=pool_size, max_overflow=10)


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits when the block ends normally and rolls back otherwise."""
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
