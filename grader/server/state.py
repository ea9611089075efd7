"""What every request handler shares: settings, database, Redis queue, storage, case set."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from flask import current_app, g
from redis import Redis
from rq import Queue
from sqlalchemy.engine import Engine
from sqlmodel import Session

from grader.core.casesets import CaseSet, load_case_set
from grader.instructor.audit_cache import AuditCache
from grader.settings import Settings
from grader.storage import ArchiveStoreBase

if TYPE_CHECKING:
    from .throttle import AuthFailureGuard

EXTENSION_KEY = "grader"


def _signature(folders: tuple[Path, ...]) -> tuple[tuple[str, int, int], ...]:
    """Path, mtime and size of every file under ``folders``: changes when the set changes."""
    entries: list[tuple[str, int, int]] = []
    for folder in folders:
        for root, _dirs, files in os.walk(folder):
            for name in files:
                path = os.path.join(root, name)
                try:
                    status = os.stat(path)
                except OSError:
                    continue
                entries.append((path, status.st_mtime_ns, status.st_size))
    return tuple(sorted(entries))


class CaseSetCache:
    """The case set of ``GRADER_CASES_DIR``, reloaded when a file in it changes.

    Loading raises :class:`~grader.exceptions.CaseSetError` for a broken set (the caller
    answers 503: grading is unavailable, the student did nothing wrong).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._loaded: CaseSet | None = None
        self._signature: tuple[tuple[str, int, int], ...] = ()

    def get(self) -> CaseSet:
        with self._lock:
            folders: tuple[Path, ...] = (self.root,)
            if self._loaded is not None and self._loaded.corpus.root != self.root:
                folders = (self.root, self._loaded.corpus.root)
            signature = _signature(folders)
            if self._loaded is None or signature != self._signature:
                self._loaded = load_case_set(self.root)
                self._signature = _signature((self.root, self._loaded.corpus.root))
            return self._loaded


@dataclass
class ServerState:
    settings: Settings
    engine: Engine
    redis: Redis
    queue: Queue
    store: ArchiveStoreBase
    case_sets: CaseSetCache
    #: Failed authentications per client address (set once the rate limiter exists).
    auth_guard: AuthFailureGuard | None = None
    #: Canary audits of the case sets seen, by version (the instructor console's verdict).
    audits: AuditCache = field(default_factory=AuditCache)


def state() -> ServerState:
    """The :class:`ServerState` of the current app."""
    found: ServerState = current_app.extensions[EXTENSION_KEY]
    return found


def read_session() -> Session:
    """This request's read-only database session (one connection checkout per request).

    Closed when the request ends (see :func:`close_read_session`); writes use their own
    :func:`grader.db.engine.session_scope` so they commit exactly where they mean to.
    """
    if "grader_db" not in g:
        g.grader_db = Session(state().engine, expire_on_commit=False)
    session: Session = g.grader_db
    return session


def close_read_session(_exc: BaseException | None = None) -> None:
    session = g.pop("grader_db", None)
    if session is not None:
        session.close()
