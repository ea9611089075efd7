"""The storage garbage collector: remove archives no submission needs (``grader storage gc``).

Kept (see :func:`grader.db.retention.archives_in_use`): archives of queued or running
submissions; of graded submissions uploaded within ``GRADER_ARCHIVE_RETENTION_DAYS`` (30) and
failed ones within ``GRADER_FAILED_ARCHIVE_RETENTION_DAYS`` (2); of each student's best and
latest graded submission (as the instructor roster picks them) and of every submission a
certificate or certificate decision is based on, for good. Everything else goes, including
archives no submission names (an upload whose server died before its row committed).

The tradeoff: an instructor regrade *from recorded answers* needs no archive, but a regrade *by
rerun* does; a rerun of a submission whose archive was collected keeps its earlier results
(the worker puts it back to ``graded``). The submissions a course reruns — each student's best
and latest, and certificate bases — are never collected.

Safety against a concurrent upload of the same bytes: the database is read first, and an
archive whose file was written or refreshed within :data:`GRACE` before that read is never
removed (:meth:`grader.storage.ArchiveStoreBase.remove_unless_touched`).
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from redis import Redis
from sqlalchemy.engine import Engine
from sqlmodel import Session

from grader.db.archive_store import open_archive_store
from grader.db.engine import session_scope
from grader.db.results import current_results
from grader.db.retention import archives_in_use, referenced_archives
from grader.db.tables import utcnow
from grader.instructor.roster import best_result, latest_result
from grader.settings import Settings
from grader.storage import ArchiveStoreBase

log = logging.getLogger("grader.storage")

#: An archive stored or re-uploaded this recently is never removed (an upload takes seconds
#: from storing its archive to committing its row; this leaves a wide margin).
GRACE = timedelta(hours=1)


@dataclass
class GcReport:
    """What one collection removed (or, in a dry run, would remove) and kept."""

    dry_run: bool
    removed: list[str] = field(default_factory=list)
    removed_bytes: int = 0
    #: Removed archives that no submission names at all.
    unreferenced: int = 0
    kept: int = 0
    kept_bytes: int = 0
    #: Not needed, but written or refreshed within the grace period: left for a later run.
    recent: int = 0
    #: Leftover upload folders of killed server processes removed.
    incoming_removed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "removed": len(self.removed),
            "removed_bytes": self.removed_bytes,
            "unreferenced": self.unreferenced,
            "kept": self.kept,
            "kept_bytes": self.kept_bytes,
            "recent": self.recent,
            "incoming_removed": self.incoming_removed,
            "removed_sha256": self.removed,
        }

    def summary(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        return (
            f"storage gc: {verb} {len(self.removed)} archives ({_mib(self.removed_bytes)}, "
            f"{self.unreferenced} named by no submission); kept {self.kept} "
            f"({_mib(self.kept_bytes)}); {self.recent} not needed but too recent to remove"
        )


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def protected_submissions(*, session: Session) -> set[str]:
    """Each student's best and latest graded submission (the instructor roster's choice)."""
    keep: set[str] = set()
    for results in current_results(session=session).values():
        for chosen in (best_result(results), latest_result(results)):
            if chosen is not None:
                keep.add(chosen.submission_id)
    return keep


def collect_garbage(
    *,
    engine: Engine,
    store: ArchiveStoreBase,
    settings: Settings,
    dry_run: bool = False,
    now: datetime | None = None,
) -> GcReport:
    """Remove (or with ``dry_run`` only count) the archives no submission needs."""
    now = now or utcnow()
    # Taken before the database is read: see the module docstring.
    untouched_since = time.time() - GRACE.total_seconds()
    with session_scope(engine) as session:
        needed = archives_in_use(
            session=session,
            graded_since=now - timedelta(days=settings.archive_retention_days),
            failed_since=now - timedelta(days=settings.failed_archive_retention_days),
            keep=protected_submissions(session=session),
        )
        referenced = referenced_archives(session=session)
    report = GcReport(dry_run=dry_run)
    for sha256, size, touched in store.archives():
        if sha256 in needed:
            report.kept += 1
            report.kept_bytes += size
            continue
        if touched >= untouched_since:
            report.recent += 1
            continue
        if dry_run or store.remove_unless_touched(sha256, untouched_since=untouched_since):
            report.removed.append(sha256)
            report.removed_bytes += size
            report.unreferenced += sha256 not in referenced
        else:
            report.recent += 1
    if not dry_run:
        report.incoming_removed = store.sweep_incoming(older_than=untouched_since)
    log.info(report.summary())
    return report


def collect_if_due(*, engine: Engine, redis: Redis, settings: Settings) -> GcReport | None:
    """Collect if no worker has in the last ``GRADER_STORAGE_GC_INTERVAL_SECONDS``.

    Called from every worker's reconciler; a Redis key set with ``NX`` and an expiry elects
    one worker per interval, so the collection does not run once per worker.
    """
    interval = settings.storage_gc_interval_seconds
    if interval <= 0:
        return None
    key = f"{settings.queue_name}:storage-gc"
    if not redis.set(key, socket.gethostname(), nx=True, ex=max(1, int(interval))):
        return None
    store = open_archive_store(
        settings.storage_url,
        storage_dir=settings.storage_dir,
        database_url=settings.database_url,
        engine=engine,
    )
    try:
        return collect_garbage(engine=engine, store=store, settings=settings)
    finally:
        store.close()
