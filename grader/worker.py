"""Grading jobs for rq workers, and the reconciler that keeps the queue honest.

A job carries only a submission id. The worker claims the submission in the database (a
compare-and-set from ``queued`` to ``running`` for this job id), keeps a lease on it by
refreshing ``heartbeat_at``, grades the stored archive in the configured sandbox, and writes the
result set, every eval record and the ``graded`` status in one transaction that only commits if
the lease is still its own. A job for a submission that is already graded, or leased to another
job, does nothing — so a job may be delivered twice without harm.

The database is the source of truth; Redis only carries work. :func:`reconcile` repairs what a
lost Redis, a flushed queue or a killed worker leaves behind: queued submissions whose job is
gone are enqueued again, and running submissions whose lease went stale are re-queued (or
failed, after ``max_attempts`` interrupted gradings). Every worker runs it at start and then
periodically; ``grader reconcile`` runs it once. The periodic pass also runs the storage gc
(:func:`grader.storage_gc.collect_if_due`: one worker per ``storage_gc_interval_seconds``).

Outcome rules (the student sees ``failure_reason``; nothing in it comes from a hidden case):

* The agent could not start (``AgentStartError``: import error, setup crash or timeout): the
  run is ``failed`` with that one-line reason. No question was asked, so it reveals nothing;
  it does **not** count toward the daily quota (no failed run does) but is a *failed start*,
  capped per day (``GRADER_FAILED_STARTS_PER_DAY``, :mod:`grader.db.usage`).
* Sandbox, storage, case-set or database trouble: ``failed`` with a generic reason, never
  counted against the quota.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from redis import Redis
from rq import Queue, SimpleWorker, get_current_job
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from grader.core.casesets import load_case_set
from grader.core.views import student_view
from grader.db import submissions as repo
from grader.db.engine import make_engine, session_scope
from grader.db.tables import FailureKind, SubmissionStatus, utcnow
from grader.exceptions import (
    CaseSetError,
    PackageError,
    SandboxFailure,
    SandboxUnavailable,
)
from grader.grading import grade_agent
from grader.packages import ArchiveLimits, prepare_package
from grader.sandbox import Sandbox, make_sandbox
from grader.sandbox.process import CGROUP_PARENT, CGROUP_ROOT
from grader.sandbox.session import AgentStartError
from grader.settings import Settings
from grader.storage import ArchiveStore, StorageError
from grader.storage_gc import collect_if_due

log = logging.getLogger("grader.worker")

JOB_FUNCTION = "grader.worker.grade_submission_job"
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

INFRASTRUCTURE_REASON = (
    "The grader had an internal problem while grading this submission. It does not count "
    "toward your daily quota; please submit again later."
)
ABANDONED_REASON = (
    "Grading was interrupted several times by problems on the grader's side. It does not "
    "count toward your daily quota; please submit again later."
)


class JobOutcome(StrEnum):
    GRADED = "graded"
    FAILED = "failed"
    #: Nothing to do: already graded or failed, or leased to another job.
    SKIPPED = "skipped"
    #: Graded, but the lease was taken over meanwhile: the results were discarded.
    LOST_LEASE = "lost_lease"
    #: A rerun whose archive the storage gc had removed: the earlier results stay current.
    KEPT_EARLIER = "kept_earlier"


# --------------------------------------------------------------------------------------------
# Enqueueing


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


# --------------------------------------------------------------------------------------------
# Grading one submission


@dataclass
class GradingService:
    """Everything a worker needs to grade: settings, database, storage and the sandbox."""

    settings: Settings
    engine: Engine
    store: ArchiveStore
    sandbox: Sandbox
    name: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")

    @classmethod
    def from_settings(cls, settings: Settings, *, name: str | None = None) -> GradingService:
        """Build the service; refuses an unsandboxed grader without the unsafe flag."""
        sandbox = make_sandbox(settings.checked_sandbox())
        service = cls(
            settings=settings,
            engine=make_engine(settings.database_url),
            store=ArchiveStore(settings.storage_dir),
            sandbox=sandbox,
        )
        if name:
            service.name = name
        return service

    def grade(self, submission_id: str, *, job_id: str) -> JobOutcome:
        """Grade one submission if ``job_id`` may; see the module docstring for outcomes."""
        with session_scope(self.engine) as session:
            claimed = repo.claim_submission(
                session=session, submission_id=submission_id, job_id=job_id, worker=self.name
            )
        if not claimed:
            log.info("submission %s: nothing to do for job %s", submission_id, job_id)
            return JobOutcome.SKIPPED
        log.info("submission %s: grading (job %s)", submission_id, job_id)
        with self._lease(submission_id, job_id):
            try:
                return self._grade_claimed(submission_id, job_id)
            except AgentStartError as exc:
                return self._fail(submission_id, job_id, FailureKind.AGENT_START, str(exc))
            except PackageError as exc:
                return self._fail(submission_id, job_id, FailureKind.PACKAGE, str(exc))
            except (
                SandboxUnavailable,
                SandboxFailure,
                CaseSetError,
                StorageError,
                SQLAlchemyError,
                OSError,
            ) as exc:
                log.error("submission %s: infrastructure failure: %s", submission_id, exc)
                return self._fail(
                    submission_id, job_id, FailureKind.INFRASTRUCTURE, INFRASTRUCTURE_REASON
                )
            except Exception:
                log.exception("submission %s: unexpected error while grading", submission_id)
                return self._fail(
                    submission_id, job_id, FailureKind.INFRASTRUCTURE, INFRASTRUCTURE_REASON
                )

    def _grade_claimed(self, submission_id: str, job_id: str) -> JobOutcome:
        with session_scope(self.engine) as session:
            submission = repo.get_submission(session=session, submission_id=submission_id)
            assert submission is not None
            package_sha256 = submission.package_sha256
            rerun = submission.current_grading_id is not None
        case_set = load_case_set(self.settings.cases_dir)
        if rerun and not self.store.exists(package_sha256):
            return self._keep_earlier_results(submission_id, job_id)
        archive = self.store.open_path(package_sha256)
        started = time.monotonic()
        with TemporaryDirectory(prefix="grader-job-") as workdir:
            package = prepare_package(
                archive,
                Path(workdir),
                limits=ArchiveLimits(max_archive_bytes=self.settings.max_upload_bytes),
            )
            if package.sha256 != package_sha256:
                raise StorageError("stored archive does not match its hash")
            report = grade_agent(
                package.root,
                entrypoint=package.manifest.entrypoint,
                setup=package.manifest.setup,
                case_set=case_set,
                sandbox=self.sandbox,
                label=run_label(submission_id),
                package_sha256=package.sha256,
            )
        seconds = time.monotonic() - started
        view = student_view(report, feedback=case_set.policy.feedback)
        with session_scope(self.engine) as session:
            grading = repo.record_grading(
                session=session,
                submission_id=submission_id,
                job_id=job_id,
                report=report,
                student_view=view,
                seconds=seconds,
                worker=self.name,
            )
            if grading is None:
                session.rollback()
                log.warning("submission %s: lease lost; results discarded", submission_id)
                return JobOutcome.LOST_LEASE
        log.info(
            "submission %s: graded in %.1f s (%s)",
            submission_id,
            seconds,
            report.decision.decision.value,
        )
        return JobOutcome.GRADED

    def _keep_earlier_results(self, submission_id: str, job_id: str) -> JobOutcome:
        with session_scope(self.engine) as session:
            kept = repo.keep_earlier_results(
                session=session, submission_id=submission_id, job_id=job_id
            )
        if not kept:
            return JobOutcome.LOST_LEASE
        log.warning(
            "submission %s: rerun skipped, its archive was collected; earlier results kept",
            submission_id,
        )
        return JobOutcome.KEPT_EARLIER

    def _fail(self, submission_id: str, job_id: str, kind: FailureKind, reason: str) -> JobOutcome:
        try:
            with session_scope(self.engine) as session:
                changed = repo.mark_failed(
                    session=session,
                    submission_id=submission_id,
                    job_id=job_id,
                    kind=kind,
                    reason=reason,
                )
        except SQLAlchemyError as exc:
            # The row stays `running`; its lease goes stale and the reconciler takes it up.
            log.error("submission %s: could not record the failure: %s", submission_id, exc)
            return JobOutcome.FAILED
        if not changed:
            return JobOutcome.LOST_LEASE
        log.info("submission %s: failed (%s)", submission_id, kind.value)
        return JobOutcome.FAILED

    @contextmanager
    def _lease(self, submission_id: str, job_id: str) -> Iterator[None]:
        """Refresh the submission's heartbeat from a background thread while grading."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.settings.heartbeat_seconds):
                try:
                    with session_scope(self.engine) as session:
                        held = repo.heartbeat(
                            session=session, submission_id=submission_id, job_id=job_id
                        )
                except SQLAlchemyError as exc:
                    log.warning("submission %s: heartbeat failed: %s", submission_id, exc)
                    continue
                if not held:
                    log.warning("submission %s: lease taken over by another job", submission_id)
                    return

        thread = threading.Thread(target=beat, name=f"lease-{submission_id[:8]}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)


# --------------------------------------------------------------------------------------------
# Sandbox cgroups of killed workers
#
# On a root host with cgroup v1 every run gets its own memory and pids cgroup, which the grading
# process removes when the run ends. A worker killed mid-run cannot; its sandbox dies with it
# (bubblewrap's --die-with-parent) but the empty cgroup folders stay. Run labels carry the
# worker's PID so a later sweep can tell an orphan from a live run of another worker.

_RUN_LABEL = re.compile(r"sub-[0-9a-f]{1,12}-w(?P<pid>[0-9]+)-[0-9a-f]+")


def run_label(submission_id: str) -> str:
    """The sandbox label of a grading run: submission prefix and this worker's PID."""
    return f"sub-{submission_id[:12]}-w{os.getpid()}"


def sweep_orphan_cgroups(root: Path = CGROUP_ROOT) -> list[Path]:
    """Remove run cgroups left by grading processes that no longer exist; return them."""
    removed: list[Path] = []
    for controller in ("memory", "pids"):
        parent = root / controller / CGROUP_PARENT
        try:
            children = [child for child in parent.iterdir() if child.is_dir()]
        except OSError:
            continue
        for child in children:
            match = _RUN_LABEL.fullmatch(child.name)
            if match is None or _pid_alive(int(match["pid"])):
                continue
            try:
                for pid in (child / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
                child.rmdir()
            except OSError as exc:
                log.warning("could not remove orphan cgroup %s: %s", child, exc)
                continue
            removed.append(child)
    if removed:
        log.warning("removed %d sandbox cgroups left by killed workers", len(removed))
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


# --------------------------------------------------------------------------------------------
# Reconciler


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


class ReconcilerThread(threading.Thread):
    """Runs :func:`reconcile` every ``interval`` seconds until stopped (errors are logged)."""

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
                reconcile(engine=self.engine, queue=self.queue, settings=self.settings)
                sweep_orphan_cgroups()
                if self.sandbox is not None:
                    self.sandbox.sweep_orphans()
                collect_if_due(
                    engine=self.engine, redis=self.queue.connection, settings=self.settings
                )
            except Exception:
                log.exception("reconciler pass failed")

    def stop(self) -> None:
        self.stopped.set()


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
        reconcile(engine=service.engine, queue=queue, settings=settings)
        sweep_orphan_cgroups()
        service.sandbox.sweep_orphans()
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
