"""JSON shapes of submissions for students (DESIGN §8, §12). Nothing here reads a case."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from grader.db.tables import GradingRow, SubmissionRow, SubmissionStatus, as_utc


def _time(value: datetime | None) -> str | None:
    stamp = as_utc(value)
    return stamp.isoformat(timespec="seconds").replace("+00:00", "Z") if stamp else None


def submission_summary(row: SubmissionRow, decision: str | None) -> dict[str, Any]:
    """One line of the student's list."""
    status = SubmissionStatus(row.status)
    return {
        "id": row.id,
        "status": status.value,
        "created_at": _time(row.created_at),
        "finished_at": _time(row.finished_at),
        "filename": row.filename,
        "agent_name": row.agent_name,
        "decision": decision if status is SubmissionStatus.GRADED else None,
        "reason": row.failure_reason if status is SubmissionStatus.FAILED else None,
    }


def submission_detail(row: SubmissionRow, grading: GradingRow | None) -> dict[str, Any]:
    """``{"id", "status", "feedback"}`` plus what a student needs around it.

    ``feedback`` is the student view stored with the current result set (built by
    :func:`grader.core.views.student_view` with the policy's ``feedback`` setting), or null
    until the submission is graded.
    """
    status = SubmissionStatus(row.status)
    feedback = (
        grading.student_view if grading is not None and status is SubmissionStatus.GRADED else None
    )
    return {
        **submission_summary(row, grading.decision if grading is not None else None),
        "package_sha256": row.package_sha256,
        "feedback": feedback,
    }
