"""The instructor pages through Flask's test client on SQLite and PostgreSQL: who may open
them, and every form (decisions, regrades, reruns) with its CSRF token."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from pathlib import Path

from flask.testing import FlaskClient
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from grader.db.tables import CertificateDecisionRow, RegradeRunRow, Role
from grader.server import create_app
from grader.settings import Settings
from grader.storage import ArchiveStore
from tests.conftest import PRIVATE_CASES
from tests.instructor.conftest import Seeder, csrf_token, fixed_cases, login, rewrite_cases
from tests.server.conftest import Account

PAGES = [
    "/instructor/",
    "/instructor/?filter=blocked",
    "/instructor/students/alice",
    "/instructor/submissions/{sub}",
    "/instructor/submissions/{sub}?version=1",
    "/instructor/regrade",
    "/instructor/audit",
]
FORMS = [
    ("/instructor/students/alice/decision", {"action": "award", "reason": "x"}),
    ("/instructor/submissions/{sub}/rerun", {}),
    ("/instructor/regrade", {"mode": "answers", "preview": "0"}),
    ("/instructor/regrade", {"mode": "rerun"}),
]


def alice_submission(client: FlaskClient, instructor: Account) -> str:
    body = client.get("/api/instructor/students/alice", headers=instructor.headers).get_json()
    submission_id: str = body["submissions"][0]["id"]
    return submission_id


def test_anonymous_visitors_are_sent_to_the_login_form(
    client: FlaskClient, instructor: Account, class_of: Callable[[], dict[str, Account]]
) -> None:
    """Every instructor page redirects an anonymous visitor to /login; forms cannot be posted."""
    class_of()
    sub = alice_submission(client, instructor)
    for template in PAGES:
        response = client.get(template.format(sub=sub))
        assert response.status_code == 302, template
        assert response.headers["Location"].startswith("/login?next=")
    for path, data in FORMS:
        assert client.post(path.format(sub=sub), data=data).status_code in (302, 400), path


def test_students_get_403_on_every_page_and_form(
    client: FlaskClient,
    instructor: Account,
    engine: Engine,
    class_of: Callable[[], dict[str, Account]],
) -> None:
    """A logged-in student gets 403 on each page and on each form, even with a valid CSRF
    token; nothing is recorded."""
    accounts = class_of()
    sub = alice_submission(client, instructor)
    login(client, accounts["alice"])
    for template in PAGES:
        response = client.get(template.format(sub=sub))
        assert response.status_code == 403, template
        assert "Instructors only" in response.get_data(as_text=True)
    token = csrf_token(client, "/submissions")
    for path, data in FORMS:
        response = client.post(path.format(sub=sub), data={**data, "csrf_token": token})
        assert response.status_code == 403, path
    with Session(engine) as session:
        assert session.exec(select(CertificateDecisionRow)).all() == []
        assert session.exec(select(RegradeRunRow)).all() == []


def test_instructor_pages_render_and_the_decision_form_records_an_audited_decision(
    client: FlaskClient,
    instructor: Account,
    class_of: Callable[[], dict[str, Account]],
) -> None:
    """Every page renders for an instructor; the decision form needs its CSRF token and a
    reason, and a valid post shows the decision, the trail row and the certificate."""
    class_of()
    sub = alice_submission(client, instructor)
    login(client, instructor)
    for template in PAGES:
        response = client.get(template.format(sub=sub))
        assert response.status_code == 200, template
    roster = client.get("/instructor/").get_data(as_text=True)
    assert roster.count('data-student="') == 5
    blocked = client.get("/instructor/?filter=blocked").get_data(as_text=True)
    assert re.findall(r'data-student="([^"]+)"', blocked) == ["carol"]

    path = "/instructor/students/alice"
    no_csrf = client.post(f"{path}/decision", data={"action": "award", "reason": "x"})
    assert no_csrf.status_code == 400
    token = csrf_token(client, path)
    blank = client.post(
        f"{path}/decision", data={"action": "award", "reason": " ", "csrf_token": token}
    )
    assert blank.status_code == 303
    assert "a reason is required" in client.get(path).get_data(as_text=True)
    recorded = client.post(
        f"{path}/decision",
        data={"action": "award", "reason": "medical note on file", "csrf_token": token},
        follow_redirects=True,
    )
    html = recorded.get_data(as_text=True)
    assert "Recorded: award → Awarded." in html
    assert "medical note on file" in html and "professor" in html
    assert re.search(r"<code>GC-[0-9A-F]{16}</code>", html)
    assert "/certificates/" in html
    assert (
        client.post(
            "/instructor/students/nobody/decision",
            data={"action": "award", "reason": "x", "csrf_token": token},
        ).status_code
        == 404
    )
    assert client.get("/instructor/students/nobody").status_code == 404
    assert client.get("/instructor/submissions/nope").status_code == 404
    assert client.get(f"/instructor/submissions/{sub}?version=7").status_code == 404


def test_regrade_forms_preview_apply_and_rerun(
    client: FlaskClient,
    instructor: Account,
    engine: Engine,
    cases_dir: Path,
    class_of: Callable[[], dict[str, Account]],
) -> None:
    """Preview writes nothing and lists the one changed decision; applying redirects to the
    run page; rerunning outdated submissions queues them; a single rerun queues one."""
    class_of()
    sub = alice_submission(client, instructor)
    login(client, instructor)
    rewrite_cases(cases_dir, fixed_cases())
    form = client.get("/instructor/regrade").get_data(as_text=True)
    assert 'id="outdated-count">5<' in form
    token = csrf_token(client, "/instructor/regrade")
    preview = client.post(
        "/instructor/regrade", data={"mode": "answers", "preview": "1", "csrf_token": token}
    ).get_data(as_text=True)
    assert preview.count('data-changed="yes"') == 1 and "Nothing has been written" in preview
    with Session(engine) as session:
        assert session.exec(select(RegradeRunRow)).all() == []
    applied = client.post(
        "/instructor/regrade",
        data={"mode": "answers", "preview": "0", "csrf_token": token},
        follow_redirects=True,
    )
    page = applied.get_data(as_text=True)
    assert "Regraded 5 submissions from recorded answers; 1 decision changed." in page
    assert 'id="changed-count">1<' in page and page.count('data-changed="yes"') == 1
    detail = client.get(f"/instructor/submissions/{sub}").get_data(as_text=True)
    assert "Regraded from the recorded answers of v1" in detail
    old = client.get(f"/instructor/submissions/{sub}?version=1").get_data(as_text=True)
    assert 'id="outdated-banner"' in old and "earlier result set" in old

    nothing = client.post(
        "/instructor/regrade", data={"mode": "rerun", "csrf_token": token}, follow_redirects=True
    )
    assert "Nothing queued" in nothing.get_data(as_text=True)
    single = client.post(
        f"/instructor/submissions/{sub}/rerun", data={"csrf_token": token}, follow_redirects=True
    )
    assert "Queued: the agent runs again" in single.get_data(as_text=True)
    again = client.post(
        f"/instructor/submissions/{sub}/rerun", data={"csrf_token": token}, follow_redirects=True
    )
    assert "Not queued" in again.get_data(as_text=True)


def test_audit_page_shows_the_verdict_prominently(client: FlaskClient, instructor: Account) -> None:
    """The audit page leads with PASSED or FAILED, matching the API's verdict."""
    login(client, instructor)
    verdict = client.get("/api/instructor/audit").get_json()["ok"]
    html = client.get("/instructor/audit").get_data(as_text=True)
    assert ("AUDIT PASSED" if verdict else "AUDIT FAILED") in html
    assert html.index('id="verdict"') < html.index('id="canaries"')


