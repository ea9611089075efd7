"""The JSON (and CSV / JSON-lines) shapes of every response and export (DESIGN §8, §12).

One module, so every timestamp comes out in the one format of
:func:`grader.db.tables.timestamp` (RFC 3339, UTC, ``Z``) and a key means the same thing
wherever it appears. Student shapes read no case; instructor shapes never reach a student.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from grader.db.tables import (
    EvalRecordRow,
    GradingRow,
    SubmissionRow,
    SubmissionStatus,
    as_utc,
    timestamp,
    utcnow,
    versions_of,
)
from grader.instructor.console import GradingView, StudentRecord, TrailEntry
from grader.instructor.regrades import ItemOutcome, RunRecord
from grader.instructor.roster import RosterEntry, result_dict
from grader.instructor.students import DecisionOutcome

# --------------------------------------------------------------------------------------------
# Student API and pages


_HELD = (SubmissionStatus.GRADED.value, SubmissionStatus.FAILED.value)


def held(row: SubmissionRow, release_at: datetime | None, now: datetime) -> bool:
    """Whether an outcome is still held back: its rounded finishing time has not come
    (README, "Feedback and disclosure": the student reads "running" until then)."""
    stamp = as_utc(release_at)
    return row.status in _HELD and stamp is not None and now < stamp


def submission_summary(
    row: SubmissionRow,
    decision: str | None,
    release_at: datetime | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """One line of the student's list.

    With ``release_at`` (the outcome's finishing time rounded up to the policy's quantum), a
    graded or failed submission reads as running until then, and then as finished at
    ``release_at``.
    """
    status = SubmissionStatus(row.status)
    finished = row.finished_at
    if release_at is not None and status is SubmissionStatus.QUEUED:
        status = SubmissionStatus.RUNNING  # when it leaves the queue tells about another run
    elif release_at is not None:
        if held(row, release_at, now or utcnow()):
            status, decision, finished = SubmissionStatus.RUNNING, None, None
        else:
            finished = release_at
    return {
        "id": row.id,
        "status": status.value,
        "created_at": timestamp(row.created_at),
        "finished_at": timestamp(finished),
        "filename": row.filename,
        "agent_name": row.agent_name,
        "decision": decision if status is SubmissionStatus.GRADED else None,
        "reason": row.failure_reason if status is SubmissionStatus.FAILED else None,
    }


def student_submission(
    row: SubmissionRow,
    grading: GradingRow | None,
    release_at: datetime | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """``{"id", "status", "feedback"}`` plus what a student needs around it.

    ``feedback`` is the student view stored with the current result set (built by
    :func:`grader.core.views.student_view` with the policy's ``feedback`` setting and cut by
    the release policy), or null until the submission is graded and its result released.
    """
    summary = submission_summary(
        row, grading.decision if grading is not None else None, release_at, now
    )
    status = SubmissionStatus(summary["status"])
    feedback = (
        grading.student_view if grading is not None and status is SubmissionStatus.GRADED else None
    )
    return {
        **summary,
        "package_sha256": row.package_sha256,
        "feedback": feedback,
    }


# --------------------------------------------------------------------------------------------
# Instructor API: students, decisions, certificates


def trail_entry(entry: TrailEntry) -> dict[str, Any]:
    """One audit-trail row: who, when, from, to, why, and what it was based on."""
    row = entry.row
    return {
        "id": row.id,
        "student": entry.student,
        "at": timestamp(row.created_at),
        "by": entry.by,
        "action": row.action,
        "from": row.from_state,
        "from_source": row.from_source,
        "to": row.to_state,
        "reason": row.reason,
        "proposal": row.proposal,
        "basis_submission_id": row.basis_submission_id,
        "basis_grading_id": row.basis_grading_id,
        "case_set_version": row.case_set_version,
        "certificate_id": row.certificate_id,
    }


def decision(outcome: DecisionOutcome, certificate_url: str | None) -> dict[str, Any]:
    """A recorded decision, with the certificate held after it (and its public URL)."""
    row, entry, certificate = outcome.row, outcome.entry, outcome.certificate
    return {
        "id": row.id,
        "student": entry.student,
        "action": row.action,
        "from": row.from_state,
        "from_source": row.from_source,
        "decision": row.to_state,
        "source": "instructor",
        "reason": row.reason,
        "proposal": row.proposal,
        "decided_by": entry.current.decided_by,
        "decided_at": timestamp(entry.current.decided_at),
        "basis_submission_id": row.basis_submission_id,
        "case_set_version": row.case_set_version,
        "certificate": (
            {
                "id": certificate.id,
                "url": certificate_url,
                "case_set_version": certificate.case_set_version,
            }
            if certificate
            else None
        ),
    }


def student_record(
    record: StudentRecord, current_version: str | None, certificate_urls: dict[str, str]
) -> dict[str, Any]:
    """A student's roster line, submissions, audit trail and certificates."""
    best = record.entry.best
    return {
        "student": record.entry.as_dict(),
        "submissions": [
            {
                "id": row.id,
                "status": row.status,
                "agent_name": row.agent_name,
                "filename": row.filename,
                "created_at": timestamp(row.created_at),
                "failure_reason": row.failure_reason,
                "result": result_dict(result, current_version) if result else None,
                "best": best is not None and best.submission_id == row.id,
            }
            for row, result in record.submissions
        ],
        "trail": [trail_entry(entry) for entry in record.trail],
        "certificates": [
            {
                "id": row.id,
                "case_set_version": row.case_set_version,
                "issued_at": timestamp(row.issued_at),
                "status": "revoked" if row.revoked_at else "valid",
                "revoked_at": timestamp(row.revoked_at),
                "submission_id": row.submission_id,
                "url": certificate_urls[row.id],
            }
            for row in record.certificates
        ],
    }


