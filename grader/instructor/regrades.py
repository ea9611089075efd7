"""Regrades: from recorded answers (in one transaction) or by rerunning agents (enqueued).

Neither overwrites anything: each regraded submission gets a new result set (the next version
number; trigger ``regrade`` from answers, whatever the worker records for a rerun) and its
current pointer moves to it; earlier result sets and their eval records stay as they were.
Every regrade is recorded (``regrade_runs``/``regrade_items``) with what it changed. The
rescoring itself is pure (:mod:`.rescoring`); the reads and writes are :mod:`grader.db.regrades`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlmodel import Session

from grader.core.casesets import CaseSet
from grader.core.models import Decision
from grader.db import disclosures
from grader.db import regrades as regrade_rows
from grader.db.regrades import RegradedSubmission, RunItem
from grader.db.results import pass_counts
from grader.db.submissions import get_submission, new_id, requeue
from grader.db.tables import (
    GradingRow,
    GradingTrigger,
    RegradeRunRow,
    SubmissionStatus,
    UserRow,
    utcnow,
    version_columns,
    versions_of,
)
from grader.db.users import user_names

from .rescoring import RecordedCase, regrade_recorded


class RegradeMode(StrEnum):
    ANSWERS = "answers"
    RERUN = "rerun"


@dataclass(frozen=True)
class SubmissionChange:
    """What a regrade from answers did (or, in a preview, would do) to one submission."""

    submission_id: str
    student: str
    old_version: int
    new_version: int | None
    old_decision: Decision
    new_decision: Decision
    old_passed: int
    new_passed: int
    total: int
    dropped: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return self.old_decision is not self.new_decision

    def as_dict(self) -> dict[str, Any]:
        return {
            "submission_id": self.submission_id,
            "student": self.student,
            "old_version": self.old_version,
            "new_version": self.new_version,
            "old_decision": self.old_decision.value,
            "new_decision": self.new_decision.value,
            "decision_changed": self.changed,
            "old_passed": self.old_passed,
            "new_passed": self.new_passed,
            "total": self.total,
            "dropped_cases": list(self.dropped),
            "missing_cases": list(self.missing),
        }


@dataclass
class RegradeResult:
    run_id: int | None
    case_set_version: str
    dry_run: bool
    changes: list[SubmissionChange] = field(default_factory=list)
    #: Submissions already graded on this case-set version (left alone).
    up_to_date: int = 0
    seconds: float = 0.0

    @property
    def decisions_changed(self) -> list[SubmissionChange]:
        return [change for change in self.changes if change.changed]

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "mode": RegradeMode.ANSWERS.value,
            "dry_run": self.dry_run,
            "case_set_version": self.case_set_version,
            "regraded": len(self.changes),
            "up_to_date": self.up_to_date,
            "decisions_changed": len(self.decisions_changed),
            "seconds": round(self.seconds, 3),
            "changes": [change.as_dict() for change in self.changes],
        }


def regrade_from_answers(
    *,
    session: Session,
    case_set: CaseSet,
    actor: UserRow,
    submission_ids: Sequence[str] | None = None,
    include_up_to_date: bool = False,
    dry_run: bool = False,
    now: datetime | None = None,
) -> RegradeResult:
    """Re-apply ``case_set``'s gates and policy to the recorded answers of graded submissions.

    By default only submissions whose current result set was graded on another case-set
    version are regraded (the others would not change). With ``dry_run`` nothing is written
    and the result previews the changes.
    """
    started = time.perf_counter()
    now = now or utcnow()
    assert actor.id is not None
    run: RegradeRunRow | None = None
    if not dry_run:
        # Written first: on SQLite this takes the write lock before anything is read.
        run = regrade_rows.create_run(
            session=session,
            mode=RegradeMode.ANSWERS.value,
            actor_id=actor.id,
            case_set_version=case_set.version,
            now=now,
        )
    selected = regrade_rows.graded_submissions(
        session=session, submission_ids=submission_ids, lock=not dry_run
    )
    todo = [
        (submission, grading)
        for submission, grading in selected
        if include_up_to_date or grading.case_set_version != case_set.version
    ]
    stored = regrade_rows.stored_cases(
        session=session, grading_ids=[grading.id for _, grading in todo if grading.id]
    )
    latest = regrade_rows.latest_versions(
        session=session, submission_ids=[submission.id for submission, _ in todo]
    )
    names = user_names(session=session)
    # Feedback accounting (README, "Feedback and disclosure"): each student's total on this
    # version, and what each replaced result set showed.
    spent = disclosures.bits_by_student(session=session, case_set_version=case_set.version)
    earlier_rows = disclosures.for_gradings(
        session=session, grading_ids=[grading.id for _, grading in todo if grading.id]
    )
    planned: dict[str, disclosures.Planned] = {}
    result = RegradeResult(
        run_id=run.id if run else None, case_set_version=case_set.version, dry_run=dry_run
    )
    written: list[RegradedSubmission] = []
    for submission, grading in todo:
        assert grading.id is not None
        cases = stored.get(grading.id, [])
        regraded = regrade_recorded(
            [
                RecordedCase.from_stored(
                    c.case_id, c.answer, c.error_kind, c.seconds, c.model_calls
                )
                for c in cases
            ],
            case_set,
            versions=versions_of(grading),
            restarts=grading.restarts,
            model_gateway="model" in (grading.student_view or {}),
        )
        report = regraded.report
        new_version = latest.get(submission.id, grading.version) + 1
        result.changes.append(
            SubmissionChange(
                submission_id=submission.id,
                student=names.get(submission.user_id, ""),
                old_version=grading.version,
                new_version=None if dry_run else new_version,
                old_decision=Decision(grading.decision),
                new_decision=regraded.decision,
                old_passed=sum(c.passed for c in cases),
                new_passed=sum(r.passed for r in report.results),
                total=len(report.results),
                dropped=regraded.dropped,
                missing=regraded.missing,
            )
        )
        if run is None:
            continue
        shown = disclosures.regraded_view(
            earlier=earlier_rows.get(grading.id),
            previous_view=grading.student_view,
            report=report,
            policy=case_set.policy,
            spent=spent.get(submission.user_id, 0.0),
            now=now,
        )
        spent[submission.user_id] = spent.get(submission.user_id, 0.0) + shown.release.bits
        planned[submission.id] = shown
        new_grading = GradingRow(
            submission_id=submission.id,
            version=new_version,
            trigger=GradingTrigger.REGRADE.value,
            created_at=now,
            decision=report.decision.decision.value,
            reasons=list(report.decision.reasons),
            student_view=shown.view,
            retrieval=report.retrieval,
            restarts=report.restarts,
            seconds=0.0,
            worker=f"regrade:{run.id}",
            **version_columns(report.versions),
        )
        written.append(
            RegradedSubmission(
                submission_id=submission.id,
                old_grading_id=grading.id,
                grading=new_grading,
                report=report,
                answers={c.case_id: c.answer for c in cases},
                old_decision=grading.decision,
                dropped=regraded.dropped,
                missing=regraded.missing,
            )
        )
    result.up_to_date = len(selected) - len(todo)
    if run is not None:
        assert run.id is not None
        if written:
            regrade_rows.write_regrade(session=session, run_id=run.id, regraded=written)
            owners = {submission.id: submission.user_id for submission, _ in todo}
            disclosures.record_many(
                session=session,
                items=[
                    (planned[item.submission_id], item.grading, owners[item.submission_id])
                    for item in written
                ],
                now=now,
            )
    result.seconds = time.perf_counter() - started
    if run is not None:
        run.submissions = len(result.changes)
        run.changed = len(result.decisions_changed)
        run.seconds = round(result.seconds, 4)
        regrade_rows.save_run(session=session, run=run)
    return result


# --------------------------------------------------------------------------------------------
# Rerunning agents


@dataclass(frozen=True)
class RerunPlan:
    """A recorded rerun: the submissions re-queued, each with the job id to enqueue it under."""

    run_id: int
    jobs: tuple[tuple[str, str], ...]
    skipped: tuple[str, ...]
    #: Graded submissions whose archive the storage gc removed: nothing left to run.
    archive_gone: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "mode": RegradeMode.RERUN.value,
            "queued": [submission_id for submission_id, _ in self.jobs],
            "skipped": list(self.skipped),
            "archive_gone": list(self.archive_gone),
        }


def start_rerun(
    *,
    session: Session,
    actor: UserRow,
    case_set_version: str,
    submission_ids: Sequence[str],
    archive_exists: Callable[[str], bool],
    now: datetime | None = None,
) -> RerunPlan:
    """Re-queue graded submissions for a fresh run of their agents (enqueue after commit).

    A submission that is not graded (queued, running or failed) is skipped, and so is one whose
    archive ``archive_exists`` (by SHA-256) no longer finds: the storage gc removed it, so a
    rerun could never record a new result set. The worker records
    the new result set as the next version and moves the current pointer; until then the
    previous results stay current.
    """
    assert actor.id is not None
    run = regrade_rows.create_run(
        session=session,
        mode=RegradeMode.RERUN.value,
        actor_id=actor.id,
        case_set_version=case_set_version,
        now=now or utcnow(),
    )
    assert run.id is not None
    jobs: list[tuple[str, str]] = []
    skipped: list[str] = []
    archive_gone: list[str] = []
    for submission_id in dict.fromkeys(submission_ids):
        submission = get_submission(session=session, submission_id=submission_id)
        if submission is None or submission.status != SubmissionStatus.GRADED.value:
            skipped.append(submission_id)
            continue
        if not archive_exists(submission.package_sha256):
            archive_gone.append(submission_id)
            continue
        job_id = new_id()
        moved = requeue(
            session=session,
            submission_id=submission.id,
            expected_status=SubmissionStatus.GRADED,
            old_job_id=submission.job_id,
            new_job_id=job_id,
        )
        if not moved:
            skipped.append(submission_id)
            continue
        regrade_rows.add_rerun_item(session=session, run_id=run.id, submission=submission)
        jobs.append((submission.id, job_id))
    run.submissions = len(jobs)
    regrade_rows.save_run(session=session, run=run)
    return RerunPlan(
        run_id=run.id, jobs=tuple(jobs), skipped=tuple(skipped), archive_gone=tuple(archive_gone)
    )


# --------------------------------------------------------------------------------------------
# History


@dataclass(frozen=True)
class RunRecord:
    """A regrade run as the console lists it (``items`` only when one run is asked for)."""

    run: RegradeRunRow
    by: str | None
    items: list[ItemOutcome] = field(default_factory=list)


@dataclass(frozen=True)
class ItemOutcome:
    """What a run did to one submission (a rerun's new results once the worker records them)."""

    item: RunItem
    student: str | None
    old_counts: tuple[int, int] | None
    new_counts: tuple[int, int] | None

    @property
    def new_decision(self) -> str | None:
        after = self.item.after
        return self.item.item.new_decision or (after.decision if after else None)


def list_runs(*, session: Session, limit: int = 50) -> list[RunRecord]:
    """The newest regrades first."""
    names = user_names(session=session)
    return [
        RunRecord(run, names.get(run.actor_id))
        for run in regrade_rows.list_runs(session=session, limit=limit)
    ]


def get_run(*, session: Session, run_id: int) -> RunRecord | None:
    """A regrade with what it did to each submission."""
    run = regrade_rows.get_run(session=session, run_id=run_id)
    if run is None:
        return None
    names = user_names(session=session)
    items = regrade_rows.run_items(session=session, run_id=run_id)
    ids = [
        grading.id
        for item in items
        for grading in (item.before, item.after)
        if grading is not None and grading.id is not None
    ]
    passed = pass_counts(session=session, grading_ids=ids)

    def counts(grading: GradingRow | None) -> tuple[int, int] | None:
        if grading is None or grading.id is None:
            return None
        return passed.get(grading.id, (0, 0))

    outcomes = [
        ItemOutcome(
            item,
            names.get(item.submission.user_id),
            counts(item.before),
            counts(item.after),
        )
        for item in items
    ]
    return RunRecord(run, names.get(run.actor_id), outcomes)


def regrade_notes(*, session: Session, grading_id: int) -> dict[str, Any] | None:
    """How a result set came from a regrade from answers (run, replaced version, notes)."""
    found = regrade_rows.item_producing(session=session, grading_id=grading_id)
    if found is None:
        return None
    item, previous = found
    return {
        "run_id": item.run_id,
        "from_version": previous.version if previous else None,
        "dropped_cases": item.dropped_cases,
        "missing_cases": item.missing_cases,
    }
