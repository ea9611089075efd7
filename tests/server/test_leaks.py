"""No byte a student can receive carries hidden case content (DESIGN §8).

Agents try to smuggle the hidden questions out — in their answers, exception messages, stderr,
stdout, exit codes, file writes and a fake result line — and are graded by a real rq worker in
bubblewrap. Then every response a student can provoke (API JSON, HTML pages, error bodies,
headers, and the decoded session cookie) is searched for fragments of the hidden cases.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from http.cookies import SimpleCookie
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.engine import Engine
from sqlmodel import Session
from werkzeug.test import TestResponse

from grader.db.results import eval_records
from grader.db.submissions import get_submission
from grader.db.tables import Role, SubmissionStatus
from tests.sandbox.hostile_agents import source
from tests.server.conftest import (
    SECRET_FRAGMENTS,
    Account,
    agent_files,
    honest_agent,
    make_zip,
    submission_row,
    upload,
)

ECHO_AGENT = """
def answer(question):
    words = question.split()
    return {"answer": "The question was: " + question, "citations": words[:3],
            "confidence": 0.9, "needs_human_review": False,
            "retrieved": words, "context": [question]}
"""
SETUP_FAILS = """
def setup():
    raise RuntimeError("setup exploded before any question")

def answer(question):
    return {}
"""
SMUGGLERS: dict[str, dict[str, str]] = {
    "echo_question": agent_files(ECHO_AGENT, name="echo"),
    "exception_with_question": agent_files(source("exception_with_question"), name="exc"),
    "exit_code_and_stderr": agent_files(source("exit_code_and_stderr"), name="exit"),
    "file_name_smuggling": agent_files(source("file_name_smuggling"), name="files"),
    "fake_result_line": agent_files(source("fake_result_line"), name="fake"),
    "setup_fails": agent_files(SETUP_FAILS, name="nostart", setup="agent:setup"),
}


class Transcript:
    """Everything a student received: status lines, headers, bodies, decoded cookies."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.chunks: list[tuple[str, bytes]] = []

    def add(self, label: str, response: TestResponse) -> TestResponse:
        head = f"{response.status}\n" + "".join(f"{k}: {v}\n" for k, v in response.headers.items())
        self.chunks.append((label, head.encode() + response.get_data()))
        for header in response.headers.getlist("Set-Cookie"):
            cookie: SimpleCookie = SimpleCookie()
            cookie.load(header)
            for morsel in cookie.values():
                self.chunks.append((f"{label} cookie", self._decode_cookie(morsel.value)))
        return response

    def _decode_cookie(self, value: str) -> bytes:
        serializer = self.app.session_interface.get_signing_serializer(self.app)  # type: ignore[attr-defined]
        try:
            data: Any = serializer.loads(value)
        except Exception:
            return value.encode()
        return repr(data).encode()

    def leaks(self) -> list[str]:
        found = []
        for label, data in self.chunks:
            text = data.decode("utf-8", errors="replace").lower()
            for fragment in SECRET_FRAGMENTS:
                if fragment.lower() in text:
                    found.append(f"{label}: {fragment!r}")
        return found


