"""An agent that echoes the hidden questions into its model calls leaks nothing to students.

The agent sends every question to the model in its prompt, as the model alias (refused and
recorded as such) and in its answer; it is graded by a real rq worker in bubblewrap with the
course model server (a real process) as the upstream. The student sees the run's model
summary and no byte of any question; instructors see every call against its case.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from grader.core.casesets import load_case_set
from grader.core.disclosure import Shape, counts_view_bits
from grader.core.model_usage import SummaryBounds, summary_bits
from grader.core.models import CaseKind
from grader.db.tables import FeedbackDisclosureRow, Role
from grader.settings import Settings
from tests.conftest import write_case_set
from tests.gateway.conftest import CourseModel, start_course_model
from tests.instructor.conftest import login
from tests.server.conftest import (
    CASES,
    DOCUMENTS,
    POLICY,
    Account,
    agent_files,
    make_zip,
    submission_row,
    upload,
)
from tests.server.test_leaks import Transcript, csrf_token

MODELS = """
[models.course-chat]
upstream = "course-extractive"
input_usd_per_mtok = 0.15
output_usd_per_mtok = 0.60
prices_date = "2026-12-01"
"""
ECHO_INTO_MODEL = """
import json, os, urllib.error, urllib.request

def call(model, content):
    body = {"model": model, "messages": [{"role": "user", "content": content}]}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.load(response)["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as exc:
        return exc.read().decode()

def answer(question):
    said = call("course-chat", "Chunks overlap. " + question + "\\nQuestion: " + question)
    refused = call(question[:60], question)
    return {"answer": "Echo: " + question + " " + said + " " + refused,
            "citations": [question[:20]], "confidence": 0.9, "needs_human_review": False}
"""


@pytest.fixture
def course_model() -> Iterator[CourseModel]:
    model = start_course_model()
    yield model
    model.kill()


@pytest.fixture
def settings(
    make_settings: Callable[..., Settings], course_model: CourseModel, tmp_path: Path
) -> Settings:
    """The server's hidden case set with a [models] table, and the course model upstream."""
    root = write_case_set(
        tmp_path / "model-cases", CASES, policy=POLICY + MODELS, documents=DOCUMENTS
    )
    return make_settings(
        cases_dir=root,
        model_upstream_url=course_model.url,
        model_upstream_key=course_model.key,
        model_cache_dir=tmp_path / "model-cache",
    )


def test_questions_echoed_into_model_calls_never_reach_a_student(
    app: Flask,
    client: FlaskClient,
    make_user: Callable[..., Account],
    engine: Engine,
    run_worker_burst: Callable[[], None],
) -> None:
    """The student's API answer and pages carry the model summary but no question fragment;
    the instructor view and page carry every call (the control that the search would find
    one)."""
    student = make_user(Role.STUDENT, "mallory")
    seen = Transcript(app)
    response = seen.add("upload", upload(client, student, make_zip(agent_files(ECHO_INTO_MODEL))))
    assert response.status_code == 202
    sid = response.get_json()["id"]
    run_worker_burst()
    assert submission_row(engine, sid).status == "graded"

    detail = seen.add("detail", client.get(f"/api/submissions/{sid}", headers=student.headers))
    summary = detail.get_json()["feedback"]["model"]
    assert summary["calls"] == 6 and summary["refused"] == 3
    assert summary["prices_date"] == "2026-12-01" and summary["usd"] > 0
    seen.add("list", client.get("/api/submissions", headers=student.headers))
    seen.add(
        "instructor", client.get(f"/api/instructor/submissions/{sid}", headers=student.headers)
    )
    browser = app.test_client()
    login_page = seen.add("login page", browser.get("/login"))
    seen.add(
        "login",
        browser.post(
            "/login",
            data={
                "token": student.token,
                "csrf_token": csrf_token(login_page.get_data(as_text=True)),
            },
        ),
    )
    page = seen.add("feedback page", browser.get(f"/submissions/{sid}"))
    assert "Model calls:" in page.get_data(as_text=True)
    assert "prices of 2026-12-01" in page.get_data(as_text=True)
    assert seen.leaks() == []

    instructor = make_user(Role.INSTRUCTOR, "staff")
    control = Transcript(app)
    view = control.add(
        "instructor", client.get(f"/api/instructor/submissions/{sid}", headers=instructor.headers)
    ).get_json()
    assert any("heron" in leak for leak in control.leaks())
    calls = [call for case in view["cases"] for call in case["model_calls"]]
    assert len(calls) == 6
    assert sum(1 for call in calls if call["error"] and "unknown model" in call["error"]) == 3

    staff_browser = app.test_client()
    login(staff_browser, instructor)
    html = staff_browser.get(f"/instructor/submissions/{sid}").get_data(as_text=True)
    assert 'id="model-usage"' in html and "6 calls (3 refused)" in html
    assert "model: 2 calls" in html and "400: unknown model" in html


def test_the_model_summary_a_student_reads_is_rounded_and_accounted(
    client: FlaskClient,
    make_user: Callable[..., Account],
    engine: Engine,
    settings: Settings,
    run_worker_burst: Callable[[], None],
) -> None:
    """Graded by a real worker with the course model, the student's model summary has the
    instructor's counts and tokens but latencies rounded up to 100 ms (at most the question's
    time limit) and cost to $0.001; the result set is charged the counts view's bits plus the
    summary's, which the same set without [models] would not be charged, and /api/me says so."""
    student = make_user(Role.STUDENT, "mallory")
    instructor = make_user(Role.INSTRUCTOR, "staff")
    response = upload(client, student, make_zip(agent_files(ECHO_INTO_MODEL)))
    sid = response.get_json()["id"]
    run_worker_burst()
    assert submission_row(engine, sid).status == "graded"
    shown = client.get(f"/api/submissions/{sid}", headers=student.headers).get_json()
    summary = shown["feedback"]["model"]
    exact = client.get(f"/api/instructor/submissions/{sid}", headers=instructor.headers)
    exact_summary = exact.get_json()["model"]
    for key in ("calls", "refused", "cached", "prompt_tokens", "completion_tokens"):
        assert summary[key] == exact_summary[key]
    for name, value in summary["latency_ms"].items():
        assert value % 100 == 0 and exact_summary["latency_ms"][name] <= value <= 3000
    assert exact_summary["usd"] <= summary["usd"] < exact_summary["usd"] + 0.001

    policy = load_case_set(settings.cases_dir).policy
    counts = Counter(CaseKind(case["kind"]) for case in CASES)
    with_models = counts_view_bits(Shape.of(counts, policy))
    without = counts_view_bits(Shape.of(counts, policy.model_copy(update={"models": {}})))
    model_bits = summary_bits(SummaryBounds.of(policy, len(CASES)))
    assert model_bits > 60 and with_models == pytest.approx(without + model_bits)
    with Session(engine) as session:
        row = session.exec(select(FeedbackDisclosureRow)).one()
    assert row.view_bits == pytest.approx(with_models, abs=1e-5)
    standing = client.get("/api/me", headers=student.headers).get_json()["feedback"]
    assert standing["bits_disclosed"] == pytest.approx(row.bits, abs=0.01)
