"""Feedback accounting rows: what each result set showed its student and what it cost.

The release decision itself is pure (:mod:`grader.core.disclosure`); this module feeds it the
student's history and stores its outcome, one row per result set, so the sum per student and
case-set version is exact and survives regrades. Every function takes the session as a keyword
and never commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from grader.core.disclosure import (
    History,
    Release,
    Shape,
    Shown,
    Withheld,
    comparison_bits,
    gate_view,
    hold_until,
    plan_release,
    round_up_time,
    score_of,
    shown_bits,
)
from grader.core.model_usage import SummaryBounds
from grader.core.models import CaseKind, Feedback, GradeReport, Policy
from grader.core.scoring import summarize
from grader.core.views import student_view
from grader.exceptions import ComparisonRefused

from .tables import (
    ComparisonDisclosureRow,
    FeedbackDisclosureRow,
    GradingRow,
    SubmissionRow,
    SubmissionStatus,
    UserRow,
    as_utc,
    utcnow,
)


@dataclass(frozen=True)
class Planned:
    """A released student view, waiting for its result set's id to be recorded."""

    view: dict[str, Any]
    release: Release
    release_at: datetime
    mode: Feedback


def lock_student(*, session: Session, user_id: int) -> None:
    """Serialise feedback releases of one student (a no-op write on their row: a row lock on
    PostgreSQL, the write lock on SQLite), so two results graded at once see each other."""
    session.connection().execute(
        sa.update(UserRow)
        .where(col(UserRow.id) == user_id)
        .values(session_generation=UserRow.session_generation)
    )


def history(*, session: Session, user_id: int, case_set_version: str) -> History:
    """The student's bits so far and best released score on this case-set version."""
    rows = session.exec(
        select(FeedbackDisclosureRow)
        .where(
            FeedbackDisclosureRow.user_id == user_id,
            FeedbackDisclosureRow.case_set_version == case_set_version,
        )
        .order_by(col(FeedbackDisclosureRow.id))
    ).all()
    bits = sum(row.bits for row in rows) + _comparison_bits(
        session=session, user_id=user_id, case_set_version=case_set_version
    ).get(user_id, 0.0)
    best: FeedbackDisclosureRow | None = None
    for row in rows:
        if (
            row.released
            and row.score is not None
            and (best is None or row.score > (best.score or 0.0))
        ):
            best = row
    if best is None:
        return History(bits_disclosed=bits)
    return History(bits_disclosed=bits, best_score=best.score, best_submission=best.submission_id)


def released_view(report: GradeReport, policy: Policy) -> dict[str, Any]:
    """The full student view under ``policy``: its feedback mode, buckets and model limits."""
    return student_view(
        report,
        feedback=policy.feedback,
        buckets=policy.feedback_buckets,
        model_bounds=SummaryBounds.of(policy, len(report.results)),
    )


def shape_of(report: GradeReport, policy: Policy) -> Shape:
    counts = {kind: 0 for kind in CaseKind}
    for result in report.results:
        counts[result.kind] += 1
    return Shape.of(counts, policy)


def plan(
    *,
    session: Session,
    user_id: int,
    report: GradeReport,
    policy: Policy,
    created_at: datetime,
    started_at: datetime | None = None,
    now: datetime | None = None,
) -> Planned:
    """Lock the student, read their history and decide what this new result shows."""
    lock_student(session=session, user_id=user_id)
    past = history(session=session, user_id=user_id, case_set_version=report.versions.case_set)
    summary = summarize(report.results)
    release = plan_release(
        policy=policy,
        shape=shape_of(report, policy),
        score=score_of(summary, policy.ladder_metric),
        history=past,
    )
    full = released_view(report, policy)
    finished = as_utc(now or utcnow())
    created = as_utc(created_at)
    assert finished is not None and created is not None
    started = as_utc(started_at) or created
    release_at = hold_until(
        release, policy=policy, created=created, started=started, finished=finished
    )
    return Planned(gate_view(full, release), release, release_at, policy.feedback)


