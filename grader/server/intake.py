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

from grader.db.engine import session_scope
from grader.db.submissions import create_submission
from grader.db.tables import SubmissionRow, UserRow, utcnow
from grader.db.usage import LimitKind, LimitReached, UploadLimits, check_upload
from grader.exceptions import CaseSetError, PackageError, UploadTooLarge
from grader.packages import ArchiveLimits, prepare_package
from grader.worker.enqueue import enqueue_grading

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


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def limit_message(reached: LimitReached, upload_bytes: int = 0) -> str:
    """One line telling the student which daily limit the upload hit and when it frees up."""
    when = f"{reached.next_slot_at:%Y-%m-%d %H:%M} UTC" if reached.next_slot_at else None
    if reached.kind == LimitKind.QUOTA:
        return quota_message(reached.limit, reached.next_slot_at)
    if reached.kind == LimitKind.FAILED_STARTS:
        return (
            f"too many uploads whose agent failed to start: {reached.used} in 24 hours (limit "
            f"{reached.limit}); check it locally with `grader grade` first"
            + (f"; the next slot opens at {when}" if when else "")
        )
    if when is None:
        return (
            f"daily storage budget exceeded: this {_mib(upload_bytes)} upload is larger than "
            f"the {_mib(reached.limit)} a student may upload in 24 hours"
        )
    return (
        f"daily storage budget reached: {_mib(reached.used)} of {_mib(reached.limit)} uploaded "
        f"in 24 hours; this upload fits again at {when}"
    )


def daily_limit(server: ServerState) -> int | Rejected:
    """The policy's ``max_submissions_per_day``, or a 503 when the case set cannot load."""
    try:
        return server.case_sets.get().policy.max_submissions_per_day
    except CaseSetError as exc:
        log.error("case set unavailable: %s", exc)
        return Rejected(503, "grading is unavailable right now (the case set is being updated)")


def upload_limits(server: ServerState) -> UploadLimits | Rejected:
    """Every daily limit an upload is checked against (503 when the case set cannot load)."""
    limit = daily_limit(server)
    if isinstance(limit, Rejected):
        return limit
    settings = server.settings
    return UploadLimits(
        submissions=limit,
        storage_bytes=settings.storage_bytes_per_day,
        failed_starts=settings.failed_starts_per_day,
    )


def accept_upload(
    server: ServerState, user: UserRow, upload: FileStorage | None
) -> Accepted | Rejected:
    """Validate, store, record and enqueue one uploaded package."""
    if upload is None or not upload.filename:
        return Rejected(400, "no file: send the archive in the multipart field 'package'")
    limits = upload_limits(server)
    if isinstance(limits, Rejected):
        return limits
    assert user.id is not None
    # A cheap early answer before the archive is read (an upload of at least one byte); every
    # limit is checked again, with the real size, under a lock when inserting.
    with session_scope(server.engine) as session:
        early = check_upload(
            session=session, user_id=user.id, limits=limits, upload_bytes=1, now=utcnow()
        )
    if early is not None:
        return Rejected(429, limit_message(early, 1))

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
            with session_scope(server.engine) as session:
                created = create_submission(
                    session=session,
                    user=user,
                    filename=filename,
                    agent_name=package.manifest.name,
                    package_sha256=received.sha256,
                    package_bytes=received.size,
                    daily_limit=limits.submissions,
                    storage_budget=limits.storage_bytes,
                    failed_start_limit=limits.failed_starts,
                )
                if isinstance(created, LimitReached):
                    session.rollback()
                    return Rejected(429, limit_message(created, received.size))
                # Stored only once the upload is within every limit (a refused one leaves
                # nothing behind), before the row commits (a row never names a missing
                # archive). The folder store renames the spooled file; the database store
                # copies it in chunks.
                server.store.keep(received)
    except UploadTooLarge:
        return Rejected(413, f"upload too large (limit {settings.max_upload_bytes} bytes)")
    except PackageError as exc:
        return Rejected(400, str(exc))
    assert created.job_id is not None
    try:
        enqueue_grading(server.queue, created.id, created.job_id, settings)
    except Exception as exc:  # Redis down: the reconciler enqueues it later
        log.warning("submission %s stored but not enqueued (%s)", created.id, exc)
    return Accepted(created)
