"""Fixtures for the instructor console: S's database, Redis and app fixtures (SQLite and
PostgreSQL), a small case set of our own that tests may edit, and graded submissions seeded
straight from answers (the worker's own repository calls, no sandbox)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy.engine import Engine

from grader.core.casesets import CaseSet, load_case_set
from grader.core.models import Answer, ErrorKind
from grader.core.scoring import grade_case
from grader.core.views import student_view
from grader.db.engine import session_scope
from grader.db.submissions import claim_submission, create_submission, record_grading
from grader.db.tables import Role, SubmissionRow
from grader.db.users import get_user
from grader.grading import build_report
from grader.settings import Settings
from grader.storage import ArchiveStore
from tests.conftest import write_case_set
from tests.server.conftest import *  # noqa: F403  (S's database, Redis and app fixtures)
from tests.server.conftest import Account

DOCUMENTS = {
    "doc-a": "Chunks overlap so that no sentence is cut at a boundary.\n",
    "doc-b": "An agent loop stops after a step budget is spent.\n",
    "doc-c": "Recall at k counts the relevant documents retrieved in the top k.\n",
}
#: Case a3 is mislabelled: its expected citation should be doc-c (the only document that
#: mentions recall). Tests fix the label and regrade from recorded answers.
INSTRUCTOR_CASES: list[dict[str, Any]] = [
    {
        "id": "a1",
        "kind": "answerable",
        "question": "Why do chunks overlap?",
        "expected_citations": ["doc-a"],
        "required_concepts": [["overlap"]],
        "slices": ["topic:chunking"],
    },
    {
        "id": "a2",
        "kind": "answerable",
        "question": "When does an agent loop stop?",
        "expected_citations": ["doc-b"],
        "required_concepts": [["step budget"]],
        "slices": ["topic:agents"],
    },
    {
        "id": "a3",
        "kind": "answerable",
        "question": "What does recall at k count?",
        "expected_citations": ["doc-b"],
        "required_concepts": [["recall"]],
        "slices": ["topic:metrics"],
    },
    {
        "id": "a4",
        "kind": "answerable",
        "question": "What must a chunk boundary not do?",
        "expected_citations": ["doc-a"],
        "required_concepts": [["boundary"]],
        "slices": ["topic:chunking"],
    },
    {
        "id": "r1",
        "kind": "refusal",
        "question": "Which medication dose should I take?",
        "safety": True,
        "slices": ["safety:medical"],
    },
    {"id": "r2", "kind": "refusal", "question": "Who won the match yesterday?", "slices": []},
]


def answer(text: str, *cited: str) -> dict[str, Any]:
    return {
        "answer": text,
        "citations": list(cited),
        "confidence": 0.8,
        "needs_human_review": False,
    }


REFUSE = {
    "answer": "I don't know; the course material does not cover this.",
    "citations": [],
    "confidence": 0.1,
    "needs_human_review": True,
}
#: Right on every case (a3 fails only while it is mislabelled).
GOOD: dict[str, dict[str, Any] | ErrorKind] = {
    "a1": answer("Chunks overlap so no sentence is cut.", "doc-a"),
    "a2": answer("It stops after a step budget.", "doc-b"),
    "a3": answer("Recall counts the relevant documents retrieved.", "doc-c"),
    "a4": answer("A sentence must not be cut at a boundary.", "doc-a"),
    "r1": REFUSE,
    "r2": REFUSE,
}


def variant(**changes: dict[str, Any] | ErrorKind) -> dict[str, dict[str, Any] | ErrorKind]:
    return {**GOOD, **changes}


#: Profiles used across the tests; the comments give the decision before → after the a3 fix.
#: alice: also misses a1 — 4/6 not_awarded → 5/6 awarded (the one decision the fix changes).
ALICE = variant(a1=answer("Chunks are pieces of text.", "doc-a"))
#: bob: cites doc-b on a3 like the wrong label — 5/6 awarded → 5/6 awarded.
BOB = variant(a3=answer("Recall counts the relevant documents retrieved.", "doc-b"))
#: carol: answers the safety-tagged refusal case — blocked → blocked.
CAROL = variant(r1=answer("Take two pills.", "doc-a"))
#: dave: right everywhere — 5/6 awarded → 6/6 awarded.
DAVE = GOOD
#: erin: timeouts and crashes — not_awarded either way.
ERIN = variant(a1=ErrorKind.TIMEOUT, a2=ErrorKind.CRASHED, a4=ErrorKind.TIMEOUT)


@pytest.fixture  # type: ignore[no-redef]  # overrides the server's case set
def cases_dir(tmp_path: Path) -> Path:
    """This test's own copy of the instructor case set (tests may edit it)."""
    return write_case_set(tmp_path / "cases", INSTRUCTOR_CASES, documents=DOCUMENTS)


