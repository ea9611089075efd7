"""Comparison routes (DESIGN §7): instructors compare any two result sets on one case-set
version, and what a regrade moved; a student compares two of their own graded submissions and
sees counts only (DESIGN §8).

Instructor: ``GET /api/instructor/compare?baseline=<id>&candidate=<id>[&baseline_version=N]
[&candidate_version=M][&primary=…][&alpha=…]``, ``GET /api/instructor/compare/regrades/<run>``
and the pages ``/instructor/compare`` and ``/instructor/compare/regrades/<run>``.
Student: ``GET /api/compare?baseline=<id>&candidate=<id>`` and the page ``/compare``; its one
view function is :func:`student_comparison_view`, so a feedback mode can gate it.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, render_template, request
from flask.typing import ResponseReturnValue

from grader.core.compare import DEFAULT_ALPHA, Metric, metric_names, student_comparison
from grader.core.models import Feedback
from grader.db import disclosures
from grader.db.engine import session_scope
from grader.db.tables import Role, utcnow
from grader.exceptions import ComparisonRefused, GraderError, SubmissionNotFound
from grader.instructor.comparisons import Side, compare_submissions, regrade_comparison
from grader.instructor.regrades import get_run

from .auth import api_auth, current_user, login_required
from .charts import bars_from_gates, gate_bars_svg
from .instructor_context import load_case_set
from .instructor_pages import DECISION_LABELS, GATE_ORDER, instructor_page
from .state import state

bp = Blueprint("comparisons", __name__)


class BadRequest(GraderError):
    """A missing or malformed query parameter."""


def _status(exc: GraderError) -> int:
    return 404 if isinstance(exc, SubmissionNotFound) else 400


def _version(name: str) -> int | None:
    raw = request.args.get(name)
    if raw in (None, ""):
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a result-set version number (1, 2, …)") from None
    if value < 1:
        raise BadRequest(f"{name} must be a result-set version number (1, 2, …)")
    return value


def _required(name: str) -> str:
    value = request.args.get(name, "").strip()
    if not value:
        raise BadRequest("name both submissions: ?baseline=<id>&candidate=<id>")
    return value


def _alpha() -> float:
    raw = request.args.get("alpha")
    if raw in (None, ""):
        return DEFAULT_ALPHA
    try:
        return float(raw)
    except ValueError:
        raise BadRequest("alpha must be a number between 0 and 1") from None


def _instructor_comparison() -> dict[str, Any]:
    """The instructor's comparison of the two result sets the query names."""
    case_set, _ = load_case_set()
    with session_scope(state().engine) as session:
        found = compare_submissions(
            session=session,
            baseline=_required("baseline"),
            candidate=_required("candidate"),
            baseline_version=_version("baseline_version"),
            candidate_version=_version("candidate_version"),
            case_set=case_set,
            primary=request.args.get("primary") or Metric.ANSWERABLE_PASS_RATE.value,
            alpha=_alpha(),
        )
        return found.as_dict()


def _regrade_comparison(run_id: int) -> dict[str, Any] | None:
    with session_scope(state().engine) as session:
        record = get_run(session=session, run_id=run_id)
        if record is None:
            return None
        return regrade_comparison(session=session, record=record)


# --------------------------------------------------------------------------------------------
# Instructor


@bp.get("/api/instructor/compare")
@api_auth(Role.INSTRUCTOR)
def instructor_compare_api() -> ResponseReturnValue:
    try:
        return jsonify(_instructor_comparison())
    except GraderError as exc:
        return jsonify(error=str(exc)), _status(exc)


@bp.get("/api/instructor/compare/regrades/<int:run_id>")
@api_auth(Role.INSTRUCTOR)
def regrade_compare_api(run_id: int) -> ResponseReturnValue:
    body = _regrade_comparison(run_id)
    if body is None:
        return jsonify(error="no such regrade"), 404
    return jsonify(body)


@bp.get("/instructor/compare")
@instructor_page
def instructor_compare_page() -> ResponseReturnValue:
    case_set, problem = load_case_set()
    user = current_user()
    if not request.args:
        return render_template(
            "instructor/compare.html",
            user=user,
            data=None,
            error=None,
            args=request.args,
            metrics=metric_names(),
            decision_labels=DECISION_LABELS,
            case_set_error=problem,
        )
    try:
        data = _instructor_comparison()
    except GraderError as exc:
        page = render_template(
            "instructor/compare.html",
            user=user,
            data=None,
            error=str(exc),
            args=request.args,
            metrics=metric_names(),
            decision_labels=DECISION_LABELS,
            case_set_error=problem,
        )
        return page, _status(exc)
    return render_template(
        "instructor/compare.html",
        user=user,
        data=data,
        error=None,
        args=request.args,
        metrics=metric_names(),
        decision_labels=DECISION_LABELS,
        chart=gate_bars_svg(bars_from_gates(data["gates"])),
        gate_order=GATE_ORDER,
        case_set=case_set,
        case_set_error=problem,
    )