def csrf_token(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "no CSRF token in the page"
    return match.group(1)


def test_no_student_visible_byte_carries_hidden_case_content(
    app: Flask,
    client: FlaskClient,
    make_user: Callable[..., Account],
    engine: Engine,
    run_worker_burst: Callable[[], None],
) -> None:
    """Smuggling agents are graded; no API, page, error, header or cookie reveals a case."""
    seen = Transcript(app)
    students = [make_user(Role.STUDENT, "mallory"), make_user(Role.STUDENT, "trudy")]
    owners: dict[str, Account] = {}
    for student in students:
        assert seen.add("bad upload", upload(client, student, b"junk", "j.bin")).status_code == 400
    for index, (name, files) in enumerate(SMUGGLERS.items()):
        owner = students[index % 2]
        response = seen.add(f"upload {name}", upload(client, owner, make_zip(files)))
        assert response.status_code == 202, response.get_data(as_text=True)
        owners[response.get_json()["id"]] = owner
    run_worker_burst()

    # The smuggling happened: answers recorded for instructors do hold the questions.
    with Session(engine) as session:
        echo_id = next(sid for sid, _ in zip(owners, SMUGGLERS, strict=True))
        row = get_submission(session=session, submission_id=echo_id)
        assert row is not None and row.current_grading_id is not None
        records = eval_records(session=session, grading_id=row.current_grading_id)
        assert any("heron" in str(record.answer) for record in records)
    statuses = {sid: submission_row(engine, sid).status for sid in owners}
    assert sorted(statuses.values()) == sorted(["graded"] * 5 + ["failed"])

    ids = list(owners)
    for student in students:
        headers = student.headers
        seen.add("list", client.get("/api/submissions", headers=headers))
        seen.add("me", client.get("/api/me", headers=headers))
        for sid in ids:
            response = seen.add("detail", client.get(f"/api/submissions/{sid}", headers=headers))
            assert response.status_code == (200 if owners[sid] is student else 404)
            seen.add(
                "instructor", client.get(f"/api/instructor/submissions/{sid}", headers=headers)
            )
        codes = [
            seen.add(
                "quota", upload(client, student, make_zip(honest_agent(salt=str(n))))
            ).status_code
            for n in range(2)
        ]  # trudy's failed run freed a slot; then both are over quota
        assert codes[-1] == 429

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
        listing = seen.add("list page", browser.get("/submissions"))
        assert listing.status_code == 200
        for sid in ids:
            page = seen.add("feedback page", browser.get(f"/submissions/{sid}"))
            assert page.status_code == (200 if owners[sid] is student else 404)
            if owners[sid] is student and statuses[sid] == SubmissionStatus.GRADED:
                assert "Certificate:" in page.get_data(as_text=True)
            seen.add("poll", browser.get(f"/api/submissions/{sid}"))
        # Comparisons of the student's own graded submissions (API and page), and of another
        # student's (404): counts only.
        own = [sid for sid in ids if owners[sid] is student and statuses[sid] == "graded"]
        assert len(own) >= 2
        for baseline in own:
            for candidate in own:
                query = {"baseline": baseline, "candidate": candidate}
                compared = seen.add(
                    "compare", client.get("/api/compare", headers=headers, query_string=query)
                )
                assert compared.status_code == 200, compared.get_json()
                page = seen.add("compare page", browser.get("/compare", query_string=query))
                assert page.status_code == 200
        stranger = next(sid for sid in ids if owners[sid] is not student)
        query = {"baseline": own[0], "candidate": stranger}
        assert (
            seen.add(
                "compare other's", client.get("/api/compare", headers=headers, query_string=query)
            ).status_code
            == 404
        )
        seen.add("compare page other's", browser.get("/compare", query_string=query))
        form = {
            "csrf_token": csrf_token(listing.get_data(as_text=True)),
            "package": (io.BytesIO(b"junk"), "junk.zip"),
        }
        assert seen.add("page upload", browser.post("/submissions", data=form)).status_code == 303
        assert "Upload refused" in seen.add("flash", browser.get("/submissions")).get_data(
            as_text=True
        )
    seen.add("healthz", client.get("/healthz"))
    seen.add("metrics", client.get("/metrics"))
    seen.add("not found", client.get("/no/such/page"))

    assert len(seen.chunks) > 60
    assert seen.leaks() == []

    # Control: the same search does find the fragments in what instructors may see.
    instructor = make_user(Role.INSTRUCTOR, "staff")
    control = Transcript(app)
    for sid in ids:
        control.add(
            "instructor",
            client.get(f"/api/instructor/submissions/{sid}", headers=instructor.headers),
        )
    own = [sid for sid in ids if statuses[sid] == SubmissionStatus.GRADED]
    control.add(
        "instructor compare",
        client.get(
            "/api/instructor/compare",
            headers=instructor.headers,
            query_string={"baseline": own[0], "candidate": own[1]},
        ),
    )
    assert any("heron" in leak for leak in control.leaks())
    assert any(leak.startswith("instructor compare") for leak in control.leaks())  # slices
    failed = [sid for sid, status in statuses.items() if status == SubmissionStatus.FAILED]
    reason = submission_row(engine, failed[0]).failure_reason
    assert reason is not None and "setup exploded" in reason
