"""Feedback with a bounded leak, end to end (README, "Feedback and disclosure").

A real server (Flask app), a real rq worker and bubblewrap grade agents that try to carry the
hidden questions out through the feedback itself: gate and error patterns across repeated
submissions, and question-dependent timing. What the student API returns is decoded, and the
bits recovered are compared with the bits the grader accounted and with the budget.
"""

from __future__ import annotations

import csv
import io
import math
import re
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from redis import Redis
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from grader.db.tables import ComparisonDisclosureRow, FeedbackDisclosureRow, as_utc
from grader.server import create_app
from grader.settings import Settings
from grader.worker.enqueue import make_queue
from grader.worker.process import GraderWorker
from grader.worker.service import GradingService
from tests.conftest import write_case_set
from tests.server.conftest import (
    CASES,
    DOCUMENTS,
    SECRET_FRAGMENTS,
    Account,
    agent_files,
    honest_agent,
    make_zip,
    submission_row,
    upload,
    wait_for,
)
from tests.server.test_pages import logged_in

BASE_POLICY = """
case_timeout_seconds = 3
setup_timeout_seconds = 5
run_timeout_seconds = 10
memory_limit_mb = 256
pids_limit = 48
max_submissions_per_day = 50
"""

#: Encodes nibble NIBBLE of the UTF-8 bytes of the first question it sees into four gates
#: that it fails on purpose, on every question: citation_unique (bit 0), no_review_flag
#: (bit 1), citation_precision (bit 2), calibrated_confidence on refusal cases (bit 3).
NIBBLE_AGENT = """
NIBBLE = {nibble}
FIRST = []

def answer(question):
    if not FIRST:
        FIRST.append(question)
    data = FIRST[0].encode("utf-8")
    byte = data[NIBBLE // 2] if NIBBLE // 2 < len(data) else 0
    bits = (byte >> 4) if NIBBLE % 2 == 0 else (byte & 15)
    citations = ["doc-plover"]
    if bits & 1:
        citations = ["doc-plover", "doc-plover"]
    if bits & 4:
        citations = citations + ["doc-other"]
    return {{"answer": "Chunks overlap so no sentence is cut.", "citations": citations,
            "confidence": 0.9 if bits & 8 else 0.1, "needs_human_review": bool(bits & 2)}}
"""

#: The honest agent, but each answer takes a time that depends on the question it answers.
TIMED_AGENT = """
import time

def answer(question):
    time.sleep((ord(question[8]) % 4) * 0.4)
    if "score" in question:
        return {"answer": "I don't know; the course material does not cover this.",
                "citations": [], "confidence": 0.1, "needs_human_review": True}
    return {"answer": "Chunks overlap so no sentence is cut.", "citations": ["doc-plover"],
            "confidence": 0.8, "needs_human_review": False}
"""

SUBMISSIONS = 6


def utc(value: datetime | None) -> datetime:
    stamp = as_utc(value)
    assert stamp is not None
    return stamp


