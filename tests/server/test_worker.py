"""Grading jobs and the reconciler, run in this process against real Redis and both databases."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta

import pytest
from redis import Redis
from rq.utils import import_attribute
from sqlalchemy.engine import Engine
from sqlmodel import Session

from grader.db.engine import session_scope
from grader.db.results import eval_records, get_grading, list_gradings
from grader.db.submissions import claim_submission, quota_used, requeue
from grader.db.tables import FailureKind, SubmissionStatus, utcnow
from grader.exceptions import SettingsError
from grader.settings import Settings
from grader.storage import ArchiveStore
from grader.worker.enqueue import JOB_FUNCTION, enqueue_grading, make_queue
from grader.worker.process import grade_submission_job
from grader.worker.reconciler import reconcile
from grader.worker.service import INFRASTRUCTURE_REASON, GradingService, JobOutcome
from tests.server.conftest import Account, agent_files, submission_row


@pytest.fixture
def service(settings: Settings, engine: Engine) -> GradingService:
    built = GradingService.from_settings(settings, name="test-worker")
    built.engine.dispose()
    built.engine = engine
    return built


def grading_count(engine: Engine, submission_id: str) -> int:
    with Session(engine) as session:
        return len(list_gradings(session=session, submission_id=submission_id))


def test_a_job_grades_its_submission_once_and_a_repeat_does_nothing(
    service: GradingService, student: Account, submit: Callable[..., str], engine: Engine
) -> None:
    """Claiming is a compare-and-set on (queued, job id): a second delivery is skipped."""
    submission_id = submit(student)
    job_id = submission_row(engine, submission_id).job_id
    assert job_id is not None
    assert service.grade(submission_id, job_id=job_id) is JobOutcome.GRADED
    assert service.grade(submission_id, job_id=job_id) is JobOutcome.SKIPPED
    assert service.grade(submission_id, job_id="some-other-job") is JobOutcome.SKIPPED
    row = submission_row(engine, submission_id)
    assert row.status == SubmissionStatus.GRADED and row.attempts == 1
    assert grading_count(engine, submission_id) == 1


def test_results_and_eval_records_are_written_together(
    service: GradingService, student: Account, submit: Callable[..., str], engine: Engine
) -> None:
    """One result set with one eval record per case, carrying every version and the answer."""
    submission_id = submit(student)
    row = submission_row(engine, submission_id)
    assert row.job_id is not None
    service.grade(submission_id, job_id=row.job_id)
    row = submission_row(engine, submission_id)
    with Session(engine) as session:
        assert row.current_grading_id is not None
        grading = get_grading(session=session, grading_id=row.current_grading_id)
        records = eval_records(session=session, grading_id=row.current_grading_id)
    assert grading is not None and grading.version == 1 and grading.decision == "awarded"
    assert grading.student_view["overall"] == {"passed": 3, "total": 3}
    assert len(records) == 3
    for record in records:
        assert record.submission_id == submission_id
        assert record.package_sha256 == row.package_sha256
        assert record.sandbox == "bwrap"
        assert record.case_set_version == grading.case_set_version
        assert record.grader_version and record.policy_version and record.corpus_version
        assert record.gates and record.error_kind is None and record.seconds is not None
    assert records[0].answer is not None and records[0].answer["citations"] == ["doc-plover"]


def test_agent_that_cannot_start_fails_with_its_reason_and_frees_the_quota(
    service: GradingService, student: Account, submit: Callable[..., str], engine: Engine
) -> None:
    """An AgentStartError ends `failed` with its one-line reason and is not counted."""
    broken = agent_files("raise ImportError('missing dependency: torch')\ndef answer(q): pass\n")
    submission_id = submit(student, broken)
    job_id = submission_row(engine, submission_id).job_id
    assert job_id is not None
    assert service.grade(submission_id, job_id=job_id) is JobOutcome.FAILED
    row = submission_row(engine, submission_id)
    assert row.status == SubmissionStatus.FAILED
    assert row.failure_kind == FailureKind.AGENT_START
    assert row.failure_reason is not None
    assert "failed to start" in row.failure_reason and "torch" in row.failure_reason
    with Session(engine) as session:
        used, _ = quota_used(session=session, user_id=student.id, now=utcnow())
    assert used == 0


def test_infrastructure_failure_is_generic_and_not_counted(
    service: GradingService,
    student: Account,
    submit: Callable[..., str],
    engine: Engine,
    settings: Settings,
) -> None:
    """An archive missing from storage fails with the generic reason, outside the quota."""
    submission_id = submit(student)
    row = submission_row(engine, submission_id)
    ArchiveStore(settings.storage_dir).path_for(row.package_sha256).unlink()
    assert row.job_id is not None
    assert service.grade(submission_id, job_id=row.job_id) is JobOutcome.FAILED
    row = submission_row(engine, submission_id)
    assert row.failure_kind == FailureKind.INFRASTRUCTURE
    assert row.failure_reason == INFRASTRUCTURE_REASON


def test_results_of_a_job_that_lost_its_lease_are_discarded(
    service: GradingService, student: Account, submit: Callable[..., str], engine: Engine
) -> None:
    """If the submission was re-queued to another job meanwhile, the old job writes nothing."""
    submission_id = submit(student)
    old_job = submission_row(engine, submission_id).job_id
    assert old_job is not None
    with session_scope(engine) as session:
        assert claim_submission(
            session=session, submission_id=submission_id, job_id=old_job, worker="stalled"
        )
        assert requeue(
            session=session,
            submission_id=submission_id,
            expected_status=SubmissionStatus.RUNNING,
            old_job_id=old_job,
            new_job_id="new-job",
        )
    assert service.grade(submission_id, job_id=old_job) is JobOutcome.SKIPPED
    assert service.grade(submission_id, job_id="new-job") is JobOutcome.GRADED
    assert grading_count(engine, submission_id) == 1


def test_unsandboxed_grading_needs_the_unsafe_flag(make_settings: Callable[..., Settings]) -> None:
    """GRADER_SANDBOX=none is refused unless GRADER_ALLOW_UNSANDBOXED is set."""
    with pytest.raises(SettingsError, match="GRADER_ALLOW_UNSANDBOXED"):
        GradingService.from_settings(make_settings(sandbox="none"))
    allowed = GradingService.from_settings(make_settings(sandbox="none", allow_unsandboxed=True))
    assert allowed.sandbox.name == "none"
    allowed.engine.dispose()


def test_reconciler_enqueues_queued_submissions_whose_job_is_gone(
    student: Account,
    submit: Callable[..., str],
    engine: Engine,
    settings: Settings,
    redis_client: Redis,
) -> None:
    """After a Redis flush, queued rows get a new job; young rows and live jobs are left alone."""
    queue = make_queue(settings, redis_client)
    submission_id = submit(student)
    later = utcnow() + timedelta(seconds=5)
    assert not reconcile(engine=engine, queue=queue, settings=settings, now=later)  # job alive
    redis_client.flushall()
    assert not reconcile(engine=engine, queue=queue, settings=settings)  # within the grace period
    report = reconcile(engine=engine, queue=queue, settings=settings, now=later)
    assert report.enqueued == [submission_id]
    new_job = submission_row(engine, submission_id).job_id
    assert queue.job_ids == [new_job]
    assert not reconcile(engine=engine, queue=queue, settings=settings, now=later)


def test_reconciler_requeues_a_running_submission_with_a_stale_lease(
    student: Account,
    submit: Callable[..., str],
    engine: Engine,
    settings: Settings,
    redis_client: Redis,
) -> None:
    """A running row whose heartbeat is older than the lease is queued again under a new job,
    and failed for good after max_attempts interrupted gradings."""
    queue = make_queue(settings, redis_client)
    submission_id = submit(student)
    for attempt in range(1, settings.max_attempts + 1):
        job_id = submission_row(engine, submission_id).job_id
        assert job_id is not None
        with session_scope(engine) as session:
            assert claim_submission(
                session=session, submission_id=submission_id, job_id=job_id, worker="doomed"
            )
        fresh = reconcile(engine=engine, queue=queue, settings=settings)
        assert not fresh.requeued  # the lease is fresh
        stale = reconcile(
            engine=engine, queue=queue, settings=settings, now=utcnow() + timedelta(seconds=10)
        )
        if attempt < settings.max_attempts:
            assert stale.requeued == [submission_id]
            row = submission_row(engine, submission_id)
            assert row.status == SubmissionStatus.QUEUED and row.job_id != job_id
            assert row.job_id in queue.job_ids
        else:
            assert stale.abandoned == [submission_id]
    row = submission_row(engine, submission_id)
    assert row.status == SubmissionStatus.FAILED
    assert row.failure_kind == FailureKind.ABANDONED and row.attempts == settings.max_attempts


def test_duplicate_jobs_in_the_queue_grade_once(
    student: Account,
    submit: Callable[..., str],
    engine: Engine,
    settings: Settings,
    redis_client: Redis,
    run_worker_burst: Callable[[], None],
) -> None:
    """The same submission enqueued twice (same and stale job ids) ends with one result set."""
    queue = make_queue(settings, redis_client)
    submission_id = submit(student)
    job_id = submission_row(engine, submission_id).job_id
    assert job_id is not None
    enqueue_grading(queue, submission_id, "stale-job-id", settings)
    run_worker_burst()
    assert submission_row(engine, submission_id).status == SubmissionStatus.GRADED
    assert grading_count(engine, submission_id) == 1


def test_the_web_tier_loads_no_sandbox_backend_and_no_grading_job() -> None:
    """Importing the web app (which enqueues) loads no sandbox backend, Docker SDK or job body."""
    loaded = (
        "grader.worker.service",
        "grader.worker.process",
        "grader.worker.reconciler",
        "grader.sandbox.docker",
        "grader.sandbox.bwrap",
        "grader.sandbox.process",
        "docker",
    )
    probe = "import sys, grader.server; print(' '.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    modules = set(done.stdout.split())
    assert "grader.worker.enqueue" in modules  # what the web tier enqueues with
    assert modules.isdisjoint(loaded)


def test_the_job_path_in_queues_resolves_to_the_job_function() -> None:
    """rq resolves the dotted path every queued job names to the worker's job function."""
    assert import_attribute(JOB_FUNCTION) is grade_submission_job
