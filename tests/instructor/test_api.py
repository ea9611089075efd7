"""The instructor console's JSON API on SQLite and PostgreSQL: permissions, roster, decisions
and their audit trail, certificates, exports and the evaluator audit."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from grader.db.tables import CertificateDecisionRow, Role
from grader.instructor.certificates import sign_certificate_id
from tests.instructor.conftest import ALICE, GOOD, Seeder, login
from tests.server.conftest import Account

#: Every instructor call: (method, path, JSON body). Paths with {sub} get a submission id.
INSTRUCTOR_CALLS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/api/instructor/students", None),
    ("GET", "/api/instructor/students/alice", None),
    ("GET", "/api/instructor/decisions", None),
    ("GET", "/api/instructor/certificates.csv", None),
    ("GET", "/api/instructor/eval-records.jsonl", None),
    ("GET", "/api/instructor/submissions/{sub}", None),
    ("GET", "/api/instructor/submissions/{sub}/gradings/1", None),
    ("GET", "/api/instructor/submissions/{sub}/eval-records.jsonl", None),
    ("GET", "/api/instructor/regrades", None),
    ("GET", "/api/instructor/case-set", None),
    ("GET", "/api/instructor/audit", None),
    (
        "POST",
        "/api/instructor/certificates",
        {"student": "alice", "decision": "award", "reason": "x"},
    ),
    ("POST", "/api/instructor/regrades", {"mode": "answers", "dry_run": True}),
    ("POST", "/api/instructor/regrades", {"mode": "rerun", "submissions": ["{sub}"]}),
]


def call(
    client: FlaskClient,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    headers: dict[str, str] | None = None,
) -> Any:
    return client.open(path, method=method, json=body, headers=headers or {})


def decide(client: FlaskClient, account: Account, student: str, decision: str, reason: str) -> Any:
    return client.post(
        "/api/instructor/certificates",
        headers=account.headers,
        json={"student": student, "decision": decision, "reason": reason},
    )


def roster(client: FlaskClient, account: Account, wanted: str = "all") -> dict[str, Any]:
    response = client.get(f"/api/instructor/students?filter={wanted}", headers=account.headers)
    assert response.status_code == 200
    body: dict[str, Any] = response.get_json()
    return body


def rows(client: FlaskClient, account: Account) -> list[dict[str, str]]:
    response = client.get("/api/instructor/certificates.csv", headers=account.headers)
    assert response.status_code == 200 and response.mimetype == "text/csv"
    return list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))


@pytest.fixture
def alice_sub(student: Account, seed: Seeder) -> str:
    """alice (S's ``student`` fixture) with one graded submission, not awarded."""
    return seed.graded(student, ALICE)


@pytest.fixture
def student_named(make_user: Callable[..., Account]) -> Callable[[str], Account]:
    def factory(name: str) -> Account:
        return make_user(Role.STUDENT, name)

    return factory


def test_every_instructor_call_refuses_students_and_anonymous_callers(
    client: FlaskClient,
    engine: Engine,
    instructor: Account,
    alice_sub: str,
    make_user: Callable[..., Account],
) -> None:
    """Each instructor call: 401 without credentials or with a bad token, 403 with a
    student's token, and an instructor gets an answer."""
    other = make_user(Role.STUDENT, "mallory")
    for method, template, raw in INSTRUCTOR_CALLS:
        path = template.format(sub=alice_sub)
        body = json.loads(json.dumps(raw).replace("{sub}", alice_sub)) if raw else None
        assert call(client, method, path, body).status_code == 401, path
        bad = {"Authorization": "Bearer grd_not-a-token"}
        assert call(client, method, path, body, bad).status_code == 401, path
        assert call(client, method, path, body, other.headers).status_code == 403, path
        answered = call(client, method, path, body, instructor.headers)
        assert answered.status_code in (200, 201, 202), (path, answered.get_data(as_text=True))
    with Session(engine) as session:
        recorded = session.exec(select(CertificateDecisionRow)).all()
        assert [(row.action, row.actor_id) for row in recorded] == [("award", instructor.id)]


def test_a_page_session_cannot_post_decisions_through_the_api(
    client: FlaskClient, instructor: Account, alice_sub: str
) -> None:
    """The API takes the page cookie for reading only: a cross-site form cannot decide."""
    login(client, instructor)
    assert client.get("/api/instructor/students").status_code == 200
    response = client.post(
        "/api/instructor/certificates",
        json={"student": "alice", "decision": "award", "reason": "cookie only"},
    )
    assert response.status_code == 401


def test_a_student_session_gets_403_on_instructor_api_reads(
    client: FlaskClient, student: Account, alice_sub: str
) -> None:
    """A logged-in student's cookie is still a student's: 403 on instructor reads."""
    login(client, student)
    assert client.get("/api/instructor/students").status_code == 403
    assert client.get("/api/instructor/certificates.csv").status_code == 403


def test_roster_shows_best_latest_proposal_and_filters(
    client: FlaskClient, instructor: Account, class_of: Callable[[], dict[str, Account]]
) -> None:
    """Every student appears with best/latest results and the policy's proposal; filters
    select blocked, awarded and not-awarded students. The test set fails its evaluator audit
    (its questions give concepts away), so every proposal is flagged for review, and only for
    that."""
    class_of()
    body = roster(client, instructor)
    by_name = {entry["student"]: entry for entry in body["students"]}
    assert sorted(by_name) == ["alice", "bob", "carol", "dave", "erin"]
    assert by_name["bob"]["proposal"]["decision"] == "awarded"
    assert by_name["bob"]["current"] == {
        "decision": "awarded",
        "source": "policy",
        "action": None,
        "reason": "",
        "decided_by": None,
        "decided_at": None,
    }
    assert by_name["carol"]["current"]["decision"] == "blocked"
    assert "safety failure" in by_name["carol"]["proposal"]["reasons"][0]
    assert by_name["alice"]["best"]["passed"] == 4 and by_name["alice"]["best"]["total"] == 6
    assert by_name["alice"]["best"] == by_name["alice"]["latest"]
    assert not by_name["alice"]["best"]["outdated"]
    assert all(entry["flags"] == ["audit_failed"] for entry in by_name.values())
    names = {
        f: [e["student"] for e in roster(client, instructor, f)["students"]]
        for f in ("blocked", "awarded", "not_awarded", "overridden", "review", "outdated")
    }
    assert names == {
        "blocked": ["carol"],
        "awarded": ["bob", "dave"],
        "not_awarded": ["alice", "carol", "erin"],
        "overridden": [],
        "review": ["alice", "bob", "carol", "dave", "erin"],
        "outdated": [],
    }
    assert body["counts"]["all"] == 5 and body["counts"]["blocked"] == 1
    bad = client.get("/api/instructor/students?filter=nope", headers=instructor.headers)
    assert bad.status_code == 400


def test_best_submission_is_the_best_decision_and_latest_is_the_newest(
    client: FlaskClient, instructor: Account, student: Account, seed: Seeder
) -> None:
    """A student with an awarded then a worse submission: best is the awarded one, latest the
    newer, and the proposal follows the best."""
    alice = student
    first = seed.graded(alice, GOOD, agent="v1")
    second = seed.graded(alice, ALICE, agent="v2")
    entry = roster(client, instructor)["students"][0]
    assert entry["best"]["submission_id"] == first
    assert entry["latest"]["submission_id"] == second
    assert entry["proposal"]["decision"] == "awarded" and entry["submissions"] == 2


def test_decision_sequence_leaves_a_complete_audit_trail_and_csv(
    client: FlaskClient,
    instructor: Account,
    make_user: Callable[..., Account],
    class_of: Callable[[], dict[str, Account]],
) -> None:
    """confirm → revoke → award → withhold on one student, by two instructors: each change is
    an audit row (who, when, from, to, why) and the CSV shows the current decision."""
    class_of()
    second = make_user(Role.INSTRUCTOR, "ta")
    steps = [
        (instructor, "bob", "confirm", "meets every bar", "awarded", "awarded"),
        (second, "bob", "revoke", "copied code found", "awarded", "revoked"),
        (instructor, "bob", "award", "appeal upheld", "revoked", "awarded"),
        (second, "bob", "withhold", "second review", "awarded", "not_awarded"),
        (instructor, "alice", "award", "  late medical note  ", "not_awarded", "awarded"),
        (instructor, "carol", "confirm", "answered a medical question", "blocked", "blocked"),
    ]
    certificates = []
    for actor, who, action, reason, before, after in steps:
        response = decide(client, actor, who, action, reason)
        assert response.status_code == 201, response.get_json()
        body = response.get_json()
        assert (body["from"], body["decision"], body["action"]) == (before, after, action)
        assert body["reason"] == reason.strip() and body["decided_by"] == actor.name
        certificates.append(body["certificate"])
    # A certificate is issued on each transition to awarded and kept only while awarded.
    assert certificates[1] is None and certificates[3] is None and certificates[5] is None
    assert certificates[0]["id"] != certificates[2]["id"]

    trail = client.get("/api/instructor/decisions", headers=instructor.headers).get_json()
    got = [
        (t["student"], t["by"], t["action"], t["from"], t["to"], t["reason"])
        for t in trail["decisions"]
    ]
    assert got == [
        (who, actor.name, action, before, after, reason.strip())
        for actor, who, action, reason, before, after in steps
    ]
    assert [t["from_source"] for t in trail["decisions"][:2]] == ["policy", "instructor"]
    times = [t["at"] for t in trail["decisions"]]
    assert times == sorted(times) and all(t["basis_submission_id"] for t in trail["decisions"])

    bob = client.get("/api/instructor/students/bob", headers=instructor.headers).get_json()
    assert [t["action"] for t in bob["trail"]] == ["confirm", "revoke", "award", "withhold"]
    assert [c["status"] for c in bob["certificates"]] == ["revoked", "revoked"]

    table = {row["student"]: row for row in rows(client, instructor)}
    assert list(table) == ["alice", "bob", "carol", "dave", "erin"]
    assert (table["bob"]["decision"], table["bob"]["source"]) == ("not_awarded", "instructor")
    assert (table["bob"]["reason"], table["bob"]["decided_by"]) == ("second review", "ta")
    assert (table["alice"]["decision"], table["alice"]["action"]) == ("awarded", "award")
    assert table["alice"]["certificate_id"].startswith("GC-")
    assert table["alice"]["proposal"] == "not_awarded"
    assert (table["dave"]["decision"], table["dave"]["source"]) == ("awarded", "policy")
    assert table["dave"]["certificate_id"] == ""  # proposed, not confirmed: no certificate
    assert table["erin"]["reason"].startswith("overall pass rate")
    assert table["carol"]["decision"] == "blocked"
    overridden = [e["student"] for e in roster(client, instructor, "overridden")["students"]]
    assert overridden == ["alice", "bob"]


def test_invalid_decisions_are_refused_and_leave_no_audit_row(
    client: FlaskClient,
    instructor: Account,
    student_named: Callable[[str], Account],
    alice_sub: str,
) -> None:
    """Missing reason, unknown action, unknown student, revoking what is not awarded and
    deciding on a student without results are refused; nothing is recorded."""
    student_named("newcomer")
    cases = [
        ({"student": "alice", "decision": "award", "reason": "   "}, 400, "reason"),
        ({"student": "alice", "decision": "award"}, 400, "reason"),
        ({"student": "alice", "decision": "promote", "reason": "x"}, 400, "confirm, award"),
        ({"decision": "award", "reason": "x"}, 400, "student"),
        ({"student": "alice", "decision": "award", "reason": "x" * 2001}, 400, "longer"),
        ({"student": "nobody", "decision": "award", "reason": "x"}, 404, "no student"),
        ({"student": "professor", "decision": "award", "reason": "x"}, 404, "no student"),
        ({"student": "alice", "decision": "revoke", "reason": "x"}, 409, "only an awarded"),
        ({"student": "newcomer", "decision": "award", "reason": "x"}, 409, "no graded"),
    ]
    for body, status, message in cases:
        response = client.post(
            "/api/instructor/certificates", headers=instructor.headers, json=body
        )
        assert response.status_code == status, body
        assert message in response.get_json()["error"], body
    not_json = client.post(
        "/api/instructor/certificates", headers=instructor.headers, data="student=alice"
    )
    assert not_json.status_code == 400
    assert client.get("/api/instructor/decisions", headers=instructor.headers).get_json() == {
        "decisions": []
    }


def test_newer_submission_flags_an_instructor_decision_for_review(
    client: FlaskClient, instructor: Account, student: Account, seed: Seeder
) -> None:
    """A graded submission after an instructor's withhold does not replace it: the decision
    stands, flagged for review (newer results), until an instructor acts again. (The test set
    fails its evaluator audit, so the proposal also carries that flag throughout.)"""
    alice = student
    seed.graded(alice, ALICE)
    assert decide(client, instructor, "alice", "withhold", "wait for the retake").status_code == 201
    assert roster(client, instructor)["students"][0]["flags"] == ["audit_failed"]
    newer = seed.graded(alice, GOOD, agent="retake")
    entry = roster(client, instructor)["students"][0]
    assert entry["needs_review"] is True
    assert entry["flags"] == ["newer_results", "audit_failed"]
    assert entry["current"]["decision"] == "not_awarded"
    assert entry["current"]["source"] == "instructor"
    assert entry["proposal"]["decision"] == "awarded"
    assert entry["best"]["submission_id"] == newer
    assert [e["student"] for e in roster(client, instructor, "review")["students"]] == ["alice"]
    assert rows(client, instructor)[0]["needs_review"] == "true"
    response = decide(client, instructor, "alice", "confirm", "retake passes")
    assert response.get_json()["decision"] == "awarded"
    entry = roster(client, instructor)["students"][0]
    assert entry["flags"] == ["audit_failed"] and entry["certificate_id"]


def test_certificate_verification_shows_only_public_facts_and_revocation(
    client: FlaskClient, instructor: Account, student_named: Callable[[str], Account], seed: Seeder
) -> None:
    """The signed URL opens without login and shows name, course, case-set version, date and
    status only; after revocation it says revoked; forged or altered tokens are 404."""
    seed.graded(student_named("dave"), GOOD)
    body = decide(client, instructor, "dave", "confirm", "all bars met").get_json()
    url = body["certificate"]["url"]
    path = url.removeprefix("http://localhost")
    public = client.get(path, headers={"Accept": "application/json"})
    assert public.status_code == 200
    facts = public.get_json()
    assert set(facts) == {"name", "course", "case_set_version", "date", "status"}
    assert facts["name"] == "dave" and facts["status"] == "valid"
    assert facts["case_set_version"] == body["case_set_version"]
    html = client.get(path).get_data(as_text=True)
    assert "dave" in html and "valid" in html and "Take two" not in html
    assert "all bars met" not in html and "professor" not in html

    decide(client, instructor, "dave", "revoke", "plagiarism")
    revoked = client.get(path + "?format=json").get_json()
    assert revoked["status"] == "revoked" and "plagiarism" not in json.dumps(revoked)
    assert "revoked" in client.get(path).get_data(as_text=True)

    payload, signature = path.rsplit("/", 1)[1].split(".")
    altered = f"{payload}.{signature[0]}{'A' if signature[1] != 'A' else 'B'}{signature[2:]}"
    forged = sign_certificate_id(body["certificate"]["id"], secret_key="another-key")
    for bad in (altered, forged, "nonsense", "a" * 300):
        assert client.get(f"/certificates/{bad}").status_code == 404
        assert client.get(f"/certificates/{bad}?format=json").get_json() == {
            "error": "no such certificate"
        }


def test_a_student_sees_their_own_certificate_link(
    client: FlaskClient, instructor: Account, student: Account, seed: Seeder
) -> None:
    """``GET /api/certificate`` gives a student the URL of their certificate in force only."""
    seed.graded(student, GOOD)
    assert client.get("/api/certificate").status_code == 401
    assert client.get("/api/certificate", headers=student.headers).get_json() == {
        "certificate": None
    }
    decide(client, instructor, student.name, "confirm", "ok")
    held = client.get("/api/certificate", headers=student.headers).get_json()["certificate"]
    assert held["id"].startswith("GC-") and "/certificates/" in held["url"]
    decide(client, instructor, student.name, "revoke", "no")
    assert client.get("/api/certificate", headers=student.headers).get_json() == {
        "certificate": None
    }


def test_submission_detail_of_any_version_has_cases_gates_and_slices(
    client: FlaskClient, instructor: Account, alice_sub: str
) -> None:
    """Per case: question, kind, slices, every gate, error, safety, answer, timing; plus
    per-gate and per-slice summaries and the versions it was graded on."""
    body = client.get(
        f"/api/instructor/submissions/{alice_sub}/gradings/1", headers=instructor.headers
    ).get_json()
    assert body["student"] == "alice" and [g["version"] for g in body["gradings"]] == [1]
    grading = body["grading"]
    assert grading["current"] and grading["trigger"] == "initial" and not grading["outdated"]
    cases = {case["case_id"]: case for case in grading["cases"]}
    assert cases["a1"]["question"] == "Why do chunks overlap?"
    assert cases["a1"]["slices"] == ["topic:chunking"] and cases["a1"]["seconds"] == 0.25
    assert cases["a1"]["gates"]["claim_support"] is False and cases["a1"]["passed"] is False
    assert cases["a1"]["answer"]["citations"] == ["doc-a"]
    assert set(cases["r1"]["gates"]) == {
        "review_flag",
        "no_citations",
        "calibrated_confidence",
        "refusal_language",
        "citation_unique",
        "forbidden_absent",
    }
    assert grading["gate_summary"]["answerable"]["claim_support"] == {"passed": 3, "total": 4}
    assert grading["slice_summary"]["topic:chunking"]["passed"] == 1
    assert grading["slice_summary"]["topic:metrics"]["failed_gates"] == {
        "citation_precision": 1,
        "citation_recall": 1,
    }
    assert grading["slice_summary"]["(no slice)"]["total"] == 1
    assert grading["versions"]["package_sha256"] == "0" * 64
    missing = client.get(
        f"/api/instructor/submissions/{alice_sub}/gradings/9", headers=instructor.headers
    )
    assert missing.status_code == 404
    theirs = client.get(f"/api/instructor/submissions/{alice_sub}", headers=instructor.headers)
    assert theirs.status_code == 200 and len(theirs.get_json()["cases"]) == 6


def test_eval_records_export_as_jsonl_with_every_version(
    client: FlaskClient, instructor: Account, class_of: Callable[[], dict[str, Account]]
) -> None:
    """All eval records, or one submission's, one JSON object a line with every version of the
    measuring setup, the validated answer and the gate outcomes."""
    class_of()
    response = client.get("/api/instructor/eval-records.jsonl", headers=instructor.headers)
    assert response.status_code == 200 and response.mimetype == "application/x-ndjson"
    lines = [json.loads(line) for line in response.get_data(as_text=True).splitlines()]
    assert len(lines) == 5 * 6
    first = lines[0]
    assert set(first["versions"]) == {
        "case_set",
        "cases",
        "policy",
        "corpus",
        "grader",
        "sandbox",
        "sandbox_image",
        "package_sha256",
    }
    assert first["grading_version"] == 1 and first["current"] is True
    erin = [line for line in lines if line["student"] == "erin"]
    assert {line["case_id"]: line["error_kind"] for line in erin if line["error_kind"]} == {
        "a1": "timeout",
        "a2": "crashed",
        "a4": "timeout",
    }
    assert all(line["answer"] is None for line in erin if line["error_kind"])
    sub = erin[0]["submission_id"]
    one = client.get(
        f"/api/instructor/submissions/{sub}/eval-records.jsonl", headers=instructor.headers
    )
    assert [json.loads(x)["case_id"] for x in one.get_data(as_text=True).splitlines()] == [
        "a1",
        "a2",
        "a3",
        "a4",
        "r1",
        "r2",
    ]
    filtered = client.get(
        f"/api/instructor/eval-records.jsonl?submission={sub}", headers=instructor.headers
    )
    assert filtered.get_data() == one.get_data()
    nope = client.get(
        "/api/instructor/submissions/nope/eval-records.jsonl", headers=instructor.headers
    )
    assert nope.status_code == 404


def test_audit_and_case_set_endpoints(
    client: FlaskClient, instructor: Account, alice_sub: str
) -> None:
    """The canary audit has a verdict and one row per canary; the case-set call reports the
    version and how many results are on it."""
    audit = client.get("/api/instructor/audit", headers=instructor.headers).get_json()
    assert isinstance(audit["ok"], bool) and len(audit["canaries"]) >= 6
    info = client.get("/api/instructor/case-set", headers=instructor.headers).get_json()
    assert info["counts"] == {"answerable": 4, "refusal": 2}
    assert info["graded_submissions"] == 1 and info["outdated_submissions"] == 0
    assert audit["case_set_version"] == info["version"]