def record(
    *,
    session: Session,
    planned: Planned,
    grading: GradingRow,
    user_id: int,
    now: datetime | None = None,
) -> FeedbackDisclosureRow:
    """Store a planned release for result set ``grading``."""
    assert grading.id is not None
    release = planned.release
    row = FeedbackDisclosureRow(
        grading_id=grading.id,
        submission_id=grading.submission_id,
        user_id=user_id,
        case_set_version=grading.case_set_version,
        mode=planned.mode.value,
        shown=release.shown.value,
        released=release.released,
        withheld=release.withheld.value if release.withheld else None,
        score=release.score,
        view_bits=round(release.view_bits, 6),
        timing_bits=round(release.timing_bits, 6),
        bits=round(release.bits, 6),
        created_at=now or utcnow(),
        release_at=planned.release_at,
    )
    session.add(row)
    session.flush()
    return row


def regraded_view(
    *,
    earlier: FeedbackDisclosureRow | None,
    previous_view: Mapping[str, Any],
    report: GradeReport,
    policy: Policy,
    spent: float,
    now: datetime,
) -> Planned:
    """What a regrade from recorded answers shows; ``spent`` is the student's total so far on
    the regrade's case-set version.

    A regrade keeps the earlier result set's release: a released view is rebuilt from the new
    results, a withheld one stays the decision only. If what the student sees changes, it is
    new information and is charged again (with no timing bits: the instructor chose when it
    ran); an unchanged view costs nothing. A charge the budget no longer allows turns the
    view into the decision only.
    """
    released = earlier.released if earlier is not None else True
    shape = shape_of(report, policy)
    score = score_of(summarize(report.results), policy.ladder_metric)
    full = released_view(report, policy)
    shown = Shown(earlier.shown) if earlier is not None else Shown.COUNTS
    if released:
        release = Release(shown, True, None, score, shown_bits(shown, shape), 0.0)
    else:
        withheld = earlier.withheld if earlier is not None else None
        message, best = previous_view.get("message"), previous_view.get("best_submission")
        release = Release(
            Shown.DECISION_ONLY,
            False,
            None if withheld is None else Withheld(withheld),
            score,
            shown_bits(Shown.DECISION_ONLY, shape),
            0.0,
            message if isinstance(message, str) else None,
            best if isinstance(best, str) else None,
        )
    view = gate_view(full, release)
    budget = policy.feedback_budget_bits
    if _visible(view) == _visible(previous_view):
        release = Release(
            release.shown, release.released, release.withheld, score, 0.0, 0.0, release.message
        )
    elif release.released and budget is not None and spent + release.bits > budget:
        release = Release(
            Shown.DECISION_ONLY,
            False,
            Withheld.BUDGET,
            score,
            shown_bits(Shown.DECISION_ONLY, shape),
            0.0,
            f"feedback budget reached ({spent:.0f} of {budget:.0f} bits used for this case "
            "set): from now on you see the decision only",
        )
        view = gate_view(full, release)
    return Planned(view, release, now, policy.feedback)


def _visible(view: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in view.items() if key != "case_set_version"}


def for_gradings(
    *, session: Session, grading_ids: Iterable[int]
) -> dict[int, FeedbackDisclosureRow]:
    """The accounting row of each result set that has one."""
    ids = list(grading_ids)
    if not ids:
        return {}
    rows = session.exec(
        select(FeedbackDisclosureRow).where(col(FeedbackDisclosureRow.grading_id).in_(ids))
    ).all()
    return {row.grading_id: row for row in rows}


