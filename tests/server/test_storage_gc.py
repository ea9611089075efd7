"""`grader storage gc` (grader/storage_gc.py): which archives it keeps, what it removes, the
rerun of a collected archive, and the reconciler's periodic run — on SQLite and PostgreSQL, with
the folder and the database archive store."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from sqlalchemy.engine import Engine

from grader.core.casesets import load_case_set
from grader.core.models import ErrorKind
from grader.core.views import student_view
from grader.db.archive_store import open_archive_store
from grader.db.engine import session_scope
from grader.db.submissions import (
    claim_submission,
    create_submission,
    get_submission,
    mark_failed,
    record_grading,
    requeue,
)
from grader.db.tables import (
    CertificateRow,
    FailureKind,
    Role,
    SubmissionRow,
    SubmissionStatus,
    utcnow,
)
from grader.db.users import create_user, get_user
from grader.grading import build_report, results_from_runs
from grader.instructor.regrades import start_rerun
from grader.sandbox.session import CaseRun
from grader.settings import Settings
from grader.storage import ArchiveStoreBase
from grader.storage_gc import collect_garbage
from grader.worker.enqueue import make_queue
from grader.worker.reconciler import ReconcilerThread
from grader.worker.service import GradingService, JobOutcome
from tests.server.conftest import (
    GRADER_BIN,
    Account,
    set_touched,
    settings_env,
    submission_row,
    wait_for,
)

GOOD = {
    "answer": "Chunks overlap so no sentence is cut.",
    "citations": ["doc-plover"],
    "confidence": 0.8,
    "needs_human_review": False,
}
REFUSAL = {
    "answer": "I don't know; the course material does not cover this.",
    "citations": [],
    "confidence": 0.1,
    "needs_human_review": True,
}
#: Older than the gc's one-hour grace: a file with this mtime may be removed.
LONG_AGO = time.time() - 3 * 3600


@dataclass
class Scenario:
    """Archives and submissions at known ages; ``expected`` are the archives gc must remove."""

    engine: Engine
    store: ArchiveStoreBase
    cases_dir: Path
    now: datetime = field(default_factory=utcnow)
    ids: dict[str, str] = field(default_factory=dict)
    sha: dict[str, str] = field(default_factory=dict)

    def archive(self, label: str) -> str:
        """Store an archive (old enough to be collectable) and return its SHA-256."""
        data = f"archive {label}".encode()
        with self.store.receiving(io.BytesIO(data), "a.zip", max_bytes=1000) as received:
            self.store.keep(received)
        self.sha[label] = hashlib.sha256(data).hexdigest()
        set_touched(self.store, self.sha[label], LONG_AGO)
        return self.sha[label]

    def submission(
        self, account: Account, label: str, *, days: float, archive: str, outcome: str
    ) -> str:
        """A submission uploaded ``days`` ago: ``good``/``poor`` (graded), ``failed`` or
        ``queued``."""
        created = self.now - timedelta(days=days)
        with session_scope(self.engine) as session:
            user = get_user(session=session, user_id=account.id)
            assert user is not None
            row = create_submission(
                session=session,
                user=user,
                filename="a.zip",
                agent_name=label,
                package_sha256=self.sha.get(archive) or self.archive(archive),
                package_bytes=10,
                daily_limit=None,
                now=created,
            )
            assert isinstance(row, SubmissionRow) and row.job_id is not None
            if outcome in ("good", "poor", "failed"):
                assert claim_submission(
                    session=session, submission_id=row.id, job_id=row.job_id, worker="t"
                )
            if outcome == "failed":
                assert mark_failed(
                    session=session,
                    submission_id=row.id,
                    job_id=row.job_id,
                    kind=FailureKind.AGENT_START,
                    reason="x",
                )
            elif outcome in ("good", "poor"):
                report, view = self._report(good=outcome == "good")
                assert record_grading(
                    session=session,
                    submission_id=row.id,
                    job_id=row.job_id,
                    report=report,
                    student_view=view,
                    seconds=1.0,
                    now=created,
                )
        self.ids[label] = row.id
        return row.id

    def _report(self, *, good: bool) -> tuple[Any, dict[str, Any]]:
        case_set = load_case_set(self.cases_dir)
        runs = [
            CaseRun(case.id, value=(GOOD if case.kind.value == "answerable" else REFUSAL))
            if good
            else CaseRun(case.id, error=ErrorKind.TIMEOUT)
            for case in case_set.cases
        ]
        report = build_report(case_set, results_from_runs(case_set, runs), sandbox="bwrap")
        return report, student_view(report, feedback=case_set.policy.feedback)

    def certify(self, student: Account, instructor: Account, label: str) -> None:
        with session_scope(self.engine) as session:
            row = get_submission(session=session, submission_id=self.ids[label])
            assert row is not None and row.current_grading_id is not None
            session.add(
                CertificateRow(
                    id=f"cert{label}",
                    student_id=student.id,
                    submission_id=row.id,
                    grading_id=row.current_grading_id,
                    case_set_version="v",
                    issued_by=instructor.id,
                )
            )


@pytest.fixture
def settings(make_settings: Any, storage_url: str) -> Settings:
    """This module's settings: each archive store in turn (GRADER_STORAGE_URL)."""
    chosen: Settings = make_settings(storage_url=storage_url)
    return chosen


