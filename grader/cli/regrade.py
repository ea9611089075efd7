"""``grader regrade``: regrade from recorded answers (or rerun agents) from the command line.

Reads :class:`~grader.settings.Settings` like ``grader serve``; the run is recorded under the
instructor named by ``--as``, exactly as if started from the console.
"""

from __future__ import annotations

import json

import click

from grader.db.archive_store import open_archive_store
from grader.db.engine import session_scope
from grader.db.tables import Role
from grader.db.users import get_user_by_name
from grader.instructor import console, regrades

from .helpers import fail, load_cases_or_fail, migrated_engine, read_settings


@click.command()
@click.option(
    "--from-answers",
    "mode",
    flag_value="answers",
    default=True,
    help="Re-apply the current case set to recorded answers (the default).",
)
@click.option(
    "--rerun", "mode", flag_value="rerun", help="Queue the agents to run again in the sandbox."
)
@click.option(
    "--as", "actor_name", required=True, help="The instructor the regrade is recorded under."
)
@click.option(
    "--submission",
    "submission_ids",
    multiple=True,
    help="Only these submissions (repeatable); default: every graded one on another version.",
)
@click.option(
    "--include-up-to-date",
    is_flag=True,
    help="From answers: also regrade results already on the current case-set version.",
)
@click.option("--dry-run", is_flag=True, help="From answers: show the changes, write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def regrade(
    mode: str,
    actor_name: str,
    submission_ids: tuple[str, ...],
    include_up_to_date: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Regrade submissions against the current case set; old results are kept as versions."""
    settings = read_settings()
    case_set = load_cases_or_fail(settings.cases_dir)
    engine = migrated_engine(settings)
    with session_scope(engine) as session:
        actor = get_user_by_name(session=session, name=actor_name)
        if actor is None or actor.role != Role.INSTRUCTOR.value:
            fail(f"no instructor named {actor_name!r}")
        if mode == "answers":
            result = regrades.regrade_from_answers(
                session=session,
                case_set=case_set,
                actor=actor,
                submission_ids=list(submission_ids) or None,
                include_up_to_date=include_up_to_date,
                dry_run=dry_run,
            )
            body = result.as_dict()
        else:
            ids = (
                list(submission_ids)
                or console.standing(session=session, version=case_set.version).outdated
            )
            plan = regrades.start_rerun(
                session=session,
                actor=actor,
                case_set_version=case_set.version,
                submission_ids=ids,
                archive_exists=open_archive_store(
                    settings.storage_url,
                    storage_dir=settings.storage_dir,
                    database_url=settings.database_url,
                    engine=engine,
                ).exists,
            )
            body = plan.as_dict()
    if mode == "rerun":
        from redis import Redis

        from grader.worker.enqueue import enqueue_grading, make_queue

        queue = make_queue(settings, Redis.from_url(settings.redis_url))
        for submission_id, job_id in plan.jobs:
            enqueue_grading(queue, submission_id, job_id, settings)
    if as_json:
        click.echo(json.dumps(body))
        return
    if mode == "rerun":
        click.echo(
            f"queued {len(body['queued'])} submissions to run again (regrade #{body['run_id']})"
        )
        return
    verb = "would regrade" if dry_run else "regraded"
    click.echo(
        f"{verb} {body['regraded']} submissions on case set {body['case_set_version']} "
        f"({body['up_to_date']} already up to date); "
        f"{body['decisions_changed']} decisions changed"
    )
    for change in body["changes"]:
        if change["decision_changed"]:
            click.echo(
                f"  {change['student']} {change['submission_id']}: "
                f"{change['old_decision']} -> {change['new_decision']}"
            )