def true_nibble(index: int) -> int:
    data = str(CASES[0]["question"]).encode("utf-8")
    byte = data[index // 2]
    return (byte >> 4) if index % 2 == 0 else (byte & 15)


def _failed_all(tally: dict[str, Any]) -> bool | None:
    """Whether every case failed this gate, read from a counts or a coarse view."""
    if "passed" in tally:
        return bool(tally["passed"] == 0)
    rate = tally.get("rate")
    if rate is None:
        return None
    return bool(rate["high"] <= 0.5) if rate["low"] == 0 else False


def decode(feedback: dict[str, Any] | None) -> int | None:
    """The nibble the agent encoded, as a student reads it back; None if the view hides it."""
    if not feedback or "by_kind" not in feedback:
        return None
    answerable = feedback["by_kind"]["answerable"]["gates"]
    refusal = feedback["by_kind"]["refusal"]["gates"]
    flags = [
        _failed_all(answerable["citation_unique"]),
        _failed_all(answerable["no_review_flag"]),
        _failed_all(answerable["citation_precision"]),
        _failed_all(refusal["calibrated_confidence"]),
    ]
    if any(flag is None for flag in flags):
        return None
    return sum(1 << bit for bit, flag in enumerate(flags) if flag)


@dataclass
class Course:
    """A server and a worker on a case set with the given policy."""

    client: FlaskClient
    app: Flask
    settings: Settings
    run_worker: Callable[[], None]
    root: Path


@pytest.fixture
def course(
    make_settings: Callable[..., Settings],
    engine: Engine,
    redis_client: Redis,
    tmp_path: Path,
) -> Iterator[Callable[[str], Course]]:
    apps: list[Flask] = []

    def start(policy: str) -> Course:
        root = write_case_set(
            tmp_path / f"cases-{len(apps)}",
            CASES,
            policy=BASE_POLICY + textwrap.dedent(policy),
            documents=DOCUMENTS,
        )
        settings = make_settings(cases_dir=root)
        app = create_app(settings, engine=engine)
        app.config["TESTING"] = True
        apps.append(app)

        def run_worker() -> None:
            service = GradingService.from_settings(settings, name="burst")
            service.engine.dispose()
            service.engine = engine
            worker = GraderWorker([make_queue(settings, redis_client)], connection=redis_client)
            worker.service = service
            worker.work(burst=True, logging_level="WARNING")

        return Course(app.test_client(), app, settings, run_worker, root)

    yield start
    for app in apps:
        app.extensions["grader"].redis.close()


def submit(course: Course, student: Account, files: dict[str, str]) -> str:
    response = upload(course.client, student, make_zip(files))  # type: ignore[arg-type]
    assert response.status_code == 202, response.get_data(as_text=True)
    submission_id: str = response.get_json()["id"]
    return submission_id


def me(course: Course, student: Account) -> dict[str, Any]:
    body: dict[str, Any] = course.client.get("/api/me", headers=student.headers).get_json()
    return body


@dataclass
class Attack:
    recovered_bits: int
    accounted_bits: float
    feedbacks: list[dict[str, Any]]


def wait_until_graded(course: Course, student: Account, ids: list[str]) -> list[Any]:
    """Poll the student API until every submission reads as graded (results whose budget is
    spent are held until the longest run could have ended: 15 s here)."""

    def bodies() -> list[Any]:
        return [
            course.client.get(f"/api/submissions/{sid}", headers=student.headers).get_json()
            for sid in ids
        ]

    def done() -> list[Any] | None:
        found = bodies()
        return found if all(body["status"] == "graded" for body in found) else None

    found: list[Any] = wait_for(done, timeout=60, message="results were not released")
    return found


def attack(course: Course, student: Account) -> Attack:
    """Submit the nibble agent for nibbles 0…5, grade them in upload order, and decode what
    the student API returns for each."""
    ids = [
        submit(course, student, agent_files(NIBBLE_AGENT.format(nibble=index), name=f"n{index}"))
        for index in range(SUBMISSIONS)
    ]
    course.run_worker()
    recovered = 0
    feedbacks = []
    for index, body in enumerate(wait_until_graded(course, student, ids)):
        feedbacks.append(body["feedback"])
        if decode(body["feedback"]) == true_nibble(index):
            recovered += 4
    return Attack(recovered, me(course, student)["feedback"]["bits_disclosed"], feedbacks)


NO_HOLD = "feedback_time_quantum_seconds = 0\n"


def test_attack_under_counts_without_budget_recovers_every_nibble(
    course: Callable[[str], Course], student: Account
) -> None:
    """Under counts with no budget the gate-pattern attack reads back 4 bits per submission
    (the channel is real), and the accounted bound still covers them by a wide margin."""
    run = attack(course(f'feedback = "counts"\nfeedback_budget_bits = 1e9\n{NO_HOLD}'), student)
    assert run.recovered_bits == 4 * SUBMISSIONS
    assert run.recovered_bits <= run.accounted_bits
    # 2 answerable + 1 refusal case: 42.02 bits a view, 4 bits of timing (16 whole seconds).
    assert run.accounted_bits == pytest.approx(SUBMISSIONS * 46.02, abs=0.1)


@pytest.mark.parametrize(
    ("mode", "most_views"),
    # counts: 46.02 bits a view, 3 fit in 150; coarse: 32.85, 4 fit; ladder: only the first
    # and the one nibble whose pattern passes both answerable cases beat the best by a step.
    [("counts", 3), ("coarse", 4), ("ladder", 2)],
)
def test_attack_stays_within_the_accounted_bound_and_the_budget(
    course: Callable[[str], Course], student: Account, mode: str, most_views: int
) -> None:
    """Under counts, coarse and ladder with a 150-bit budget, the bits the attack recovers
    from the student API stay below both the bits accounted and the budget; once the budget
    is spent, feedback is the decision only and says why."""
    budget = 150
    run = attack(
        course(f'feedback = "{mode}"\nfeedback_budget_bits = {budget}\n{NO_HOLD}'), student
    )
    assert run.recovered_bits <= run.accounted_bits
    assert run.recovered_bits <= budget
    released = [f for f in run.feedbacks if f.get("released")]
    assert len(released) == most_views
    assert run.recovered_bits == 4 * most_views  # every released view carried its nibble
    withheld = [f for f in run.feedbacks if f.get("released") is False]
    assert withheld and all("by_kind" not in f and "errors" not in f for f in withheld)
    assert all(
        f["certificate"]["decision"] in ("awarded", "not_awarded", "blocked") for f in run.feedbacks
    )
    assert all(f["certificate"]["reasons"] == [] for f in withheld)
    if mode != "ladder":
        assert withheld[-1]["withheld"] == "budget"
        assert "budget reached" in withheld[-1]["message"]


def test_ladder_withholds_a_result_that_does_not_improve(
    course: Callable[[str], Course], student: Account
) -> None:
    """Under ladder, a second submission no better than the first shows only the decision and
    "no improvement over your best (submission N)", with "released": false and no by_kind;
    the page says the same; /api/me counts the bits."""
    running = course(f'feedback = "ladder"\n{NO_HOLD}')
    first = submit(running, student, honest_agent())
    running.run_worker()
    second = submit(running, student, honest_agent(salt="again"))
    running.run_worker()
    one = running.client.get(f"/api/submissions/{first}", headers=student.headers).get_json()
    two = running.client.get(f"/api/submissions/{second}", headers=student.headers).get_json()
    assert one["feedback"]["released"] is True and one["feedback"]["overall"]["passed"] == 3
    feedback = two["feedback"]
    assert feedback["released"] is False and "by_kind" not in feedback
    assert feedback["message"] == f"no improvement over your best (submission {first})"
    assert feedback["certificate"] == {"decision": "awarded", "reasons": []}
    standing = me(running, student)["feedback"]
    assert standing["mode"] == "ladder" and standing["budget_bits"] == 2500
    with Session(running.app.extensions["grader"].engine) as session:
        charged = sum(row.bits for row in session.exec(select(FeedbackDisclosureRow)).all())
    assert standing["bits_disclosed"] == pytest.approx(charged, abs=0.01)
    page = logged_in(running.app, student).get(f"/submissions/{second}").get_data(as_text=True)
    assert "no improvement over your best" in page and "Feedback used" in page


def _student_visible(body: dict[str, Any]) -> dict[str, Any]:
    """A submission as a student reads it, minus what differs by upload (id, names, hash)."""
    skip = {"id", "filename", "agent_name", "package_sha256", "created_at", "finished_at"}
    return {key: value for key, value in body.items() if key not in skip}


def test_question_dependent_timing_changes_nothing_a_student_reads(
    course: Callable[[str], Course], student: Account, engine: Engine
) -> None:
    """An agent that sleeps a question-dependent time and an honest one give the same
    student-visible result: both are held as "running" until the 15 s quantum, then show
    finishing 15 s after upload, with identical feedback."""
    quantum = 15
    running = course(f'feedback = "counts"\nfeedback_time_quantum_seconds = {quantum}\n')
    fast = submit(running, student, honest_agent(name="fast"))
    slow = submit(running, student, agent_files(TIMED_AGENT, name="slow"))
    running.run_worker()
    real = {sid: submission_row(engine, sid) for sid in (fast, slow)}
    durations = {
        sid: (row.finished_at - row.started_at).total_seconds()  # type: ignore[operator]
        for sid, row in real.items()
    }
    assert durations[slow] - durations[fast] >= 1.0  # the agent really did take longer
    bodies = {
        sid: running.client.get(f"/api/submissions/{sid}", headers=student.headers).get_json()
        for sid in (fast, slow)
    }
    listing = running.client.get("/api/submissions", headers=student.headers).get_json()
    assert all(body["status"] == "running" and body["feedback"] is None for body in bodies.values())
    assert all(
        sub["status"] == "running" and sub["finished_at"] is None for sub in listing["submissions"]
    )
    deadline = max(utc(row.created_at) for row in real.values()).timestamp() + quantum + 1
    time.sleep(max(0.0, deadline - time.time()))
    bodies = {
        sid: running.client.get(f"/api/submissions/{sid}", headers=student.headers).get_json()
        for sid in (fast, slow)
    }
    assert _student_visible(bodies[fast]) == _student_visible(bodies[slow])
    assert bodies[fast]["status"] == "graded" and bodies[fast]["feedback"]["overall"]["passed"] == 3
    for sid, body in bodies.items():
        created = time.mktime(time.strptime(body["created_at"], "%Y-%m-%dT%H:%M:%SZ"))
        finished = time.mktime(time.strptime(body["finished_at"], "%Y-%m-%dT%H:%M:%SZ"))
        assert finished - created in (quantum, quantum + 1), sid  # whole-second timestamps


def test_nothing_a_student_receives_under_release_carries_a_question(
    course: Callable[[str], Course], student: Account
) -> None:
    """Withheld and coarse views, /api/me and the pages (all rendered, the coarse page with
    its buckets) carry no fragment of a hidden case."""
    for mode in ("ladder", "coarse"):
        running = course(f'feedback = "{mode}"\n{NO_HOLD}')
        attack(running, student)
        browser = logged_in(running.app, student)
        responses = [
            running.client.get("/api/submissions", headers=student.headers),
            running.client.get("/api/me", headers=student.headers),
            browser.get("/submissions"),
        ]
        listing = running.client.get("/api/submissions", headers=student.headers).get_json()
        for sub in listing["submissions"]:
            responses.append(
                running.client.get(f"/api/submissions/{sub['id']}", headers=student.headers)
            )
            responses.append(browser.get(f"/submissions/{sub['id']}"))
        assert all(response.status_code == 200 for response in responses)
        blob = "\n".join(response.get_data(as_text=True) for response in responses).lower()
        for fragment in SECRET_FRAGMENTS:
            assert fragment not in blob, (mode, fragment)
        if mode == "coarse":
            assert re.search(r"\d+–\d+%", blob), "the coarse page shows its buckets"


def test_instructors_see_the_bits_on_roster_student_page_and_csv(
    course: Callable[[str], Course], student: Account, instructor: Account
) -> None:
    """The roster (JSON and page), the student page and the decisions CSV carry the bits
    disclosed to each student on the current case-set version, equal to the student's own."""
    running = course(f'feedback = "ladder"\n{NO_HOLD}')
    for salt in ("one", "two"):
        submit(running, student, honest_agent(salt=salt))
    running.run_worker()
    bits = me(running, student)["feedback"]["bits_disclosed"]
    # 1 + 42.02 + 4 released, then 1 + log2 3 + 4 withheld.
    assert bits == pytest.approx(47.02 + 6.58, abs=0.01)
    client = running.client
    csv_text = client.get("/api/instructor/certificates.csv", headers=instructor.headers)
    rows = list(csv.DictReader(io.StringIO(csv_text.get_data(as_text=True))))
    assert [row["feedback_bits"] for row in rows if row["student"] == "alice"] == [f"{bits:.2f}"]
    roster = client.get("/api/instructor/students", headers=instructor.headers).get_json()
    entry = next(s for s in roster["students"] if s["student"] == "alice")
    assert entry["feedback_bits"] == pytest.approx(bits, abs=0.01)
    browser = logged_in(running.app, instructor)
    page = browser.get("/instructor/").get_data(as_text=True)
    assert f'data-field="feedback-bits">{bits:.1f}<' in page
    detail = browser.get("/instructor/students/alice").get_data(as_text=True)
    assert f'id="feedback-bits">{bits:.1f} bits' in detail


def test_a_regrade_charges_again_only_when_the_view_changes(
    course: Callable[[str], Course], student: Account, instructor: Account
) -> None:
    """A regrade from recorded answers that leaves the student's view as it was costs nothing;
    one that changes it (a label fixed so a gate now fails) is charged the view's bits again,
    on the new case-set version, with no timing bits."""
    running = course(f'feedback = "counts"\n{NO_HOLD}')
    submit(running, student, honest_agent())
    running.run_worker()
    before = me(running, student)["feedback"]["bits_disclosed"]
    assert before == pytest.approx(46.02, abs=0.01)
    regrade = {"mode": "answers", "include_up_to_date": True}
    headers = instructor.headers
    assert (
        running.client.post("/api/instructor/regrades", json=regrade, headers=headers).status_code
        == 201
    )
    assert me(running, student)["feedback"]["bits_disclosed"] == pytest.approx(before, abs=0.01)
    relabelled = [dict(case) for case in CASES]
    relabelled[1]["forbidden_terms"] = ["sentence"]
    write_case_set(running.root, relabelled, policy=(running.root / "policy.toml").read_text())
    assert (
        running.client.post("/api/instructor/regrades", json=regrade, headers=headers).status_code
        == 201
    )
    sid = running.client.get("/api/submissions", headers=student.headers).get_json()["submissions"][
        0
    ]["id"]
    body = running.client.get(f"/api/submissions/{sid}", headers=student.headers).get_json()
    assert body["feedback"]["by_kind"]["answerable"]["gates"]["forbidden_absent"]["passed"] == 1
    assert me(running, student)["feedback"]["bits_disclosed"] == pytest.approx(42.02, abs=0.01)


SETUP_SLEEPS_THEN_FAILS = """
import time

def setup():
    time.sleep(1.5)
    raise RuntimeError("no start")

def answer(question):
    return {}
"""


def test_a_failed_start_is_held_and_rounded_like_a_result(
    course: Callable[[str], Course], student: Account, engine: Engine
) -> None:
    """An agent that chooses when to fail its setup reads as running until the 10 s quantum,
    then as failed, finishing exactly 10 s after upload."""
    quantum = 10
    running = course(f'feedback = "counts"\nfeedback_time_quantum_seconds = {quantum}\n')
    sid = submit(running, student, agent_files(SETUP_SLEEPS_THEN_FAILS, setup="agent:setup"))
    running.run_worker()
    row = submission_row(engine, sid)
    assert row.status == "failed"
    body = running.client.get(f"/api/submissions/{sid}", headers=student.headers).get_json()
    assert body["status"] == "running" and body["reason"] is None and body["finished_at"] is None
    time.sleep(max(0.0, utc(row.created_at).timestamp() + quantum + 1 - time.time()))
    body = running.client.get(f"/api/submissions/{sid}", headers=student.headers).get_json()
    assert body["status"] == "failed" and body["reason"]
    created = time.mktime(time.strptime(body["created_at"], "%Y-%m-%dT%H:%M:%SZ"))
    finished = time.mktime(time.strptime(body["finished_at"], "%Y-%m-%dT%H:%M:%SZ"))
    assert finished - created == quantum


def test_nothing_else_a_student_reads_announces_a_held_outcome(
    course: Callable[[str], Course], student: Account, engine: Engine
) -> None:
    """While a failed and a graded run are held back, /api/me (quota, failed starts, feedback
    used) and the submissions page read as before they finished, and a queued submission reads
    as running from its upload (when it leaves the queue would tell when the run ahead ended);
    once the quantum has passed, the figures catch up."""
    quantum = 20
    running = course(f'feedback = "counts"\nfeedback_time_quantum_seconds = {quantum}\n')
    failing = submit(running, student, agent_files(SETUP_SLEEPS_THEN_FAILS, setup="agent:setup"))
    honest = submit(running, student, honest_agent())
    before = me(running, student)
    listed = running.client.get("/api/submissions", headers=student.headers).get_json()
    assert {item["status"] for item in listed["submissions"]} == {"running"}  # both still queued
    running.run_worker()
    assert [submission_row(engine, sid).status for sid in (failing, honest)] == ["failed", "graded"]
    held = me(running, student)
    for key in ("quota", "failed_starts", "feedback"):
        assert held[key] == before[key], key
    assert held["quota"]["used"] == 2 and held["failed_starts"]["used"] == 0
    assert held["feedback"]["bits_disclosed"] == 0
    page = logged_in(running.app, student).get("/submissions").get_data(as_text=True)
    assert '<strong id="feedback-bits">0</strong>' in page
    assert '<strong id="quota-used">2</strong>' in page
    assert ">queued<" not in page
    created = max(utc(submission_row(engine, sid).created_at) for sid in (failing, honest))
    time.sleep(max(0.0, created.timestamp() + quantum + 1 - time.time()))
    after = me(running, student)
    assert after["quota"]["used"] == 1 and after["failed_starts"]["used"] == 1
    assert after["feedback"]["bits_disclosed"] > 0


def test_a_regrade_keeps_a_withheld_result_withheld_at_no_cost(
    course: Callable[[str], Course], student: Account, instructor: Account
) -> None:
    """Under ladder, regrading unchanged answers leaves the released result released, the
    withheld one withheld (same message and link), and the student's total as it was."""
    running = course(f'feedback = "ladder"\n{NO_HOLD}')
    first = submit(running, student, honest_agent(salt="one"))
    second = submit(running, student, honest_agent(salt="two"))
    running.run_worker()
    before = me(running, student)["feedback"]["bits_disclosed"]
    regrade = {"mode": "answers", "include_up_to_date": True}
    response = running.client.post(
        "/api/instructor/regrades", json=regrade, headers=instructor.headers
    )
    assert response.status_code == 201 and response.get_json()["regraded"] == 2
    assert me(running, student)["feedback"]["bits_disclosed"] == pytest.approx(before, abs=0.01)
    one, two = (
        running.client.get(f"/api/submissions/{sid}", headers=student.headers).get_json()
        for sid in (first, second)
    )
    assert one["feedback"]["released"] is True and "by_kind" in one["feedback"]
    assert two["feedback"]["released"] is False and two["feedback"]["best_submission"] == first
    page = logged_in(running.app, student).get(f"/submissions/{second}").get_data(as_text=True)
    assert f'href="/submissions/{first}"' in page


# --------------------------------------------------------------------------------------------
# A student's comparison of two of their submissions (issue 13) is charged too

#: Refuses every question: fails both answerable cases, passes the refusal case.
REFUSING_AGENT = """
def answer(question):
    return {"answer": "I don't know; the course material does not cover this.",
            "citations": [], "confidence": 0.1, "needs_human_review": True}
"""

#: McNemar's discordant total on the 2 answerable cases: one of 0, 1, 2.
COMPARISON_BITS = math.log2(3)


def compare(course: Course, student: Account, baseline: str, candidate: str) -> Any:
    return course.client.get(
        "/api/compare",
        headers=student.headers,
        query_string={"baseline": baseline, "candidate": candidate},
    )


def graded_pair(course: Course, student: Account) -> tuple[str, str]:
    """A refusing submission, then an honest one, graded and readable by the student."""
    first = submit(course, student, agent_files(REFUSING_AGENT, name="refuser"))
    second = submit(course, student, honest_agent())
    course.run_worker()
    wait_until_graded(course, student, [first, second])
    return first, second


def test_a_comparison_is_charged_once_per_pair(
    course: Callable[[str], Course], student: Account, engine: Engine
) -> None:
    """Under counts, comparing two released results adds log2(n + 1) bits (n = 2 answerable
    cases) to the student's feedback used, recorded in a row of its own; the same pair again,
    in either order, costs nothing; what the comparison shows of each side is what the views
    showed."""
    running = course(f'feedback = "counts"\nfeedback_budget_bits = 1000\n{NO_HOLD}')
    first, second = graded_pair(running, student)
    before = me(running, student)["feedback"]["bits_disclosed"]
    response = compare(running, student, first, second)
    assert response.status_code == 200, response.get_json()
    view = response.get_json()
    assert view["bits_charged"] == pytest.approx(COMPARISON_BITS, abs=1e-6)
    assert view["primary"]["p_value"] == 0.5  # 0 vs 2 discordant
    after = me(running, student)["feedback"]["bits_disclosed"]
    assert after == pytest.approx(before + COMPARISON_BITS, abs=0.01)
    for sid, side in ((first, "baseline_passed"), (second, "candidate_passed")):
        shown = running.client.get(f"/api/submissions/{sid}", headers=student.headers)
        counts = shown.get_json()["feedback"]["by_kind"]["answerable"]["passed"]
        assert view["by_kind"]["answerable"][side] == counts
    for query in ((first, second), (second, first)):
        again = compare(running, student, *query)
        assert again.status_code == 200 and again.get_json()["bits_charged"] == 0
    assert me(running, student)["feedback"]["bits_disclosed"] == after
    with Session(engine) as session:
        rows = session.exec(select(ComparisonDisclosureRow)).all()
    assert [(row.user_id, round(row.bits, 3)) for row in rows] == [
        (student.id, round(COMPARISON_BITS, 3))
    ]


def test_a_comparison_past_the_budget_is_refused(
    course: Callable[[str], Course], student: Account
) -> None:
    """With a budget that holds two full views (46.02 bits each) but not the comparison's
    1.58 bits more, the comparison is refused with one line and charges nothing."""
    running = course(f'feedback = "counts"\nfeedback_budget_bits = 93\n{NO_HOLD}')
    first, second = graded_pair(running, student)
    bodies = [
        running.client.get(f"/api/submissions/{sid}", headers=student.headers).get_json()
        for sid in (first, second)
    ]
    assert all(body["feedback"]["released"] for body in bodies)
    before = me(running, student)["feedback"]["bits_disclosed"]
    assert before + COMPARISON_BITS > 93
    response = compare(running, student, first, second)
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error.startswith("feedback budget reached") and "\n" not in error
    assert me(running, student)["feedback"]["bits_disclosed"] == before


def test_ladder_compares_only_released_results(
    course: Callable[[str], Course], student: Account
) -> None:
    """Under ladder, two released results (the second beat the first) can be compared and are
    charged; a result withheld as no improvement cannot, and the refusal costs nothing."""
    running = course(f'feedback = "ladder"\n{NO_HOLD}')
    first, second = graded_pair(running, student)
    before = me(running, student)["feedback"]["bits_disclosed"]
    allowed = compare(running, student, first, second)
    assert allowed.status_code == 200, allowed.get_json()
    assert allowed.get_json()["bits_charged"] == pytest.approx(COMPARISON_BITS, abs=1e-6)
    charged = me(running, student)["feedback"]["bits_disclosed"]
    assert charged == pytest.approx(before + COMPARISON_BITS, abs=0.01)
    third = submit(running, student, honest_agent(salt="again"))
    running.run_worker()
    body = wait_until_graded(running, student, [third])[0]
    assert body["feedback"]["released"] is False
    spent = me(running, student)["feedback"]["bits_disclosed"]
    refused = compare(running, student, second, third)
    assert refused.status_code == 400
    assert refused.get_json() == {
        "error": f"submission {third}: its full result was not released to you, so it cannot "
        "be compared"
    }
    assert me(running, student)["feedback"]["bits_disclosed"] == spent


def test_a_result_still_held_back_cannot_be_compared(
    course: Callable[[str], Course], student: Account
) -> None:
    """With a 60 s time quantum a result the student cannot read yet cannot be compared
    either: the refusal reads as for a submission with no results."""
    running = course('feedback = "counts"\n')
    first = submit(running, student, agent_files(REFUSING_AGENT, name="refuser"))
    second = submit(running, student, honest_agent())
    running.run_worker()
    listed = running.client.get(f"/api/submissions/{second}", headers=student.headers)
    assert listed.get_json()["status"] != "graded"
    refused = compare(running, student, first, second)
    assert refused.status_code == 400
    assert refused.get_json()["error"].endswith("has no results yet")
