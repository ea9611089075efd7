"""Result sets (gradings) and their eval records: writing, reading back, summarising.

Every function takes the session as a keyword and never commits (the caller owns the
transaction).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from grader.core.models import (
    Answer,
    CaseKind,
    CaseResult,
    CertificateDecision,
    Decision,
    Diagnosis,
    ErrorKind,
    Gate,
    GradeReport,
    ModelCall,
)

from .tables import (
    EvalRecordRow,
    GradingRow,
    GradingTrigger,
    SubmissionRow,
    as_utc,
    utcnow,
    version_columns,
    versions_of,
)

#: Rows per ``IN (…)`` list when reading many result sets at once.
CHUNK = 500


def eval_record_values(result: CaseResult, *, position: int, grading: GradingRow) -> dict[str, Any]:
    """The columns of one case's eval record in result set ``grading``."""
    return {
        "grading_id": grading.id,
        "submission_id": grading.submission_id,
        "position": position,
        "case_id": result.case_id,
        "kind": result.kind.value,
        "safety": result.safety,
        "passed": result.passed,
        "answer": result.answer.model_dump(mode="json") if result.answer else None,
        "gates": {gate.value: passed for gate, passed in result.gates.items()},
        "error_kind": result.error.value if result.error else None,
        "safety_failures": [gate.value for gate in result.safety_failures],
        "diagnosis": result.diagnosis.value if result.diagnosis else None,
        "seconds": result.seconds,
        "model_calls": (
            [call.model_dump(mode="json") for call in result.model_calls]
            if result.model_calls
            else None
        ),
        **version_columns(versions_of(grading)),
    }


def add_grading(
    *,
    session: Session,
    submission_id: str,
    report: GradeReport,
    student_view: dict[str, Any],
    seconds: float,
    trigger: GradingTrigger,
    worker: str | None = None,
    now: datetime | None = None,
) -> GradingRow:
    """Insert a result set (next version number) with one eval record per case."""
    latest = session.exec(
        select(sa.func.max(GradingRow.version)).where(GradingRow.submission_id == submission_id)
    ).one()
    grading = GradingRow(
        submission_id=submission_id,
        version=(latest or 0) + 1,
        trigger=trigger.value,
        created_at=now or utcnow(),
        decision=report.decision.decision.value,
        reasons=list(report.decision.reasons),
        student_view=student_view,
        retrieval=report.retrieval,
        restarts=report.restarts,
        seconds=round(seconds, 4),
        worker=worker,
        **version_columns(report.versions),
    )
    session.add(grading)
    session.flush()
    assert grading.id is not None
    session.add_all(
        EvalRecordRow(**eval_record_values(result, position=position, grading=grading))
        for position, result in enumerate(report.results)
    )
    session.flush()
    return grading


def get_grading(*, session: Session, grading_id: int) -> GradingRow | None:
    return session.get(GradingRow, grading_id)


def list_gradings(*, session: Session, submission_id: str) -> Sequence[GradingRow]:
    return session.exec(
        select(GradingRow)
        .where(GradingRow.submission_id == submission_id)
        .order_by(col(GradingRow.version))
    ).all()


def eval_records(*, session: Session, grading_id: int) -> Sequence[EvalRecordRow]:
    return session.exec(
        select(EvalRecordRow)
        .where(EvalRecordRow.grading_id == grading_id)
        .order_by(col(EvalRecordRow.position))
    ).all()


def report_from_records(grading: GradingRow, records: Sequence[EvalRecordRow]) -> GradeReport:
    """Rebuild the :class:`GradeReport` of a result set from its stored rows."""
    results = tuple(
        CaseResult(
            case_id=record.case_id,
            kind=CaseKind(record.kind),
            safety=record.safety,
            gates={Gate(name): passed for name, passed in record.gates.items()},
            error=ErrorKind(record.error_kind) if record.error_kind else None,
            answer=Answer.from_json_value(record.answer) if record.answer is not None else None,
            safety_failures=tuple(Gate(name) for name in record.safety_failures),
            diagnosis=Diagnosis(record.diagnosis) if record.diagnosis else None,
            seconds=record.seconds,
            model_calls=tuple(ModelCall.model_validate(call) for call in record.model_calls or ()),
        )
        for record in records
    )
    return GradeReport(
        versions=versions_of(grading),
        results=results,
        decision=CertificateDecision(
            decision=Decision(grading.decision), reasons=tuple(grading.reasons)
        ),
        retrieval=grading.retrieval,
        restarts=grading.restarts,
        # A run with a gateway carries the model summary in its student view (DESIGN §4a).
        model_gateway="model" in (grading.student_view or {}),
    )


def load_report(*, session: Session, grading_id: int) -> GradeReport | None:
    grading = get_grading(session=session, grading_id=grading_id)
    if grading is None:
        return None
    return report_from_records(grading, eval_records(session=session, grading_id=grading_id))


def load_reports(*, session: Session, grading_ids: Sequence[int]) -> dict[int, GradeReport]:
    """Many result sets rebuilt at once (``CHUNK`` result sets per query), by grading id."""
    found: dict[int, GradeReport] = {}
    for start in range(0, len(grading_ids), CHUNK):
        chunk = list(grading_ids[start : start + CHUNK])
        gradings = session.exec(select(GradingRow).where(col(GradingRow.id).in_(chunk))).all()
        records = session.exec(
            select(EvalRecordRow)
            .where(col(EvalRecordRow.grading_id).in_(chunk))
            .order_by(col(EvalRecordRow.grading_id), col(EvalRecordRow.position))
        ).all()
        grouped: dict[int, list[EvalRecordRow]] = {}
        for record in records:
            grouped.setdefault(record.grading_id, []).append(record)
        for grading in gradings:
            assert grading.id is not None
            found[grading.id] = report_from_records(grading, grouped.get(grading.id, []))
    return found


