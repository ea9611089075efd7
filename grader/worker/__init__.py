"""Grading submissions off the web tier: enqueue, grade, reconcile.

One submission's way through this package:

* :mod:`.enqueue` — the web tier and the command line put a job carrying only the submission id
  on the rq queue (rq and Redis only: a gunicorn process loads nothing else of this package).
* :mod:`.process` — ``grader worker``: an rq worker that runs each job in its own process, and
  the job function rq calls.
* :mod:`.service` — the job body: claim the submission, keep a lease, grade the stored archive
  in the sandbox, record the result or the failure.
* :mod:`.reconciler` — repairs what a lost Redis, a flushed queue or a killed worker leaves
  behind, and runs the sandbox's and the storage's housekeeping.

The database is the source of truth; Redis only carries work.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # Jobs name their function by the dotted path `grader.worker.grade_submission_job` (it is in
    # queues already, and old and new workers must both resolve it). Resolved lazily so that
    # importing `grader.worker.enqueue` does not load the sandbox into the web tier.
    if name == "grade_submission_job":
        from .process import grade_submission_job

        return grade_submission_job
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