# --------------------------------------------------------------------------------------------
# Instructor API: submissions and regrades


def grading_line(grading: GradingRow, current_id: int | None) -> dict[str, Any]:
    """One result set in a submission's list of versions."""
    return {
        "version": grading.version,
        "trigger": grading.trigger,
        "decision": grading.decision,
        "case_set_version": grading.case_set_version,
        "created_at": timestamp(grading.created_at),
        "current": grading.id == current_id,
    }


def grading_view(view: GradingView) -> dict[str, Any]:
    """A submission with every result set listed and one in full (``grading``)."""
    submission, grading = view.submission, view.grading
    current = submission.current_grading_id
    body: dict[str, Any] = {
        "id": submission.id,
        "student": view.student,
        "status": submission.status,
        "agent_name": submission.agent_name,
        "filename": submission.filename,
        "package_sha256": submission.package_sha256,
        "created_at": timestamp(submission.created_at),
        "failure_reason": submission.failure_reason,
        "gradings": [grading_line(g, current) for g in view.gradings],
        "grading": None,
    }
    if grading is not None and view.detail is not None:
        body["grading"] = {
            "version": grading.version,
            "trigger": grading.trigger,
            "current": grading.id == current,
            "created_at": timestamp(grading.created_at),
            "seconds": grading.seconds,
            "worker": grading.worker,
            "regrade": view.regrade,
            **view.detail,
        }
    return body


def regrade_run(record: RunRecord, *, with_items: bool = False) -> dict[str, Any]:
    """A regrade run (and, with ``with_items``, what it did to each submission)."""
    run = record.run
    body: dict[str, Any] = {
        "id": run.id,
        "mode": run.mode,
        "by": record.by,
        "at": timestamp(run.created_at),
        "case_set_version": run.case_set_version,
        "submissions": run.submissions,
        "decisions_changed": run.changed,
        "seconds": run.seconds,
    }
    if with_items:
        body["items"] = [regrade_item(outcome) for outcome in record.items]
    return body