def bits_by_student(
    *,
    session: Session,
    case_set_version: str,
    user_id: int | None = None,
    released_by: datetime | None = None,
) -> dict[int, float]:
    """Bits disclosed per student on ``case_set_version`` (students with none are absent):
    their feedback views and their comparisons. With ``released_by`` (what a student is shown),
    only views released by then count: a charge must not announce a result still held back."""
    query = (
        sa.select(col(FeedbackDisclosureRow.user_id), sa.func.sum(FeedbackDisclosureRow.bits))
        .where(col(FeedbackDisclosureRow.case_set_version) == case_set_version)
        .group_by(col(FeedbackDisclosureRow.user_id))
    )
    if released_by is not None:
        query = query.where(
            sa.or_(
                col(FeedbackDisclosureRow.release_at).is_(None),
                col(FeedbackDisclosureRow.release_at) <= released_by,
            )
        )
    if user_id is not None:
        query = query.where(col(FeedbackDisclosureRow.user_id) == user_id)
    found = {int(uid): float(total or 0.0) for uid, total in session.connection().execute(query)}
    compared = _comparison_bits(session=session, case_set_version=case_set_version, user_id=user_id)
    for uid, bits in compared.items():
        found[uid] = found.get(uid, 0.0) + bits
    return found


def _comparison_bits(
    *, session: Session, case_set_version: str, user_id: int | None = None
) -> dict[int, float]:
    query = (
        sa.select(col(ComparisonDisclosureRow.user_id), sa.func.sum(ComparisonDisclosureRow.bits))
        .where(col(ComparisonDisclosureRow.case_set_version) == case_set_version)
        .group_by(col(ComparisonDisclosureRow.user_id))
    )
    if user_id is not None:
        query = query.where(col(ComparisonDisclosureRow.user_id) == user_id)
    return {int(uid): float(total or 0.0) for uid, total in session.connection().execute(query)}


# --------------------------------------------------------------------------------------------
# Comparisons


def comparable(*, session: Session, grading: GradingRow, now: datetime) -> bool | None:
    """Whether the student was shown ``grading``'s full counts view: True; False when it was
    withheld (the Ladder, the budget) or not a counts view; None while it is held back (the
    student cannot see the result yet). A result set graded before the accounting existed has
    no row: its stored view says what was shown."""
    assert grading.id is not None
    row = for_gradings(session=session, grading_ids=[grading.id]).get(grading.id)
    if row is None:
        view = grading.student_view or {}
        return (
            view.get("released") is not False
            and view.get("feedback") in (Feedback.COUNTS.value, Feedback.LADDER.value)
            and "by_kind" in view
        )
    release_at = as_utc(row.release_at)
    if release_at is not None and release_at > now:
        return None
    return row.released and row.shown == Shown.COUNTS.value


def charge_comparison(
    *,
    session: Session,
    user_id: int,
    case_set_version: str,
    grading_ids: tuple[int, int],
    primary_cases: int,
    budget_bits: float | None,
    now: datetime | None = None,
) -> float:
    """Charge a student's comparison of two result sets (:func:`comparison_bits`) and return
    the bits charged: 0 for a pair compared before (in either order) or a result set compared
    with itself. :class:`ComparisonRefused` when the charge would take the student past
    ``budget_bits``; the refusal depends on their history and the case count alone."""
    first, second = sorted(grading_ids)
    if first == second:
        return 0.0
    lock_student(session=session, user_id=user_id)
    seen = session.exec(
        select(ComparisonDisclosureRow).where(
            ComparisonDisclosureRow.first_grading_id == first,
            ComparisonDisclosureRow.second_grading_id == second,
        )
    ).first()
    if seen is not None:
        return 0.0
    bits = round(comparison_bits(primary_cases), 6)
    spent = history(
        session=session, user_id=user_id, case_set_version=case_set_version
    ).bits_disclosed
    if budget_bits is not None and spent + bits > budget_bits:
        raise ComparisonRefused(
            f"feedback budget reached ({spent:.0f} of {budget_bits:.0f} bits used for this "
            f"case set): this comparison would disclose {bits:.1f} bits more"
        )
    session.add(
        ComparisonDisclosureRow(
            user_id=user_id,
            case_set_version=case_set_version,
            first_grading_id=first,
            second_grading_id=second,
            bits=bits,
            created_at=now or utcnow(),
        )
    )
    session.flush()
    return bits


