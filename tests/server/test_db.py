"""Schema migrations and repository functions (grader/db) on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel

from grader.core.casesets import load_case_set
from grader.core.models import ErrorKind, GradeReport
from grader.core.views import student_view
from grader.db.engine import make_engine, session_scope
from grader.db.metrics import status_counts
from grader.db.migrate import current_revision, head_revision, upgrade_database
from grader.db.results import add_grading, eval_records, list_gradings, load_report
from grader.db.submissions import (
    claim_submission,
    get_submission,
    record_grading,
)
from grader.db.tables import GradingTrigger, Role, SubmissionRow, SubmissionStatus, UserRow
from grader.db.usage import LimitReached
from grader.db.users import create_user, find_user_by_token
from grader.exceptions import UserExists
from grader.grading import build_report, results_from_runs
from grader.sandbox.session import CaseRun
from tests.server.conftest import POSTGRES_URL, Account, insert_submissions_at_once

GOOD = {"answer": "Chunks overlap.", "citations": ["doc-plover"], "confidence": 0.8,
        "needs_human_review": False, "retrieved": ["doc-plover"], "context": ["doc-plover"]}  # fmt: skip


def test_migrations_create_exactly_the_model_tables(engine: Engine) -> None:
    """`alembic upgrade head` yields the schema of the SQLModel tables: no autogenerate diff."""
    assert current_revision(engine) == head_revision()
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, SQLModel.metadata) == []
    tables = set(sa.inspect(engine).get_table_names())
    assert {"users", "submissions", "gradings", "eval_records", "alembic_version"} <= tables


def test_concurrent_upgrades_of_a_fresh_database_do_not_collide(tmp_path: Path) -> None:
    """Several processes starting at once (here threads) migrate a new database exactly once."""
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    errors: list[BaseException] = []

    def upgrade() -> None:
        engine = make_engine(url)
        try:
            upgrade_database(engine)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            engine.dispose()

    threads = [threading.Thread(target=upgrade) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    engine = make_engine(url)
    assert current_revision(engine) == head_revision()
    with engine.connect() as connection:
        assert connection.execute(sa.text("PRAGMA journal_mode")).scalar() == "wal"
    engine.dispose()


def test_postgres_upgrade_of_a_fresh_schema_is_idempotent() -> None:
    """Upgrading a new PostgreSQL schema twice (under the advisory lock) is a no-op the second
    time."""
    schema = "grader_test_fresh_upgrade"
    admin = sa.create_engine(POSTGRES_URL)
    with admin.begin() as connection:
        connection.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    engine = make_engine(f"{POSTGRES_URL}?options=-csearch_path%3D{schema}")
    try:
        upgrade_database(engine)
        upgrade_database(engine)
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()
        with admin.begin() as connection:
            connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def test_tokens_are_stored_only_as_hashes(engine: Engine) -> None:
    """The database holds sha256(token), never the token; lookups find the right user."""
    with session_scope(engine) as session:
        _user, token = create_user(session=session, name="ann", role=Role.STUDENT)
    with Session(engine) as session:
        stored = session.exec(sa.select(UserRow.token_hash)).all()  # type: ignore[call-overload]
        assert [row[0] for row in stored] == [hashlib.sha256(token.encode()).hexdigest()]
        found = find_user_by_token(session=session, token=token)
        assert found is not None and found.name == "ann"
        assert find_user_by_token(session=session, token=token + "x") is None
        assert find_user_by_token(session=session, token="") is None
    with session_scope(engine) as session, pytest.raises(UserExists):
        create_user(session=session, name="ann", role=Role.INSTRUCTOR)


def test_quota_holds_under_concurrent_uploads(engine: Engine, student: Account) -> None:
    """Eight simultaneous inserts against a limit of 3 create exactly 3 submissions."""
    outcomes = insert_submissions_at_once(engine, student, 8, package_bytes=1, daily_limit=3)
    created = [o for o in outcomes if isinstance(o, SubmissionRow)]
    refused = [o for o in outcomes if isinstance(o, LimitReached)]
    assert len(created) == 3 and len(refused) == 5
    assert refused[0].limit == 3 and refused[0].next_slot_at is not None


def _report(cases_dir: Path) -> tuple[GradeReport, dict[str, object]]:
    case_set = load_case_set(cases_dir)
    runs = [
        CaseRun(case_set.cases[0].id, value=GOOD, seconds=0.25),
        CaseRun(case_set.cases[1].id, error=ErrorKind.TIMEOUT, seconds=3.0),
        CaseRun(case_set.cases[2].id, value={**GOOD, "answer": "It was 2-1."}, seconds=0.5),
    ]
    report = build_report(
        case_set, results_from_runs(case_set, runs), sandbox="bwrap", package_sha256="a" * 64
    )
    return report, student_view(report, feedback=case_set.policy.feedback)


def test_result_sets_round_trip_and_keep_earlier_versions(
    engine: Engine, student: Account, cases_dir: Path, submit: Callable[..., str]
) -> None:
    """A stored result set rebuilds the identical GradeReport; a regrade adds version 2 and
    leaves version 1 in place."""
    submission_id = submit(student)
    report, view = _report(cases_dir)
    with session_scope(engine) as session:
        first = add_grading(
            session=session,
            submission_id=submission_id,
            report=report,
            student_view=view,
            seconds=4.0,
            trigger=GradingTrigger.INITIAL,
        )
        second = add_grading(
            session=session,
            submission_id=submission_id,
            report=report,
            student_view=view,
            seconds=1.0,
            trigger=GradingTrigger.REGRADE,
        )
    assert (first.version, second.version) == (1, 2)
    with Session(engine) as session:
        assert first.id is not None
        rebuilt = load_report(session=session, grading_id=first.id)
        assert rebuilt == report
        assert [g.version for g in list_gradings(session=session, submission_id=submission_id)] == [
            1,
            2,
        ]
        records = eval_records(session=session, grading_id=first.id)
    assert [r.error_kind for r in records] == [None, "timeout", None]
    assert records[2].safety_failures  # answering the safety-tagged refusal case
    assert report.decision.decision.value == "blocked"


def test_recording_results_is_fenced_by_the_job_id(
    engine: Engine, student: Account, cases_dir: Path, submit: Callable[..., str]
) -> None:
    """Only the job holding the lease can write results; everything else writes nothing."""
    submission_id = submit(student)
    report, view = _report(cases_dir)
    with session_scope(engine) as session:
        row = get_submission(session=session, submission_id=submission_id)
        assert row is not None and row.job_id is not None
        job_id = row.job_id
        assert claim_submission(
            session=session, submission_id=submission_id, job_id=job_id, worker="w"
        )
        assert not claim_submission(
            session=session, submission_id=submission_id, job_id=job_id, worker="w"
        )
    with session_scope(engine) as session:
        lost = record_grading(
            session=session,
            submission_id=submission_id,
            job_id="intruder",
            report=report,
            student_view=view,
            seconds=1,
        )
        assert lost is None
        session.rollback()
    with session_scope(engine) as session:
        won = record_grading(
            session=session,
            submission_id=submission_id,
            job_id=job_id,
            report=report,
            student_view=view,
            seconds=1,
        )
        assert won is not None
    with Session(engine) as session:
        row = get_submission(session=session, submission_id=submission_id)
        assert row is not None and row.status == SubmissionStatus.GRADED
        assert row.current_grading_id == won.id
        assert len(list_gradings(session=session, submission_id=submission_id)) == 1
        counts = status_counts(session=session)
    assert counts[SubmissionStatus.GRADED] == 1 and counts[SubmissionStatus.QUEUED] == 0
