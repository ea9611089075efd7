"""Putting grading jobs on the rq queue: all the web tier needs of the workers.

This module imports rq and Redis only, never the sandbox or the grading service, so a gunicorn
process that accepts uploads stays small.
"""

from __future__ import annotations

from redis import Redis
from rq import Queue
from rq.job import Job

from grader.settings import Settings

#: The job function by its dotted path; see :mod:`grader.worker` for why it is this one.
JOB_FUNCTION = "grader.worker.grade_submission_job"


def make_queue(settings: Settings, connection: Redis) -> Queue:
    return Queue(settings.queue_name, connection=connection)


def enqueue_grading(queue: Queue, submission_id: str, job_id: str, settings: Settings) -> Job:
    """Put the grading job for ``submission_id`` on the queue under ``job_id``."""
    return queue.enqueue(
        JOB_FUNCTION,
        submission_id,
        job_id=job_id,
        job_timeout=settings.job_timeout_seconds,
        result_ttl=24 * 3600,
        failure_ttl=7 * 24 * 3600,
        description=f"grade submission {submission_id}",
    )
