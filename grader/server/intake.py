"""Accepting an upload: validate the archive, store it, record it, enqueue it (DESIGN §2).

The outcome is a value: :class:`Accepted` or :class:`Rejected` (with the HTTP status and a
one-line reason for the student). Infrastructure trouble — the database down — raises. A Redis
outage does not: the submission is committed as ``queued`` and the reconciler enqueues it.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from werkzeug.datastructures import FileStorage
from werkzeug.utils import secure_filename

from grader.db import repository as repo
from grader.db.engine import session_scope
from grader.db.tables import SubmissionRow, UserRow, utcnow
from grader.exceptions import CaseSetError, PackageError
from grader.packages import ArchiveLimits, prepare_package
from grader.storage import UploadTooLarge
from grader.worker import enqueue_grading

from .state import ServerState

log = logging.getLogger("grader.server")


@dataclass(frozen=True)
class Accepted:
    submission: SubmissionRow


@dataclass(frozen=True)
class Rejected:
    status: int
    reason: str


def quota_message(limit: int, next_slot_at: datetime | None) -> str:
    when = f"; the next slot opens at {next_slot_at:%Y-%m-%d %H:%M} UTC" if next_slot_at else ""
    return f"daily quota reached: {limit} submissions in 24 hours (failed runs do not count){when}"


def daily_limit(server: ServerState) -> int | Rejected:
    """The policy's ``max_submissions_per_day``, or a 503 when the case set cannot load."""
    try:
        return server.case_sets.get().policy.max_submissions_per_day
    except CaseSetError as exc:
        log.error("case set unavailable: %s", exc)
        return Rejected(503, "grading is unavailable right now (the case set is being updated)")


def accept_upload(
    server: ServerState, user: UserRow, upload: FileStorage | None
) -> Accepted | Rejected:
    """Validate, store, record and enqueue one uploaded package."""
    if upload is None or not upload.filename:
        return Rejected(400, "no file: send the archive in the multipart field 'package'")
    limit = daily_limit(server)
    if isinstance(limit, Rejected):
        return limit
    assert user.id is not None
    with session_scope(server.engine) as session:
        used, oldest = repo.quota_used(session=session, user_id=user.id, now=utcnow())
    if used >= limit:  # cheap early answer; checked again under a lock when inserting
        return Rejected(429, quota_message(limit, oldest + repo.QUOTA_WINDOW if oldest else None))

    settings = server.settings
    filename = secure_filename(upload.filename)[:200] or "package"
    try:
        with server.store.receiving(
            upload.stream, filename, max_bytes=settings.max_upload_bytes
        ) as received:
            if received.size == 0:
                return Rejected(400, "the uploaded file is empty")
            with tempfile.TemporaryDirectory(prefix="grader-upload-") as workdir:
                package = prepare_package(
                    received.path,
                    Path(workdir),
                    limits=ArchiveLimits(max_archive_bytes=settings.max_upload_bytes),
                )
            server.store.keep(received)
    except UploadTooLarge:
        return Rejected(413, f"upload too large (limit {settings.max_upload_bytes} bytes)")
    except PackageError as exc:
        return Rejected(400, str(exc))

    with session_scope(server.engine) as session:
        created = repo.create_submission(
            session=session,
            user=user,
            filename=filename,
            agent_name=package.manifest.name,
            package_sha256=received.sha256,
            package_bytes=received.size,
            daily_limit=limit,
        )
        if isinstance(created, repo.QuotaExceeded):
            session.rollback()
            return Rejected(429, quota_message(created.limit, created.next_slot_at))
    assert created.job_id is not None
    try:
        enqueue_grading(server.queue, created.id, created.job_id, settings)
    except Exception as exc:  # Redis down: the reconciler enqueues it later
        log.warning("submission %s stored but not enqueued (%s)", created.id, exc)
    return Accepted(created)
