"""``grader worker``: the rq worker process and the job function rq calls.

The worker runs every job in its own process (:class:`GraderWorker`), hands the job to its
:class:`~grader.worker.service.GradingService`, and runs :func:`~.reconciler.housekeeping` at
start and periodically.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

from redis import Redis
from rq import Queue, SimpleWorker, get_current_job
from rq.job import Job

from grader.settings import Settings

from .enqueue import make_queue
from .reconciler import ReconcilerThread, housekeeping
from .service import GradingService

log = logging.getLogger("grader.worker")

#: The service of the worker process currently running a job (set by :class:`GraderWorker`).
_current_service: ContextVar[GradingService | None] = ContextVar("grader_service", default=None)


def grade_submission_job(submission_id: str) -> str:
    """The rq job: grade ``submission_id`` (its only argument) and return the outcome."""
    job = get_current_job()
    if job is None:
        raise RuntimeError("grade_submission_job runs inside an rq worker")
    service = _current_service.get()
    if service is None:  # a plain `rq worker`: build from the environment
        service = GradingService.from_settings(Settings())
    return service.grade(submission_id, job_id=job.id).value


class GraderWorker(SimpleWorker):
    """An rq worker that runs jobs in its own process (no fork per job).

    Killing the worker therefore kills the grading too (the bubblewrap sandbox dies with its
    parent), and the lease makes the reconciler re-queue it; with rq's forking worker the
    detached work horse would go on grading unsupervised.
    """

    service: GradingService

    def execute_job(self, job: Job, queue: Queue) -> Any:
        token = _current_service.set(self.service)
        try:
            return super().execute_job(job, queue)
        finally:
            _current_service.reset(token)


def run_worker(
    settings: Settings, *, burst: bool = False, name: str | None = None
) -> None:  # pragma: no cover - exercised through `grader worker` subprocesses
    """Start an rq worker on ``settings.queue_name`` with the periodic reconciler."""
    from grader.db.migrate import upgrade_database

    service = GradingService.from_settings(settings, name=name)
    service.sandbox.check()
    upgrade_database(service.engine)
    redis = Redis.from_url(settings.redis_url)
    queue = make_queue(settings, redis)
    try:
        housekeeping(
            engine=service.engine,
            queue=queue,
            settings=settings,
            sandbox=service.sandbox,
            collect=False,
        )
    except Exception:
        log.exception("reconciler pass at start-up failed")
    reconciler: ReconcilerThread | None = None
    if settings.reconcile_interval_seconds > 0 and not burst:
        reconciler = ReconcilerThread(
            engine=service.engine,
            queue=queue,
            settings=settings,
            interval=settings.reconcile_interval_seconds,
            sandbox=service.sandbox,
        )
        reconciler.start()
    worker = GraderWorker([queue], connection=redis, name=name)
    worker.service = service
    service.name = worker.name
    try:
        worker.work(burst=burst, logging_level="INFO")
    finally:
        if reconciler is not None:
            reconciler.stop()
