"""Model calls are part of the eval record: stored, read back, and kept by a regrade."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session

from grader.core.casesets import load_case_set
from grader.core.models import ModelCall
from grader.core.views import instructor_view, student_view
from grader.db.engine import session_scope
from grader.db.regrades import stored_cases
from grader.db.results import add_grading, load_report
from grader.db.tables import GradingTrigger
from grader.grading import build_report, results_from_runs
from grader.instructor.rescoring import RecordedCase, regrade_recorded, regrade_report
from grader.sandbox.session import CaseRun
from tests.server.conftest import Account

GOOD = {
    "answer": "Chunks overlap so that no sentence is cut at a boundary.",
    "citations": ["doc-plover"],
    "confidence": 0.8,
    "needs_human_review": False,
}
CALLS = (
    ModelCall(
        model="course-chat",
        prompt_tokens=40,
        completion_tokens=9,
        latency_ms=1.5,
        usd=0.0000114,
        prices_date="2026-12-01",
    ),
    ModelCall(model="gpt-4o", latency_ms=0.2, error="400: unknown model 'gpt-4o'"),
)


def test_model_calls_round_trip_and_survive_a_regrade(
    engine: Engine, student: Account, cases_dir: Path, submit: Callable[..., str]
) -> None:
    """A result set with model calls rebuilds identically from the database, the student view
    keeps its model summary, and regrading from recorded answers keeps every call."""
    case_set = load_case_set(cases_dir)
    runs = [CaseRun(case.id, value=GOOD, seconds=0.2) for case in case_set.cases]
    results = list(results_from_runs(case_set, runs))
    results[0] = results[0].model_copy(update={"model_calls": CALLS})
    report = build_report(case_set, tuple(results), sandbox="bwrap").model_copy(
        update={"model_gateway": True}
    )
    view = student_view(report)
    assert view["model"]["calls"] == 2 and view["model"]["refused"] == 1
    submission_id = submit(student)
    with session_scope(engine) as session:
        grading = add_grading(
            session=session,
            submission_id=submission_id,
            report=report,
            student_view=view,
            seconds=1.0,
            trigger=GradingTrigger.INITIAL,
        )
        grading_id = grading.id
    assert grading_id is not None
    with Session(engine) as session:
        rebuilt = load_report(session=session, grading_id=grading_id)
        stored = stored_cases(session=session, grading_ids=[grading_id])[grading_id]
    assert rebuilt == report
    assert instructor_view(rebuilt)["cases"][0]["model_calls"][1]["error"].startswith("400")
    assert regrade_report(rebuilt, case_set).report.results[0].model_calls == CALLS
    regraded = regrade_recorded(
        [
            RecordedCase.from_stored(c.case_id, c.answer, c.error_kind, c.seconds, c.model_calls)
            for c in stored
        ],
        case_set,
        versions=rebuilt.versions,
        model_gateway=True,
    ).report
    assert regraded.results[0].model_calls == CALLS
    assert student_view(regraded)["model"] == view["model"]