def store_of(settings: Settings) -> Iterator[ArchiveStoreBase]:
    store = open_archive_store(
        settings.storage_url, storage_dir=settings.storage_dir, database_url=settings.database_url
    )
    yield store
    store.close()


@pytest.fixture
def store(settings: Settings) -> Iterator[ArchiveStoreBase]:
    yield from store_of(settings)


@pytest.fixture
def scenario(
    store: ArchiveStoreBase,
    engine: Engine,
    settings: Settings,
    cases_dir: Path,
    make_user: Any,
) -> tuple[Scenario, set[str]]:
    """Two students' histories plus stray files; returns the scenario and the SHA-256 of the
    archives gc must remove (retention: 30 days graded, 2 days failed)."""
    s = Scenario(engine, store, cases_dir)
    ann, ben = make_user(Role.STUDENT, "ann"), make_user(Role.STUDENT, "ben")
    prof = make_user(Role.INSTRUCTOR, "prof")
    s.submission(ann, "ann-best", days=40, archive="ann-best", outcome="good")  # best: kept
    s.submission(ann, "ann-middle", days=39, archive="ann-middle", outcome="poor")  # removed
    s.submission(ann, "ann-latest", days=35, archive="ann-latest", outcome="poor")  # latest: kept
    s.submission(ann, "ann-failed-new", days=1, archive="ann-failed-new", outcome="failed")
    s.submission(ann, "ann-failed-old", days=3, archive="ann-failed-old", outcome="failed")
    s.submission(ann, "ann-stuck", days=50, archive="ann-stuck", outcome="queued")  # in flight
    s.submission(ben, "ben-certified", days=60, archive="ben-certified", outcome="poor")
    s.certify(ben, prof, "ben-certified")  # certificate basis: kept
    s.submission(ben, "ben-best", days=50, archive="ben-best", outcome="good")
    s.submission(ben, "ben-old", days=48, archive="shared", outcome="poor")  # removed, but …
    s.submission(ben, "ben-recent", days=1, archive="shared", outcome="poor")  # … shared: kept
    s.archive("orphan-old")  # named by no submission: removed
    fresh = s.archive("orphan-fresh")
    set_touched(s.store, fresh, time.time())  # just stored: too recent to remove
    stale_upload = s.store.spool / "incoming" / "deadbeef"
    stale_upload.mkdir(parents=True)
    os.utime(stale_upload, (LONG_AGO, LONG_AGO))
    expected = {s.sha[label] for label in ("ann-middle", "ann-failed-old", "orphan-old")}
    return s, expected


