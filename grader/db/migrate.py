"""Schema migrations with Alembic: ``upgrade head`` at server and worker start-up.

Several processes may start at once (gunicorn, a few workers), so the upgrade runs under a lock:
a transaction-scoped advisory lock on PostgreSQL, a file lock beside the SQLite database.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

from .engine import is_sqlite, sqlite_path

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
#: Arbitrary constant naming the PostgreSQL advisory lock taken while migrating.
_ADVISORY_LOCK_ID = 0x67726164  # "grad"


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration for the packaged migrations (no alembic.ini needed)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def upgrade_database(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision`` (idempotent; safe when processes race)."""
    if is_sqlite(engine.url):
        path = sqlite_path(engine.url)
        lock = (
            _file_lock(path.with_name(path.name + ".migrate-lock")) if path is not None else _null()
        )
        with lock, engine.begin() as connection:
            command.upgrade(alembic_config(connection), revision)
        return
    with engine.begin() as connection:
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:id)"), {"id": _ADVISORY_LOCK_ID})
        command.upgrade(alembic_config(connection), revision)


@contextmanager
def _null() -> Iterator[None]:
    yield


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()