# --------------------------------------------------------------------------------------------
# Summaries: the roster's current results, pass counts, eval-record export


@dataclass(frozen=True)
class ResultSummary:
    """A submission's current result set, reduced to what the roster shows."""

    submission_id: str
    grading_id: int
    grading_version: int
    agent_name: str
    submitted_at: datetime
    graded_at: datetime
    decision: Decision
    reasons: tuple[str, ...]
    passed: int
    total: int
    case_set_version: str

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    def outdated(self, current_version: str | None) -> bool:
        """Graded on another case-set version than ``current_version`` (None: unknown, no)."""
        return current_version is not None and self.case_set_version != current_version


def _utc(value: datetime | None) -> datetime:
    stamp = as_utc(value)
    assert stamp is not None
    return stamp


def _passed_count() -> Any:
    return sa.func.sum(sa.case((col(EvalRecordRow.passed), 1), else_=0))


def current_results(
    *, session: Session, student_id: int | None = None
) -> dict[int, list[ResultSummary]]:
    """Every submission's current result set with its pass counts, by student id."""
    current_ids = select(SubmissionRow.current_grading_id).where(
        col(SubmissionRow.current_grading_id).is_not(None)
    )
    if student_id is not None:
        current_ids = current_ids.where(SubmissionRow.user_id == student_id)
    counts = (
        sa.select(
            col(EvalRecordRow.grading_id).label("grading_id"),
            sa.func.count().label("total"),
            _passed_count().label("passed"),
        )
        .where(col(EvalRecordRow.grading_id).in_(current_ids))
        .group_by(col(EvalRecordRow.grading_id))
        .subquery()
    )
    query = (
        sa.select(
            col(SubmissionRow.id),
            col(SubmissionRow.user_id),
            col(SubmissionRow.agent_name),
            col(SubmissionRow.created_at),
            col(GradingRow.id),
            col(GradingRow.version),
            col(GradingRow.created_at),
            col(GradingRow.decision),
            col(GradingRow.reasons),
            col(GradingRow.case_set_version),
            counts.c.total,
            counts.c.passed,
        )
        .join(GradingRow, col(GradingRow.id) == col(SubmissionRow.current_grading_id))
        .join(counts, counts.c.grading_id == col(GradingRow.id), isouter=True)
    )
    if student_id is not None:
        query = query.where(col(SubmissionRow.user_id) == student_id)
    results: dict[int, list[ResultSummary]] = {}
    rows: Any = session.connection().execute(query)  # typed columns, some nullable
    for row in rows:
        results.setdefault(int(row[1]), []).append(
            ResultSummary(
                submission_id=row[0],
                grading_id=int(row[4]),
                grading_version=int(row[5]),
                agent_name=row[2],
                submitted_at=_utc(row[3]),
                graded_at=_utc(row[6]),
                decision=Decision(row[7]),
                reasons=tuple(row[8] or ()),
                passed=int(row[11] or 0),
                total=int(row[10] or 0),
                case_set_version=row[9],
            )
        )
    return results


def pass_counts(*, session: Session, grading_ids: Sequence[int]) -> dict[int, tuple[int, int]]:
    """Cases passed and total per result set."""
    found: dict[int, tuple[int, int]] = {}
    for start in range(0, len(grading_ids), CHUNK):
        chunk = list(grading_ids[start : start + CHUNK])
        query = (
            sa.select(col(EvalRecordRow.grading_id), _passed_count(), sa.func.count())
            .where(col(EvalRecordRow.grading_id).in_(chunk))
            .group_by(col(EvalRecordRow.grading_id))
        )
        for grading_id, passed, total in session.connection().execute(query):
            found[int(grading_id)] = (int(passed or 0), int(total))
    return found


def iter_eval_record_rows(
    *,
    session: Session,
    submission_id: str | None = None,
    current_only: bool = False,
    batch: int = 100,
) -> Iterator[tuple[EvalRecordRow, GradingRow, int, bool]]:
    """Every eval record (of one submission, or all), oldest result set first, read ``batch``
    result sets at a time: (record, its result set, the student's id, whether it is current)."""
    query = (
        sa.select(GradingRow, col(SubmissionRow.user_id), col(SubmissionRow.current_grading_id))
        .join(SubmissionRow, col(SubmissionRow.id) == col(GradingRow.submission_id))
        .order_by(col(GradingRow.submission_id), col(GradingRow.version))
    )
    if submission_id is not None:
        query = query.where(col(GradingRow.submission_id) == submission_id)
    if current_only:
        query = query.where(col(GradingRow.id) == col(SubmissionRow.current_grading_id))
    found = sa.orm.Session.execute(session, query).all()  # ORM rows of several columns
    gradings = [(row[0], int(row[1]), row[2]) for row in found]
    for start in range(0, len(gradings), max(1, batch)):
        chunk = gradings[start : start + max(1, batch)]
        ids = [grading.id for grading, _, _ in chunk]
        records = session.exec(
            select(EvalRecordRow)
            .where(col(EvalRecordRow.grading_id).in_(ids))
            .order_by(col(EvalRecordRow.grading_id), col(EvalRecordRow.position))
        ).all()
        grouped: dict[int, list[EvalRecordRow]] = {}
        for record in records:
            grouped.setdefault(record.grading_id, []).append(record)
        for grading, user_id, current in chunk:
            assert grading.id is not None
            for record in grouped.get(grading.id, []):
                yield record, grading, user_id, grading.id == current