def test_a_set_that_resists_the_canaries_shows_audit_passed_and_no_warning(
    make_settings: Callable[..., Settings],
    engine: Engine,
    instructor: Account,
    make_user: Callable[..., Account],
) -> None:
    """On the demo private set every canary fails as it should: AUDIT PASSED, no audit warning
    on the roster, and a student's proposal is not marked needs review."""
    student = make_user(Role.STUDENT, "sam")
    settings = make_settings(cases_dir=PRIVATE_CASES)
    Seeder(engine, PRIVATE_CASES, ArchiveStore(settings.storage_dir)).graded(student, {})
    resistant = create_app(settings, engine=engine)
    client = resistant.test_client()
    login(client, instructor)
    assert "AUDIT PASSED" in client.get("/instructor/audit").get_data(as_text=True)
    roster = client.get("/instructor/").get_data(as_text=True)
    assert 'id="audit-warning"' not in roster and "needs review</span>" not in roster
    page = client.get("/instructor/students/sam").get_data(as_text=True)
    assert 'id="audit-review-banner"' not in page
    entry = client.get("/api/instructor/students", headers=instructor.headers).get_json()
    assert [(e["student"], e["flags"]) for e in entry["students"]] == [("sam", [])]
    resistant.extensions["grader"].redis.close()


