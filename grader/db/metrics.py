"""Figures for ``/metrics``: submissions by status and the grading-duration histogram."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlmodel import Session, col, select

from .tables import GradingRow, GradingTrigger, SubmissionRow, SubmissionStatus


def status_counts(*, session: Session) -> dict[SubmissionStatus, int]:
    rows = session.exec(
        select(SubmissionRow.status, sa.func.count()).group_by(col(SubmissionRow.status))
    ).all()
    counts = dict.fromkeys(SubmissionStatus, 0)
    for status, count in rows:
        counts[SubmissionStatus(status)] = int(count)
    return counts


def grading_duration_histogram(
    *, session: Session, buckets: Sequence[float]
) -> tuple[list[int], int, float]:
    """Cumulative counts of first gradings with ``seconds <= bucket``, the count, and the sum."""
    columns = [
        sa.func.coalesce(sa.func.sum(sa.case((col(GradingRow.seconds) <= bound, 1), else_=0)), 0)
        for bound in buckets
    ]
    query = sa.select(
        *columns,
        sa.func.count(),
        sa.func.coalesce(sa.func.sum(GradingRow.seconds), 0.0),
    ).where(col(GradingRow.trigger) == GradingTrigger.INITIAL.value)
    row = session.connection().execute(query).one()
    values = list(row)
    return [int(value) for value in values[:-2]], int(values[-2]), float(values[-1])