@bp.get("/instructor/compare/regrades/<int:run_id>")
@instructor_page
def regrade_compare_page(run_id: int) -> ResponseReturnValue:
    body = _regrade_comparison(run_id)
    if body is None:
        return render_template("error.html", status=404, message="No such regrade."), 404
    bars = bars_from_gates(
        {
            kind: {
                gate: {
                    "cases": s["cases"],
                    "baseline_passed": s["passed_before"],
                    "candidate_passed": s["passed_after"],
                }
                for gate, s in gates.items()
            }
            for kind, gates in body["gates"].items()
        }
    )
    return render_template(
        "instructor/compare_regrade.html",
        user=current_user(),
        data=body,
        chart=gate_bars_svg(bars, title="Pass rate per gate before and after the regrade"),
    )


# --------------------------------------------------------------------------------------------
# Student: counts only


#: Feedback modes whose released view shows the counts a student comparison restates.
COMPARABLE_MODES = (Feedback.COUNTS, Feedback.LADDER)


def student_comparison_view(user_id: int, baseline: str, candidate: str) -> dict[str, Any]:
    """What a student may see of a comparison of two of their own graded submissions: counts
    by kind and gate, McNemar's p and the CI on the pass-rate difference (DESIGN §8). Another
    student's submission is indistinguishable from none.

    Only where both results' full counts views were shown to the student (``counts``, or
    ``ladder`` when both were released), since the comparison restates them. What it shows
    beyond them (the discordant total behind p and the CI) is charged to the student's
    feedback used, once per pair, and refused past the budget (README, "Feedback and
    disclosure")."""
    case_set, _ = load_case_set()
    policy = case_set.policy if case_set is not None else None
    if policy is not None and policy.feedback not in COMPARABLE_MODES:
        raise ComparisonRefused("comparisons are not available with this course's feedback")
    now = utcnow()
    with session_scope(state().engine) as session:

        def admit(side: Side) -> None:
            shown = disclosures.comparable(session=session, grading=side.grading, now=now)
            if shown is None:  # held back: the same answer as a result not graded yet
                raise ComparisonRefused(f"submission {side.submission.id} has no results yet")
            if not shown:
                raise ComparisonRefused(
                    f"submission {side.submission.id}: its full result was not released to "
                    "you, so it cannot be compared"
                )

        found = compare_submissions(
            session=session,
            baseline=baseline,
            candidate=candidate,
            case_set=None,  # no labels: a student's comparison names no case or slice
            owner_id=user_id,
            admit=admit,  # before any statistics: a refusal's timing tells nothing
        )
        assert found.baseline.grading.id is not None and found.candidate.grading.id is not None
        charged = disclosures.charge_comparison(
            session=session,
            user_id=user_id,
            case_set_version=found.comparison.case_set_version,
            grading_ids=(found.baseline.grading.id, found.candidate.grading.id),
            primary_cases=found.comparison.primary.cases,
            budget_bits=policy.feedback_budget_bits if policy is not None else None,
            now=now,
        )
        view = student_comparison(found.comparison)
        view["baseline"] = {
            "submission": found.baseline.submission.id,
            "agent_name": found.baseline.submission.agent_name,
        }
        view["candidate"] = {
            "submission": found.candidate.submission.id,
            "agent_name": found.candidate.submission.agent_name,
        }
        view["bits_charged"] = charged
        return view


def _student_args() -> tuple[int, str, str]:
    user = current_user()
    assert user is not None and user.id is not None
    return user.id, _required("baseline"), _required("candidate")


@bp.get("/api/compare")
@api_auth()
def student_compare_api() -> ResponseReturnValue:
    try:
        return jsonify(student_comparison_view(*_student_args()))
    except GraderError as exc:
        return jsonify(error=str(exc)), _status(exc)


@bp.get("/compare")
@login_required
def student_compare_page() -> ResponseReturnValue:
    user = current_user()
    try:
        view = student_comparison_view(*_student_args())
    except GraderError as exc:
        page = render_template("compare.html", user=user, view=None, error=str(exc))
        return page, _status(exc)
    bars = bars_from_gates({kind: data["gates"] for kind, data in view["by_kind"].items()})
    return render_template(
        "compare.html",
        user=user,
        view=view,
        error=None,
        chart=gate_bars_svg(bars),
    )