def regrade_item(outcome: ItemOutcome) -> dict[str, Any]:
    item, before, after = outcome.item.item, outcome.item.before, outcome.item.after
    new_decision = outcome.new_decision
    old, new = outcome.old_counts, outcome.new_counts
    return {
        "submission_id": item.submission_id,
        "student": outcome.student,
        "status": outcome.item.submission.status,
        "old_version": before.version if before else None,
        "new_version": after.version if after else None,
        "old_decision": item.old_decision,
        "new_decision": new_decision,
        "decision_changed": new_decision is not None and new_decision != item.old_decision,
        "old_passed": old[0] if old else None,
        "new_passed": new[0] if new else None,
        "total": new[1] if new else None,
        "dropped_cases": item.dropped_cases,
        "missing_cases": item.missing_cases,
    }


# --------------------------------------------------------------------------------------------
# Exports: certificate decisions as CSV, eval records as JSON lines

DECISION_COLUMNS = (
    "student",
    "decision",
    "source",
    "reason",
    "action",
    "decided_by",
    "decided_at",
    "certificate_id",
    "proposal",
    "proposal_reasons",
    "needs_review",
    "best_submission",
    "best_grading_version",
    "case_set_version",
    "outdated",
    "feedback_bits",
)

#: Leading characters a spreadsheet would run as a formula; such cells get a leading quote.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def decision_row(entry: RosterEntry) -> dict[str, str]:
    """One CSV row: a student's current decision, its source and reason, and its basis."""
    current, best = entry.current, entry.best
    values: dict[str, object] = {
        "student": entry.student,
        "decision": current.state.value,
        "source": current.source.value,
        "reason": current.reason,
        "action": current.action.value if current.action else None,
        "decided_by": current.decided_by,
        "decided_at": timestamp(current.decided_at),
        "certificate_id": entry.certificate_id,
        "proposal": entry.proposal.value if entry.proposal else None,
        "proposal_reasons": "; ".join(entry.proposal_reasons),
        "needs_review": entry.needs_review,
        "best_submission": best.submission_id if best else None,
        "best_grading_version": best.grading_version if best else None,
        "case_set_version": best.case_set_version if best else None,
        "outdated": entry.outdated,
        "feedback_bits": f"{entry.feedback_bits:.2f}",
    }
    return {column: _cell(values[column]) for column in DECISION_COLUMNS}


def decisions_csv(entries: Iterable[RosterEntry]) -> str:
    """Every student's current decision (header first, one row per student)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=DECISION_COLUMNS, lineterminator="\r\n")
    writer.writeheader()
    for entry in entries:
        writer.writerow(decision_row(entry))
    return out.getvalue()


def eval_record(
    record: EvalRecordRow, *, grading: GradingRow, student: str, current: bool
) -> dict[str, Any]:
    """A replayable eval record (DESIGN §7) with every version of its measuring setup."""
    return {
        "submission_id": record.submission_id,
        "student": student,
        "grading_id": grading.id,
        "grading_version": grading.version,
        "trigger": grading.trigger,
        "current": current,
        "graded_at": timestamp(grading.created_at),
        "position": record.position,
        "case_id": record.case_id,
        "kind": record.kind,
        "safety": record.safety,
        "passed": record.passed,
        "versions": versions_of(record).model_dump(mode="json"),
        "answer": record.answer,
        "gates": record.gates,
        "error_kind": record.error_kind,
        "safety_failures": record.safety_failures,
        "diagnosis": record.diagnosis,
        "seconds": record.seconds,
    }


def jsonl(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """One compact JSON object per line."""
    for row in rows:
        yield json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n"


def instructor_submission(
    row: SubmissionRow, student: str | None, gradings: Iterable[GradingRow]
) -> dict[str, Any]:
    """A submission's metadata for the instructor (the result set itself is added beside)."""
    return {
        "id": row.id,
        "status": row.status,
        "student": student,
        "created_at": timestamp(row.created_at),
        "attempts": row.attempts,
        "failure_kind": row.failure_kind,
        "reason": row.failure_reason,
        "gradings": [
            {
                "version": g.version,
                "trigger": g.trigger,
                "decision": g.decision,
                "current": g.id == row.current_grading_id,
            }
            for g in gradings
        ],
    }