def grader_storage_gc(settings: Settings, cwd: Path, *options: str) -> str:
    """Run `grader storage gc` as a subprocess with ``settings``; its standard output."""
    result = subprocess.run(
        [GRADER_BIN, "storage", "gc", *options],
        env=settings_env(settings),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def remaining(store: ArchiveStoreBase) -> set[str]:
    return {archive.sha256 for archive in store.archives()}


def test_dry_run_reports_what_gc_would_remove_and_removes_nothing(
    scenario: tuple[Scenario, set[str]], settings: Settings, engine: Engine
) -> None:
    """--dry-run names exactly the unneeded archives and leaves every file in place."""
    s, expected = scenario
    before = remaining(s.store)
    report = collect_garbage(engine=engine, store=s.store, settings=settings, dry_run=True)
    assert set(report.removed) == expected
    assert (report.unreferenced, report.recent) == (1, 1)
    assert remaining(s.store) == before


def test_gc_command_removes_only_archives_no_submission_needs(
    scenario: tuple[Scenario, set[str]], settings: Settings, tmp_path: Path
) -> None:
    """`grader storage gc --json` removes old superseded and old failed archives and strays;
    it keeps best, latest, certificate bases, in-flight, recent and shared archives."""
    s, expected = scenario
    before = remaining(s.store)
    report = json.loads(grader_storage_gc(settings, tmp_path, "--json"))
    assert set(report["removed_sha256"]) == expected
    assert report["removed"] == 3 and report["kept"] == len(before) - 4
    assert report["incoming_removed"] == 1
    assert remaining(s.store) == before - expected
    assert not (s.store.spool / "incoming" / "deadbeef").exists()
    human = grader_storage_gc(settings, tmp_path, "--dry-run")
    assert human.startswith("storage gc: would remove 0 archives")


def test_a_rerun_of_a_collected_archive_keeps_the_earlier_results(
    scenario: tuple[Scenario, set[str]], settings: Settings, engine: Engine
) -> None:
    """An instructor rerun of a submission whose archive gc removed ends graded again with its
    earlier result set current — not failed."""
    s, _expected = scenario
    collect_garbage(engine=engine, store=s.store, settings=settings)
    submission_id = s.ids["ann-middle"]
    before = submission_row(engine, submission_id)
    with session_scope(engine) as session:
        assert requeue(
            session=session,
            submission_id=submission_id,
            expected_status=SubmissionStatus.GRADED,
            old_job_id=before.job_id,
            new_job_id="rerun-job",
        )
    service = GradingService.from_settings(settings, name="gc-test")
    service.engine.dispose()
    service.engine = engine
    assert service.grade(submission_id, job_id="rerun-job") == JobOutcome.KEPT_EARLIER
    after = submission_row(engine, submission_id)
    assert after.status == SubmissionStatus.GRADED.value
    assert after.current_grading_id == before.current_grading_id
    assert after.failure_kind is None


def test_an_instructor_rerun_leaves_out_submissions_whose_archive_was_collected(
    scenario: tuple[Scenario, set[str]], settings: Settings, engine: Engine
) -> None:
    """A rerun names a graded submission whose archive gc removed under ``archive_gone`` and
    queues no job for it (it could never record a new result set), while one whose archive is
    kept is queued as usual."""
    s, _expected = scenario
    collect_garbage(engine=engine, store=s.store, settings=settings)
    gone = s.ids["ann-middle"]
    kept = next(
        submission_id
        for submission_id in s.ids.values()
        if submission_row(engine, submission_id).status == SubmissionStatus.GRADED.value
        and s.store.exists(submission_row(engine, submission_id).package_sha256)
    )
    assert not s.store.exists(submission_row(engine, gone).package_sha256)
    with session_scope(engine) as session:
        actor, _token = create_user(session=session, name="prof-gc", role=Role.INSTRUCTOR)
        plan = start_rerun(
            session=session,
            actor=actor,
            case_set_version="v-test",
            submission_ids=[gone, kept],
            archive_exists=s.store.exists,
        )
    assert plan.archive_gone == (gone,)
    assert [submission_id for submission_id, _job in plan.jobs] == [kept]
    assert submission_row(engine, gone).status == SubmissionStatus.GRADED.value
    assert plan.as_dict()["archive_gone"] == [gone]


def test_the_reconciler_collects_once_per_interval(
    make_settings: Any,
    storage_url: str,
    store: ArchiveStoreBase,
    engine: Engine,
    redis_client: Redis,
) -> None:
    """A worker's reconciler thread runs the gc on its first pass, then not again within
    GRADER_STORAGE_GC_INTERVAL_SECONDS (one run per interval across workers)."""
    settings = make_settings(storage_gc_interval_seconds=3600, storage_url=storage_url)
    s = Scenario(engine, store, Path("."))
    first = s.archive("stray-1")
    thread = ReconcilerThread(
        engine=engine,
        queue=make_queue(settings, redis_client),
        settings=settings,
        interval=0.2,
    )
    thread.start()
    try:
        wait_for(lambda: first not in remaining(s.store), timeout=20, message="gc did not run")
        second = s.archive("stray-2")
        time.sleep(1.5)  # several reconciler passes
        assert second in remaining(s.store)
    finally:
        thread.stop()
        thread.join(timeout=10)
    assert redis_client.ttl(f"{settings.queue_name}:storage-gc") > 3000
