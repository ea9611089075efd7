"""The grading service: the body of one grading job.

A job carries only a submission id. The service claims the submission in the database (a
compare-and-set from ``queued`` to ``running`` for this job id), keeps a lease on it by
refreshing ``heartbeat_at``, grades the stored archive in the configured sandbox, and writes the
result set, every eval record and the ``graded`` status in one transaction that only commits if
the lease is still its own. A job for a submission that is already graded, or leased to another
job, does nothing — so a job may be delivered twice without harm.

Outcome rules (the student sees ``failure_reason``; nothing in it comes from a hidden case):

* The agent could not start (``AgentStartError``: import error, setup crash or timeout): the
  run is ``failed`` with that one-line reason. No question was asked, so it reveals nothing;
  it does **not** count toward the daily quota (no failed run does) but is a *failed start*,
  capped per day (``GRADER_FAILED_STARTS_PER_DAY``, :mod:`grader.db.usage`).
* Sandbox, storage, case-set or database trouble: ``failed`` with a generic reason, never
  counted against the quota.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from tempfile import TemporaryDirectory

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from grader.core.casesets import load_case_set
from grader.db import disclosures
from grader.db import submissions as repo
from grader.db.archive_store import open_archive_store
from grader.db.engine import make_engine, session_scope
from grader.db.tables import FailureKind
from grader.exceptions import (
    AgentStartError,
    CaseSetError,
    PackageError,
    SandboxFailure,
    SandboxUnavailable,
    StorageError,
)
from grader.gateway.upstream import UpstreamConfig
from grader.grading import grade_agent
from grader.packages import ArchiveLimits, prepare_package
from grader.sandbox import Sandbox, make_sandbox
from grader.settings import Settings
from grader.storage import ArchiveStoreBase

log = logging.getLogger("grader.worker")

INFRASTRUCTURE_REASON = (
    "The grader had an internal problem while grading this submission. It does not count "
    "toward your daily quota; please submit again later."
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


def run_label(submission_id: str) -> str:
    """The sandbox label of a grading run: submission prefix and this worker's PID.

    Operators find a worker's runs (containers, cgroups) by it; the sandbox adds its own
    owner mark to whatever it creates, so its sweep does not depend on this format.
    """
    return f"sub-{submission_id[:12]}-w{os.getpid()}"


@dataclass
class GradingService:
    """Everything a worker needs to grade: settings, database, storage and the sandbox."""

    settings: Settings
    engine: Engine
    store: ArchiveStoreBase
    sandbox: Sandbox
    name: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")

    @classmethod
    def from_settings(cls, settings: Settings, *, name: str | None = None) -> GradingService:
        """Build the service; refuses an unsandboxed grader without the unsafe flag."""
        sandbox = make_sandbox(settings.checked_sandbox())
        engine = make_engine(settings.database_url)
        service = cls(
            settings=settings,
            engine=engine,
            store=open_archive_store(
                settings.storage_url,
                storage_dir=settings.storage_dir,
                database_url=settings.database_url,
                engine=engine,
            ),
            sandbox=sandbox,
        )
        if name:
            service.name = name
        return service

    @property
    def model_upstream(self) -> UpstreamConfig | None:
        """Where the model gateway forwards agents' calls (GRADER_MODEL_UPSTREAM_URL)."""
        url = self.settings.model_upstream_url
        key = self.settings.model_upstream_key.get_secret_value()
        return UpstreamConfig(url, key) if url else None

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
            user_id, created_at = submission.user_id, submission.created_at
            started_at = submission.started_at
        case_set = load_case_set(self.settings.cases_dir)
        if rerun and not self.store.exists(package_sha256):
            return self._keep_earlier_results(submission_id, job_id)
        started = time.monotonic()
        with (
            self.store.fetched(package_sha256) as archive,
            TemporaryDirectory(prefix="grader-job-") as workdir,
        ):
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
                model_upstream=self.model_upstream,
                model_cache_dir=self.settings.model_cache_dir,
            )
        seconds = time.monotonic() - started
        with session_scope(self.engine) as session:
            # What the student may see, and its charge (README, "Feedback and disclosure").
            planned = disclosures.plan(
                session=session,
                user_id=user_id,
                report=report,
                policy=case_set.policy,
                created_at=created_at,
                started_at=started_at,
            )
            grading = repo.record_grading(
                session=session,
                submission_id=submission_id,
                job_id=job_id,
                report=report,
                student_view=planned.view,
                seconds=seconds,
                worker=self.name,
            )
            if grading is None:
                session.rollback()
                log.warning("submission %s: lease lost; results discarded", submission_id)
                return JobOutcome.LOST_LEASE
            disclosures.record(session=session, planned=planned, grading=grading, user_id=user_id)
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
