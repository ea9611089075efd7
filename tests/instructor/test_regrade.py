"""Regrades on SQLite and PostgreSQL: from recorded answers after a label or policy fix (old
result sets kept as earlier versions), and by rerunning agents through the real queue."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from grader.core import casesets, scoring
from grader.core.gates import GATE_FUNCTIONS_V1, evaluate_gates
from grader.db.results import eval_records, list_gradings
from grader.db.submissions import get_submission
from grader.db.tables import EvalRecordRow, GradingRow, Role, SubmissionStatus
from tests.instructor.conftest import (
    GOOD,
    INSTRUCTOR_CASES,
    Seeder,
    answer,
    fixed_cases,
    rewrite_cases,
    variant,
)
from tests.server.conftest import Account, make_zip, submission_row, upload


def regrade(client: FlaskClient, account: Account, **body: Any) -> Any:
    return client.post("/api/instructor/regrades", headers=account.headers, json=body)


def snapshot(engine: Engine) -> dict[tuple[str, int], tuple[str, list[tuple[str, bool]]]]:
    """Every result set: (submission, version) → (decision, [(case, passed)…])."""
    with Session(engine) as session:
        gradings = session.exec(select(GradingRow)).all()
        found = {}
        for grading in gradings:
            assert grading.id is not None
            records = eval_records(session=session, grading_id=grading.id)
            found[(grading.submission_id, grading.version)] = (
                grading.decision,
                [(record.case_id, record.passed) for record in records],
            )
        return found


def test_fixing_a_label_changes_exactly_the_affected_decisions_and_keeps_old_versions(
    client: FlaskClient,
    instructor: Account,
    engine: Engine,
    cases_dir: Path,
    class_of: Callable[[], dict[str, Account]],
) -> None:
    """After a3's label is fixed, a regrade from answers moves every submission to v2 on the new
    version; only alice's decision changes (not_awarded → awarded); every v1 result set and its
    eval records stay untouched; an instructor decision on alice is flagged for review."""
    accounts = class_of()
    assert (
        client.post(
            "/api/instructor/certificates",
            headers=instructor.headers,
            json={"student": "alice", "decision": "confirm", "reason": "below the bar"},
        ).status_code
        == 201
    )
    before = snapshot(engine)
    old_version = client.get("/api/instructor/case-set", headers=instructor.headers).get_json()

    rewrite_cases(cases_dir, fixed_cases())
    info = client.get("/api/instructor/case-set", headers=instructor.headers).get_json()
    assert info["version"] != old_version["version"] and info["outdated_submissions"] == 5
    outdated = client.get("/api/instructor/students?filter=outdated", headers=instructor.headers)
    assert len(outdated.get_json()["students"]) == 5

    response = regrade(client, instructor, mode="answers")
    assert response.status_code == 201, response.get_json()
    body = response.get_json()
    assert body["regraded"] == 5 and body["up_to_date"] == 0 and body["decisions_changed"] == 1
    changes = {change["student"]: change for change in body["changes"]}
    assert [name for name, c in changes.items() if c["decision_changed"]] == ["alice"]
    assert (changes["alice"]["old_decision"], changes["alice"]["new_decision"]) == (
        "not_awarded",
        "awarded",
    )
    summary = {
        name: (c["old_passed"], c["new_passed"], c["new_decision"]) for name, c in changes.items()
    }
    assert summary == {
        "alice": (4, 5, "awarded"),
        "bob": (5, 5, "awarded"),
        "carol": (4, 5, "blocked"),  # a3 now passes; r1 still answers a safety case
        "dave": (5, 6, "awarded"),
        "erin": (2, 3, "not_awarded"),
    }
    assert all((c["old_version"], c["new_version"]) == (1, 2) for c in body["changes"])

    after = snapshot(engine)
    assert {key: value for key, value in after.items() if key[1] == 1} == before
    dave_sub = changes["dave"]["submission_id"]
    assert after[(dave_sub, 2)] == ("awarded", [(c["id"], True) for c in INSTRUCTOR_CASES])
    with Session(engine) as session:
        for name, change in changes.items():
            row = get_submission(session=session, submission_id=change["submission_id"])
            assert row is not None and row.status == SubmissionStatus.GRADED
            current = session.get(GradingRow, row.current_grading_id)
            assert current is not None and (current.version, current.trigger) == (2, "regrade")
            assert current.case_set_version == info["version"], name
            assert current.student_view["case_set_version"] == info["version"]
            assert current.student_view["certificate"]["decision"] == change["new_decision"]
            records = session.exec(
                select(EvalRecordRow).where(col(EvalRecordRow.grading_id) == current.id)
            ).all()
            assert {record.case_set_version for record in records} == {info["version"]}
            assert {record.package_sha256 for record in records} == {"0" * 64}

    roster = client.get("/api/instructor/students", headers=instructor.headers).get_json()
    entries = {entry["student"]: entry for entry in roster["students"]}
    assert entries["alice"]["proposal"]["decision"] == "awarded"
    assert entries["alice"]["current"]["decision"] == "not_awarded"  # the decision stands…
    assert entries["alice"]["needs_review"] is True  # …flagged for review
    assert not any(entry["outdated"] for entry in entries.values())
    assert accounts["alice"].id is not None

    run = client.get(
        f"/api/instructor/regrades/{body['run_id']}", headers=instructor.headers
    ).get_json()
    assert run["mode"] == "answers" and run["decisions_changed"] == 1 and run["by"] == "professor"
    assert [item["student"] for item in run["items"] if item["decision_changed"]] == ["alice"]
    detail = client.get(
        f"/api/instructor/submissions/{changes['alice']['submission_id']}/gradings/2",
        headers=instructor.headers,
    ).get_json()
    assert detail["grading"]["regrade"] == {
        "run_id": body["run_id"],
        "from_version": 1,
        "dropped_cases": [],
        "missing_cases": [],
    }
    assert [g["current"] for g in detail["gradings"]] == [False, True]
    export = client.get(
        f"/api/instructor/submissions/{dave_sub}/eval-records.jsonl", headers=instructor.headers
    )
    lines = [json.loads(line) for line in export.get_data(as_text=True).splitlines()]
    assert [(x["grading_version"], x["trigger"], x["current"]) for x in lines[::6]] == [
        (1, "initial", False),
        (2, "regrade", True),
    ]
    assert {x["versions"]["case_set"] for x in lines} == {old_version["version"], info["version"]}

    again = regrade(client, instructor, mode="answers").get_json()
    assert (again["regraded"], again["up_to_date"]) == (0, 5)
    forced = regrade(client, instructor, mode="answers", include_up_to_date=True).get_json()
    assert forced["regraded"] == 5 and forced["decisions_changed"] == 0
    assert {c["new_version"] for c in forced["changes"]} == {3}


def test_a_preview_writes_nothing(
    client: FlaskClient,
    instructor: Account,
    engine: Engine,
    cases_dir: Path,
    class_of: Callable[[], dict[str, Account]],
) -> None:
    """``dry_run`` reports the same changes as the real regrade but records nothing."""
    class_of()
    before = snapshot(engine)
    rewrite_cases(cases_dir, fixed_cases())
    preview = regrade(client, instructor, mode="answers", dry_run=True)
    assert preview.status_code == 200
    body = preview.get_json()
    assert body["dry_run"] and body["run_id"] is None and body["decisions_changed"] == 1
    assert all(change["new_version"] is None for change in body["changes"])
    assert snapshot(engine) == before
    listed = client.get("/api/instructor/regrades", headers=instructor.headers).get_json()
    assert listed == {"regrades": []}


def test_removed_and_new_cases_are_dropped_and_noted(
    client: FlaskClient,
    instructor: Account,
    cases_dir: Path,
    student: Account,
    seed: Any,
) -> None:
    """A case removed from the set is dropped from the new results; a new case has no recorded
    answer: it is left out and named, so the instructor can rerun the agent."""
    seed.graded(student, GOOD)
    new_case = {
        "id": "a5",
        "kind": "answerable",
        "question": "What does recall count?",
        "expected_citations": ["doc-c"],
        "required_concepts": [["recall"]],
    }
    rewrite_cases(cases_dir, [case for case in fixed_cases() if case["id"] != "a2"] + [new_case])
    body = regrade(client, instructor, mode="answers").get_json()
    (change,) = body["changes"]
    assert change["dropped_cases"] == ["a2"] and change["missing_cases"] == ["a5"]
    assert change["total"] == 5 and change["new_passed"] == 5
    detail = client.get(
        f"/api/instructor/submissions/{change['submission_id']}/gradings/2",
        headers=instructor.headers,
    ).get_json()["grading"]
    assert [case["case_id"] for case in detail["cases"]] == ["a1", "a3", "a4", "r1", "r2"]
    assert detail["regrade"]["missing_cases"] == ["a5"]
    old = client.get(
        f"/api/instructor/submissions/{change['submission_id']}/gradings/1",
        headers=instructor.headers,
    ).get_json()["grading"]
    a2 = next(case for case in old["cases"] if case["case_id"] == "a2")
    assert a2["in_current_set"] is False and old["outdated"] is True
    assert old["slice_summary"]["(case not in the current set)"]["total"] == 1


def test_a_policy_change_is_applied_to_recorded_answers(
    client: FlaskClient,
    instructor: Account,
    cases_dir: Path,
    class_of: Callable[[], dict[str, Account]],
) -> None:
    """Lowering the bars (policy.toml) and regrading awards alice without any rerun."""
    class_of()
    (cases_dir / "policy.toml").write_text("pass_bar = 0.6\nmin_answerable_pass_rate = 0.5\n")
    body = regrade(client, instructor, mode="answers").get_json()
    changed = {c["student"]: c["new_decision"] for c in body["changes"] if c["decision_changed"]}
    assert changed == {"alice": "awarded"}


def test_regrade_requests_are_validated(
    client: FlaskClient, instructor: Account, cases_dir: Path
) -> None:
    """Unknown mode, a bad submission list, a rerun without submissions, and a broken case set
    are answered with a reason."""
    assert regrade(client, instructor, mode="nope").status_code == 400
    assert regrade(client, instructor, mode="answers", submissions="x").status_code == 400
    assert regrade(client, instructor, mode="rerun").status_code == 400
    assert (
        client.post("/api/instructor/regrades", headers=instructor.headers, data="x").status_code
        == 400
    )
    (cases_dir / "cases.jsonl").write_text('{"id": "broken"}\n')
    broken = regrade(client, instructor, mode="answers")
    assert broken.status_code == 503 and "cases.jsonl" in broken.get_json()["error"]
    assert client.get("/api/instructor/audit", headers=instructor.headers).status_code == 503
    roster = client.get("/api/instructor/students", headers=instructor.headers).get_json()
    assert roster["case_set_version"] is None and "cases.jsonl" in roster["case_set_error"]


AGENT = """
def answer(question):
    if "medication" in question or "match" in question:
        return {"answer": "I don't know; the course material does not cover this.",
                "citations": [], "confidence": 0.1, "needs_human_review": True}
    return {"answer": "Chunks overlap so no sentence is cut at a boundary.",
            "citations": ["doc-a"], "confidence": 0.8, "needs_human_review": False}
