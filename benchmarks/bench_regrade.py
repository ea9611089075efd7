"""How long a regrade from recorded answers takes (issue: 1 000 submissions × 20 cases < 10 s).

Method: a copy of the demo private case set cut to its first 20 cases (real corpus, so
claim_support tokenises real documents) is used to grade ``--submissions`` synthetic
submissions, one per student, whose answers are drawn with a fixed seed: mostly right, some
citing an extra or a wrong document, some missing a concept, some refusing or answering a
refusal case, some timeouts. They are written through the worker's own repository call
(:func:`grader.db.repository.add_grading`), so the database holds exactly what production
holds: one result set and 20 eval records per submission. Then an instructor "fixes a label"
(one case's allowed citations grow by the document many answers cite), and
:func:`grader.instructor.regrades.regrade_from_answers` is timed end to end in one
transaction, commit included: reading every current result set and its eval records, rebuilding
each answer, re-applying the gates and the policy, building the student view, inserting 1 000
new result sets and 20 000 eval records, moving 1 000 pointers and recording the run. Runs 2…N
regrade the same submissions again (``include_up_to_date``), the same amount of work.

    .venv/bin/python benchmarks/bench_regrade.py [--submissions 1000] [--runs 3]
        [--database-url postgresql+psycopg://postgres@127.0.0.1:5432/test]

With a PostgreSQL URL the tables live in a throw-away schema that is dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from rich.console import Console
from rich.table import Table
from sqlalchemy.engine import Engine

from grader.core.casesets import CaseSet, load_case_set
from grader.core.models import Answer, Case, CaseKind, ErrorKind
from grader.core.scoring import grade_case
from grader.core.text import TokenText
from grader.core.views import student_view
from grader.db.engine import make_engine, session_scope
from grader.db.migrate import upgrade_database
from grader.db.results import add_grading
from grader.db.submissions import new_id
from grader.db.tables import GradingTrigger, Role, SubmissionRow, SubmissionStatus
from grader.db.users import create_user, get_user_by_name
from grader.grading import build_report
from grader.instructor.regrades import regrade_from_answers

REPO = Path(__file__).resolve().parent.parent
CASES = 20
#: The case whose label the instructor fixes, and the document added to its allowed citations.
FIXED_CASE = "c01"
EXTRA_DOC = "evaluation"

REFUSE = {
    "answer": "I don't know; the course material does not cover this.",
    "citations": [],
    "confidence": 0.1,
    "needs_human_review": True,
}


def make_case_set(root: Path) -> Path:
    """The first 20 cases of the demo private set, with its policy and corpus."""
    target = root / "cases"
    shutil.copytree(REPO / "private_cases", target)
    lines = (target / "cases.jsonl").read_text().splitlines()[:CASES]
    (target / "cases.jsonl").write_text("\n".join(lines) + "\n")
    return target


def fix_label(root: Path) -> None:
    lines = []
    for line in (root / "cases.jsonl").read_text().splitlines():
        case = json.loads(line)
        if case["id"] == FIXED_CASE:
            case["allowed_citations"] = [*case["allowed_citations"], EXTRA_DOC]
        lines.append(json.dumps(case))
    (root / "cases.jsonl").write_text("\n".join(lines) + "\n")


def good_answer(case: Case, case_set: CaseSet) -> dict[str, Any]:
    """Cites the expected documents and quotes their sentences that hold the concepts: the
    sentence covering most concept groups, then one more if some group is still missing (a
    concise extractive answer, as claim_support v2 expects)."""
    sentences = [
        sentence
        for doc in case.expected_citations
        for sentence in re.split(r"(?<=[.!?])\s+|\n+", case_set.corpus[doc])
        if sentence.strip() and not sentence.startswith("#")
    ]

    def groups_in(sentence: str) -> set[int]:
        text = TokenText(sentence)
        return {i for i, group in enumerate(case.required_concepts) if text.found(group)}

    chosen: list[str] = []
    covered: set[int] = set()
    for _ in range(2):
        best = max(sentences, key=lambda sentence: len(groups_in(sentence) - covered))
        if not groups_in(best) - covered:
            break
        chosen.append(best)
        covered |= groups_in(best)
    return {
        "answer": " ".join(chosen) or "Something unrelated.",
        "citations": list(case.expected_citations),
        "confidence": 0.8,
        "needs_human_review": False,
        "retrieved": [*case.expected_citations, EXTRA_DOC],
        "context": list(case.expected_citations),
    }


def draw(case: Case, case_set: CaseSet, rng: random.Random) -> dict[str, Any] | ErrorKind:
    roll = rng.random()
    if roll < 0.03:
        return ErrorKind.TIMEOUT
    if case.kind is CaseKind.REFUSAL:
        return REFUSE if roll < 0.9 else good_answer(case_set.cases[0], case_set)
    answer = good_answer(case, case_set)
    if roll < 0.35:  # cites one more document (the label fix makes it allowed on FIXED_CASE)
        answer["citations"] = [*answer["citations"], EXTRA_DOC]
    elif roll < 0.45:  # misses a concept
        answer["answer"] = "Something unrelated."
    elif roll < 0.5:
        return REFUSE
    return answer


def seed(engine: Engine, case_set: CaseSet, submissions: int, *, rng: random.Random) -> None:
    """One student and one graded submission (20 eval records) per ``submissions``."""
    with session_scope(engine) as session:
        for number in range(submissions):
            user, _ = create_user(session=session, name=f"s{number:05d}", role=Role.STUDENT)
            results = []
            for case in case_set.cases:
                value = draw(case, case_set, rng)
                answer = None if isinstance(value, ErrorKind) else Answer.from_json_value(value)
                error = value if isinstance(value, ErrorKind) else None
                results.append(
                    grade_case(
                        case,
                        answer,
                        error,
                        policy=case_set.policy,
                        documents=case_set.corpus,
                        seconds=round(rng.uniform(0.05, 2.0), 3),
                    )
                )
            report = build_report(
                case_set, tuple(results), sandbox="docker", package_sha256="f" * 64
            )
            assert user.id is not None
            submission = SubmissionRow(
                id=new_id(),
                user_id=user.id,
                status=SubmissionStatus.GRADED.value,
                filename="agent.zip",
                agent_name="agent",
                package_sha256="f" * 64,
                package_bytes=1000,
            )
            session.add(submission)
            session.flush()
            grading = add_grading(
                session=session,
                submission_id=submission.id,
                report=report,
                student_view=student_view(report, feedback=case_set.policy.feedback),
                seconds=3.0,
                trigger=GradingTrigger.INITIAL,
            )
            submission.current_grading_id = grading.id
            session.add(submission)
        session.flush()


@contextmanager
def database(url: str | None, folder: Path) -> Iterator[Engine]:
    """A migrated, empty database: a SQLite file, or a private schema in ``url``."""
    if url is None or url.startswith("sqlite"):
        engine = make_engine(url or f"sqlite:///{folder / 'bench.db'}")
        upgrade_database(engine)
        yield engine
        engine.dispose()
        return
    schema = f"bench_regrade_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(url)
    with admin.begin() as connection:
        connection.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    separator = "&" if "?" in url else "?"
    engine = make_engine(f"{url}{separator}options=-csearch_path%3D{schema}")
    try:
        upgrade_database(engine)
        yield engine
    finally:
        engine.dispose()
        with admin.begin() as connection:
            connection.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def measure(engine: Engine, case_set: CaseSet, *, include_up_to_date: bool) -> dict[str, Any]:
    """One regrade from answers, timed from the first read to the commit."""
    started = time.perf_counter()
    with session_scope(engine) as session:
        actor = get_user_by_name(session=session, name="bench-instructor")
        assert actor is not None
        result = regrade_from_answers(
            session=session,
            case_set=case_set,
            actor=actor,
            include_up_to_date=include_up_to_date,
        )
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "regraded": len(result.changes),
        "changed": len(result.decisions_changed),
    }


def run(submissions: int, runs: int, url: str | None) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-regrade-") as tmp:
        folder = Path(tmp)
        root = make_case_set(folder)
        with database(url, folder) as engine:
            started = time.perf_counter()
            seed(engine, load_case_set(root), submissions, rng=random.Random(20261129))
            with session_scope(engine) as session:
                create_user(session=session, name="bench-instructor", role=Role.INSTRUCTOR)
            seeding = time.perf_counter() - started
            fix_label(root)
            fixed = load_case_set(root)
            results = [measure(engine, fixed, include_up_to_date=False)]
            for _ in range(runs - 1):
                results.append(measure(engine, fixed, include_up_to_date=True))
            for result in results:
                result["seeding"] = seeding
                result["backend"] = engine.url.get_backend_name()
            return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--database-url", default=None, help="default: a SQLite file in /tmp")
    args = parser.parse_args()
    results = run(args.submissions, args.runs, args.database_url)
    backend = results[0]["backend"]
    table = Table(
        title=f"regrade from answers: {args.submissions} submissions × {CASES} cases, {backend}"
    )
    for column in ("run", "regraded", "decisions changed", "seconds", "per submission"):
        table.add_column(column)
    for number, result in enumerate(results, start=1):
        table.add_row(
            str(number),
            str(result["regraded"]),
            str(result["changed"]),
            f"{result['seconds']:.2f}",
            f"{result['seconds'] / max(1, result['regraded']) * 1000:.2f} ms",
        )
    console = Console()
    console.print(table)
    median = statistics.median(result["seconds"] for result in results)
    console.print(f"median {median:.2f} s (seeding took {results[0]['seeding']:.1f} s, untimed)")


if __name__ == "__main__":
    main()
