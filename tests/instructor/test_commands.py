"""``grader regrade`` from the command line, against the same databases as the server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner
from redis import Redis

from grader.cli.regrade import regrade
from grader.settings import Settings
from grader.worker.enqueue import make_queue
from tests.instructor.conftest import fixed_cases, rewrite_cases
from tests.server.conftest import Account


def env_for(settings: Settings) -> dict[str, str]:
    return {
        "GRADER_DATABASE_URL": settings.database_url,
        "GRADER_REDIS_URL": settings.redis_url,
        "GRADER_CASES_DIR": str(settings.cases_dir),
        "GRADER_QUEUE_NAME": settings.queue_name,
        "GRADER_STORAGE_DIR": str(settings.storage_dir),
    }


def test_regrade_from_answers_on_the_command_line(
    settings: Settings,
    instructor: Account,
    cases_dir: Path,
    class_of: Callable[[], dict[str, Account]],
) -> None:
    """A dry run lists the one changed decision and writes nothing; the real run regrades all
    five; an unknown instructor is refused with one line and status 2."""
    class_of()
    rewrite_cases(cases_dir, fixed_cases())
    runner = CliRunner()
    env = env_for(settings)
    preview = runner.invoke(regrade, ["--as", "professor", "--dry-run", "--json"], env=env)
    assert preview.exit_code == 0, preview.output
    body = json.loads(preview.output)
    assert body["dry_run"] and body["regraded"] == 5 and body["decisions_changed"] == 1
    done = runner.invoke(regrade, ["--from-answers", "--as", "professor"], env=env)
    assert done.exit_code == 0, done.output
    assert "regraded 5 submissions" in done.output and "not_awarded -> awarded" in done.output
    again = runner.invoke(regrade, ["--as", "professor", "--json"], env=env)
    assert json.loads(again.output)["up_to_date"] == 5
    nobody = runner.invoke(regrade, ["--as", "alice"], env=env)
    assert nobody.exit_code == 2 and "no instructor named 'alice'" in nobody.output


def test_rerun_on_the_command_line_queues_outdated_submissions(
    settings: Settings,
    redis_client: Redis,
    instructor: Account,
    cases_dir: Path,
    class_of: Callable[[], dict[str, Account]],
) -> None:
    """``--rerun`` re-queues every submission graded on an older case-set version."""
    class_of()
    rewrite_cases(cases_dir, fixed_cases())
    result = CliRunner().invoke(
        regrade, ["--rerun", "--as", "professor", "--json"], env=env_for(settings)
    )
    assert result.exit_code == 0, result.output
    queued = json.loads(result.output)["queued"]
    assert len(queued) == 5
    queue = make_queue(settings, redis_client)
    assert sorted(job.args[0] for job in queue.jobs) == sorted(queued)