def test_a_failing_audit_marks_every_proposal_needs_review(
    client: FlaskClient,
    instructor: Account,
    make_user: Callable[..., Account],
    class_of: Callable[[], dict[str, Account]],
) -> None:
    """The test set fails its audit: the roster keeps its red banner, every student with a
    proposal is tagged and filtered as needs review (API flag audit_failed, CSV column), the
    student page says why; a student with no graded submission has no proposal to flag."""
    class_of()
    make_user(Role.STUDENT, "zoe")
    login(client, instructor)
    html = client.get("/instructor/").get_data(as_text=True)
    assert 'id="audit-warning"' in html
    assert html.count("needs review</span>") == 5
    review = client.get("/instructor/?filter=review").get_data(as_text=True)
    assert review.count('<tr data-student="') == 5 and 'data-student="zoe"' not in review
    body = client.get("/api/instructor/students?filter=review").get_json()
    assert [e["student"] for e in body["students"]] == ["alice", "bob", "carol", "dave", "erin"]
    assert all(e["flags"] == ["audit_failed"] and e["needs_review"] for e in body["students"])
    everyone = client.get("/api/instructor/students").get_json()["students"]
    assert [e["flags"] for e in everyone if e["student"] == "zoe"] == [[]]
    page = client.get("/instructor/students/alice").get_data(as_text=True)
    assert 'id="audit-review-banner"' in page and 'id="review-banner"' not in page
    exported = client.get("/api/instructor/certificates.csv").get_data(as_text=True)
    flagged = {row["student"]: row["needs_review"] for row in csv.DictReader(io.StringIO(exported))}
    assert flagged == {
        **dict.fromkeys(["alice", "bob", "carol", "dave", "erin"], "true"),
        "zoe": "false",
    }


def test_roster_warns_when_the_audit_fails(client: FlaskClient, instructor: Account) -> None:
    """The small test set gives concepts away in its questions and pastes well from one-line
    documents, so canaries score: the roster leads with a warning."""
    login(client, instructor)
    html = client.get("/instructor/").get_data(as_text=True)
    assert 'id="audit-warning"' in html and "/instructor/audit" in html


def test_students_see_the_instructors_decision_but_not_its_reason(
    client: FlaskClient,
    instructor: Account,
    class_of: Callable[[], dict[str, Account]],
) -> None:
    """After an instructor decides, the student's page shows the decision and certificate,
    never the free-text reason (which may name hidden cases)."""
    students = class_of()
    login(client, students["bob"])
    before = client.get("/submissions").get_data(as_text=True)
    assert "No instructor has decided yet" in before
    client.get("/logout")

    decided = client.post(
        "/api/instructor/certificates",
        json={
            "student": "bob",
            "decision": "confirm",
            "reason": "note about hidden case zq-marker-517",
        },
        headers=instructor.headers,
    )
    assert decided.status_code == 201
    certificate_id = decided.get_json()["certificate"]["id"]

    login(client, students["bob"])
    after = client.get("/submissions").get_data(as_text=True)
    assert "<strong>awarded</strong>" in after
    assert certificate_id in after and "/certificates/" in after
    assert "zq-marker-517" not in after and "note about" not in after