def record_many(
    *,
    session: Session,
    items: Iterable[tuple[Planned, GradingRow, int]],
    now: datetime,
) -> None:
    """Store the releases of many result sets at once (a regrade), in one INSERT."""
    rows = []
    for planned, grading, user_id in items:
        release = planned.release
        rows.append(
            {
                "grading_id": grading.id,
                "submission_id": grading.submission_id,
                "user_id": user_id,
                "case_set_version": grading.case_set_version,
                "mode": planned.mode.value,
                "shown": release.shown.value,
                "released": release.released,
                "withheld": release.withheld.value if release.withheld else None,
                "score": release.score,
                "view_bits": round(release.view_bits, 6),
                "timing_bits": round(release.timing_bits, 6),
                "bits": round(release.bits, 6),
                "created_at": now,
                "release_at": planned.release_at,
            }
        )
    if rows:
        table = FeedbackDisclosureRow.__table__  # type: ignore[attr-defined]
        session.exec(sa.insert(table), params=rows)


#: The release time of a queued submission while a time quantum applies: the student reads it
#: as running from its upload, never when it actually started.
NOT_STARTED_SHOWN = datetime.max.replace(tzinfo=UTC)


def release_times(
    *, session: Session, submission_ids: Iterable[str], quantum_seconds: float = 0.0
) -> dict[str, datetime]:
    """When each submission's outcome may be shown to its student: a graded one's recorded
    release; a failed one's finishing time rounded up to ``quantum_seconds`` (an agent that
    fails to start chooses when); with a quantum, a queued one :data:`NOT_STARTED_SHOWN` (it
    reads as running from its upload). Others are absent and show at once."""
    ids = list(submission_ids)
    if not ids:
        return {}
    query = (
        sa.select(
            col(SubmissionRow.id),
            col(SubmissionRow.status),
            col(SubmissionRow.created_at),
            col(SubmissionRow.finished_at),
            col(FeedbackDisclosureRow.release_at),
        )
        .outerjoin(
            FeedbackDisclosureRow,
            col(FeedbackDisclosureRow.grading_id) == col(SubmissionRow.current_grading_id),
        )
        .where(col(SubmissionRow.id).in_(ids))
    )
    found: dict[str, datetime] = {}
    for sid, status, created_at, finished_at, release_at in session.connection().execute(query):
        created, finished = as_utc(created_at), as_utc(finished_at)
        if status == SubmissionStatus.QUEUED.value and quantum_seconds > 0:
            # When a queued run starts tells when the run ahead of it ended: not shown.
            found[str(sid)] = NOT_STARTED_SHOWN
            continue
        if status == SubmissionStatus.FAILED.value:
            if quantum_seconds > 0 and created is not None and finished is not None:
                found[str(sid)] = round_up_time(created, finished, quantum_seconds)
            continue
        stamp = as_utc(release_at)
        if stamp is not None:
            found[str(sid)] = stamp
    return found


@dataclass(frozen=True)
class Standing:
    """A student's feedback used on one case-set version, for their page and /api/me."""

    mode: str
    bits_disclosed: float
    budget_bits: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "bits_disclosed": round(self.bits_disclosed, 2),
            "budget_bits": self.budget_bits,
        }


def standing(
    *,
    session: Session,
    user_id: int,
    case_set_version: str,
    policy: Policy,
    now: datetime | None = None,
) -> Standing:
    """The student's feedback used; with ``now``, as the student may see it (released views)."""
    total = bits_by_student(
        session=session, case_set_version=case_set_version, user_id=user_id, released_by=now
    )
    return Standing(policy.feedback.value, total.get(user_id, 0.0), policy.feedback_budget_bits)
