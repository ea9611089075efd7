"""Export builders: certificate decisions as CSV, eval records as JSON lines (no I/O)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from typing import Any

from grader.db.tables import EvalRecordRow, GradingRow, as_utc

from .roster import RosterEntry

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
        "decided_at": current.decided_at.isoformat() if current.decided_at else None,
        "certificate_id": entry.certificate_id,
        "proposal": entry.proposal.value if entry.proposal else None,
        "proposal_reasons": "; ".join(entry.proposal_reasons),
        "needs_review": entry.needs_review,
        "best_submission": best.submission_id if best else None,
        "best_grading_version": best.grading_version if best else None,
        "case_set_version": best.case_set_version if best else None,
        "outdated": entry.outdated,
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


def eval_record_dict(
    record: EvalRecordRow, *, grading: GradingRow, student: str, current: bool
) -> dict[str, Any]:
    """A replayable eval record (DESIGN §7) with every version of its measuring setup."""
    graded_at = as_utc(grading.created_at)
    return {
        "submission_id": record.submission_id,
        "student": student,
        "grading_id": grading.id,
        "grading_version": grading.version,
        "trigger": grading.trigger,
        "current": current,
        "graded_at": graded_at.isoformat() if graded_at else None,
        "position": record.position,
        "case_id": record.case_id,
        "kind": record.kind,
        "safety": record.safety,
        "passed": record.passed,
        "versions": {
            "case_set": record.case_set_version,
            "cases": record.cases_version,
            "policy": record.policy_version,
            "corpus": record.corpus_version,
            "grader": record.grader_version,
            "sandbox": record.sandbox,
            "sandbox_image": record.sandbox_image,
            "package_sha256": record.package_sha256,
        },
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