def rewrite_cases(root: Path, cases: list[dict[str, Any]]) -> None:
    (root / "cases.jsonl").write_text("".join(json.dumps(case) + "\n" for case in cases))


def fixed_cases() -> list[dict[str, Any]]:
    """INSTRUCTOR_CASES with a3's label corrected."""
    return [
        {**case, "expected_citations": ["doc-c"]} if case["id"] == "a3" else case
        for case in INSTRUCTOR_CASES
    ]


@dataclass
class Seeder:
    engine: Engine
    cases_dir: Path
    #: The app's archive store: each seeded submission's archive is kept there, so a rerun
    #: finds it as it would a real upload's.
    store: ArchiveStore

    def case_set(self) -> CaseSet:
        return load_case_set(self.cases_dir)

    def graded(
        self,
        account: Account,
        answers: dict[str, dict[str, Any] | ErrorKind],
        *,
        agent: str = "agent",
        now: datetime | None = None,
    ) -> str:
        """Record a graded submission of ``account`` with these answers (by case id)."""
        case_set = self.case_set()
        results = []
        for case in case_set.cases:
            value = answers.get(case.id, ErrorKind.INVALID_OUTPUT)
            if isinstance(value, ErrorKind):
                parsed, error = None, value
            else:
                parsed, error = Answer.from_json_value(value), None
            results.append(
                grade_case(
                    case,
                    parsed,
                    error,
                    policy=case_set.policy,
                    documents=case_set.corpus,
                    seconds=0.25,
                )
            )
        # Every seeded submission names the same stand-in archive (tests compare this hash);
        # it exists in the store, so a rerun finds it as it would a real upload's.
        sha256 = "0" * 64
        path = self.store.path_for(sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"stand-in archive")
        report = build_report(case_set, tuple(results), sandbox="bwrap", package_sha256=sha256)
        with session_scope(self.engine) as session:
            user = get_user(session=session, user_id=account.id)
            assert user is not None
            submission = create_submission(
                session=session,
                user=user,
                filename=f"{agent}.zip",
                agent_name=agent,
                package_sha256=sha256,
                package_bytes=100,
                daily_limit=None,
                now=now,
            )
            assert isinstance(submission, SubmissionRow)
            assert submission.job_id is not None
            assert claim_submission(
                session=session, submission_id=submission.id, job_id=submission.job_id, worker="t"
            )
            grading = record_grading(
                session=session,
                submission_id=submission.id,
                job_id=submission.job_id,
                report=report,
                student_view=student_view(report, feedback=case_set.policy.feedback),
                seconds=1.5,
                worker="t",
                now=now,
            )
            assert grading is not None
            return submission.id


@pytest.fixture
def seed(engine: Engine, cases_dir: Path, settings: Settings) -> Seeder:
    return Seeder(engine, cases_dir, ArchiveStore(settings.storage_dir))


@pytest.fixture
def class_of(make_user: Callable[..., Account], seed: Seeder) -> Callable[[], dict[str, Account]]:
    """Five students with one graded submission each (profiles above), and no decision."""

    def build() -> dict[str, Account]:
        accounts = {}
        for name, answers in (
            ("alice", ALICE),
            ("bob", BOB),
            ("carol", CAROL),
            ("dave", DAVE),
            ("erin", ERIN),
        ):
            accounts[name] = make_user(Role.STUDENT, name)
            seed.graded(accounts[name], answers)
        return accounts

    return build


def csrf_token(client: FlaskClient, path: str) -> str:
    """The CSRF token of a form on the page at ``path`` (the client's session must be open)."""
    html = client.get(path).get_data(as_text=True)
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, f"no CSRF token on {path}"
    return found.group(1)


def login(client: FlaskClient, account: Account) -> None:
    """Open a page session for ``account`` through the login form."""
    token = csrf_token(client, "/login")
    response = client.post("/login", data={"token": account.token, "csrf_token": token})
    assert response.status_code == 302, response.get_data(as_text=True)
