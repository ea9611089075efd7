"""The reconciler: keeps the queue honest when Redis or a worker lets a submission down.

The database is the source of truth. :func:`reconcile` repairs what a lost Redis, a flushed
queue or a killed worker leaves behind: queued submissions whose job is gone are enqueued again,
and running submissions whose lease went stale are re-queued (or failed, after ``max_attempts``
interrupted gradings). ``grader reconcile`` runs it once; every worker runs
:func:`housekeeping` (the reconciler, the sandbox's :meth:`~grader.sandbox.Sandbox.sweep_orphans`
and, one worker per ``storage_gc_interval_seconds``, the storage gc) at start and then
periodically in a :class:`ReconcilerThread`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from sqlalchemy.engine import Engine

from grader.db import submissions as repo
from grader.db.engine import session_scope
from grader.db.tables import FailureKind, SubmissionStatus, utcnow
from grader.sandbox import Sandbox
from grader.settings import Settings
from grader.storage_gc import collect_if_due

from .enqueue import enqueue_grading

log = logging.getLogger("grader.worker")

ABANDONED_REASON = (
    "Grading was interrupted several times by problems on the grader's side. It does not "
    "count toward your daily quota; please submit again later."
)
#: Job states in which rq still holds (or is running) the job.
_LIVE_JOB_STATES = frozenset(
    {
        JobStatus.CREATED,
        JobStatus.QUEUED,
        JobStatus.STARTED,
        JobStatus.DEFERRED,
        JobStatus.SCHEDULED,
        JobStatus.READY_TO_ENQUEUE,
    }
)


@dataclass
class ReconcileReport:
    """What one reconciler pass did, by submission id."""

    enqueued: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.enqueued or self.requeued or self.abandoned)


def _job_alive(queue: Queue, job_id: str | None, *, started_before: datetime) -> bool:
    """Whether rq still holds the job of a queued submission.

    A job rq reports as started should have claimed its submission within moments; one that
    started before ``started_before`` and still has not belongs to a worker that died.
    """
    if job_id is None:
        return False
    try:
        job = Job.fetch(job_id, connection=queue.connection)
    except NoSuchJobError:
        return False
    status = job.get_status(refresh=False)
    if status == JobStatus.STARTED and job.started_at is not None:
        started = job.started_at if job.started_at.tzinfo else job.started_at.replace(tzinfo=UTC)
        return started >= started_before
    return status in _LIVE_JOB_STATES


def reconcile(
    *, engine: Engine, queue: Queue, settings: Settings, now: datetime | None = None
) -> ReconcileReport:
    """Re-enqueue queued submissions whose job is gone and re-queue abandoned running ones."""
    now = now or utcnow()
    report = ReconcileReport()
    grace = now - timedelta(seconds=settings.requeue_grace_seconds)
    stale = now - timedelta(seconds=settings.lease_seconds)
    with session_scope(engine) as session:
        queued = [
            (row.id, row.job_id)
            for row in repo.queued_submissions(session=session, older_than=grace)
        ]
        running = [
            (row.id, row.job_id, row.attempts)
            for row in repo.stale_running_submissions(session=session, heartbeat_before=stale)
        ]
    for submission_id, job_id in queued:
        if _job_alive(queue, job_id, started_before=stale):
            continue
        if _requeue(engine, queue, settings, submission_id, SubmissionStatus.QUEUED, job_id):
            report.enqueued.append(submission_id)
    for submission_id, job_id, attempts in running:
        if attempts >= settings.max_attempts:
            with session_scope(engine) as session:
                if repo.mark_failed(
                    session=session,
                    submission_id=submission_id,
                    job_id=job_id,
                    kind=FailureKind.ABANDONED,
                    reason=ABANDONED_REASON,
                    now=now,
                ):
                    report.abandoned.append(submission_id)
            continue
        if _requeue(engine, queue, settings, submission_id, SubmissionStatus.RUNNING, job_id):
            report.requeued.append(submission_id)
    if report:
        log.warning(
            "reconciler: enqueued %d queued, re-queued %d abandoned, failed %d",
            len(report.enqueued),
            len(report.requeued),
            len(report.abandoned),
        )
    return report


def _requeue(
    engine: Engine,
    queue: Queue,
    settings: Settings,
    submission_id: str,
    status: SubmissionStatus,
    old_job_id: str | None,
) -> bool:
    new_job_id = repo.new_id()
    with session_scope(engine) as session:
        moved = repo.requeue(
            session=session,
            submission_id=submission_id,
            expected_status=status,
            old_job_id=old_job_id,
            new_job_id=new_job_id,
        )
    if moved:
        # If this fails (Redis down), the row is queued with a job id rq does not know: the
        # next pass enqueues it again.
        enqueue_grading(queue, submission_id, new_job_id, settings)
    return moved


def housekeeping(
    *,
    engine: Engine,
    queue: Queue,
    settings: Settings,
    sandbox: Sandbox | None,
    collect: bool = True,
) -> None:
    """One worker pass: reconcile, sweep what dead runs left, and collect storage if due.

    ``sandbox`` ``None`` (a process that grades nothing) has nothing to sweep.
    """
    reconcile(engine=engine, queue=queue, settings=settings)
    if sandbox is not None:
        sandbox.sweep_orphans()
    if collect:
        collect_if_due(engine=engine, redis=queue.connection, settings=settings)


class ReconcilerThread(threading.Thread):
    """Runs :func:`housekeeping` every ``interval`` seconds until stopped (errors are logged)."""

    def __init__(
        self,
        *,
        engine: Engine,
        queue: Queue,
        settings: Settings,
        interval: float,
        sandbox: Sandbox | None = None,
    ):
        super().__init__(name="grader-reconciler", daemon=True)
        self.engine = engine
        self.queue = queue
        self.settings = settings
        self.interval = interval
        self.sandbox = sandbox
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                housekeeping(
                    engine=self.engine,
                    queue=self.queue,
                    settings=self.settings,
                    sandbox=self.sandbox,
                )
            except Exception:
                log.exception("reconciler pass failed")

    def stop(self) -> None:
        self.stopped.set()