"""


def test_rerun_regrade_runs_the_agent_again_and_keeps_the_old_version(
    client: FlaskClient,
    instructor: Account,
    student: Account,
    engine: Engine,
    run_worker_burst: Callable[[], None],
) -> None:
    """A rerun re-queues a graded submission like a new upload; a real worker grades it in the
    sandbox as version 2 and moves the current pointer; version 1 is kept."""
    files: dict[str, str | bytes] = {
        "agent.toml": 'name = "chunky"\nentrypoint = "agent:answer"\n',
        "agent.py": AGENT,
    }
    response = upload(client, student, make_zip(files))
    assert response.status_code == 202
    submission_id = response.get_json()["id"]
    run_worker_burst()
    first = submission_row(engine, submission_id)
    assert first.status == SubmissionStatus.GRADED

    queued = regrade(client, instructor, mode="rerun", submissions=[submission_id, "nope"])
    assert queued.status_code == 202
    plan = queued.get_json()
    assert plan["queued"] == [submission_id] and plan["skipped"] == ["nope"]
    waiting = submission_row(engine, submission_id)
    assert waiting.status == SubmissionStatus.QUEUED
    assert waiting.current_grading_id == first.current_grading_id  # old results stay current
    pending = client.get(
        f"/api/instructor/regrades/{plan['run_id']}", headers=instructor.headers
    ).get_json()
    assert pending["items"][0]["new_version"] is None

    run_worker_burst()
    done = submission_row(engine, submission_id)
    assert done.status == SubmissionStatus.GRADED
    assert done.current_grading_id != first.current_grading_id
    with Session(engine) as session:
        versions = [g.version for g in list_gradings(session=session, submission_id=done.id)]
    assert versions == [1, 2]
    finished = client.get(
        f"/api/instructor/regrades/{plan['run_id']}", headers=instructor.headers
    ).get_json()
    item = finished["items"][0]
    assert (item["old_version"], item["new_version"]) == (1, 2)
    assert item["old_decision"] == item["new_decision"] and not item["decision_changed"]
    again = regrade(client, instructor, mode="rerun", outdated=True)
    assert again.status_code == 400  # nothing is on an older case-set version


def test_answers_graded_under_claim_support_v1_are_outdated_and_regraded_under_v2(
    client: FlaskClient,
    instructor: Account,
    engine: Engine,
    seed: Seeder,
    make_user: Callable[..., Account],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A submission graded by the concepts-only gate (v1) is outdated once v2 is the gate; the
    default regrade from answers gives it a new result set in which an answer whose concept
    sits in an unsupported sentence fails, and the decision drops."""
    v1 = functools.partial(evaluate_gates, functions=GATE_FUNCTIONS_V1)
    with monkeypatch.context() as patch:
        patch.setattr(scoring, "evaluate_gates", v1)
        patch.setattr(casesets, "GATES_VERSION", "1")
        frank = make_user(Role.STUDENT, "frank")
        seed.graded(
            frank, variant(a1=answer("Overlap matters because quantum zebras explode.", "doc-a"))
        )
    before = snapshot(engine)
    [(key, (decision, cases))] = before.items()
    assert decision == "awarded" and ("a1", True) in cases

    info = client.get("/api/instructor/case-set", headers=instructor.headers).get_json()
    assert info["outdated_submissions"] == 1
    body = regrade(client, instructor, mode="answers").get_json()
    assert body["regraded"] == 1 and body["decisions_changed"] == 1
    after = snapshot(engine)
    assert after[key] == before[key]  # the v1 result set is kept as it was
    decision, cases = after[(key[0], 2)]
    assert decision == "not_awarded" and ("a1", False) in cases
