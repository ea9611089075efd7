"""``grader serve``, ``grader worker``, ``grader users``, ``grader reconcile`` and ``grader storage``.

Each reads :class:`~grader.settings.Settings` from the environment once and brings the database
schema to the latest migration before doing anything else.
"""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path
from typing import Any

import click

from grader.db.engine import session_scope
from grader.db.tables import Role
from grader.db.users import create_user, get_user_by_name, list_users, rotate_token
from grader.exceptions import GraderError, UserExists

from .helpers import EXIT_SANDBOX, fail, migrated_engine, read_settings, setup_logging

ROLES = [role.value for role in Role]


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option(
    "--workers",
    default=None,
    type=int,
    help="server processes [default: one per CPU]",
)
@click.option("--threads", default=4, show_default=True, type=int, help="threads per process")
def serve(host: str, port: int, workers: int | None, threads: int) -> None:
    """Run the web server (gunicorn processes serving with waitress) after migrating."""
    from grader.server.wsgi import GraderApplication

    setup_logging()
    settings = read_settings()
    engine = migrated_engine(settings)
    engine.dispose()  # each server process opens its own connections after the fork
    options: dict[str, Any] = {
        "bind": f"{host}:{port}",
        # waitress answers slow clients from its I/O loop, so threads only ever run complete
        # requests: one process per core keeps both cores busy without oversubscribing them.
        "workers": workers or os.cpu_count() or 1,
        "threads": threads,
        "worker_class": "grader.server.wsgi.WaitressWorker",
        "timeout": 60,
        "graceful_timeout": 20,
        "errorlog": "-",
        "loglevel": "info",
        "proc_name": "grader-serve",
        # gunicorn's control socket is one fixed path per user; several servers would share it.
        "control_socket_disable": True,
    }
    GraderApplication(settings, options).run()


@click.command()
@click.option("--burst", is_flag=True, help="Grade what is queued, then exit.")
@click.option("--name", default=None, help="Worker name (default: rq's).")
def worker(burst: bool, name: str | None) -> None:
    """Run an rq worker that grades submissions (and reconciles periodically)."""
    from grader.worker.process import run_worker

    setup_logging()
    settings = read_settings()
    try:
        run_worker(settings, burst=burst, name=name)
    except GraderError as exc:
        fail(str(exc), EXIT_SANDBOX)


@click.command("reconcile")
def reconcile_command() -> None:
    """Re-enqueue submissions whose job was lost (Redis flush, killed worker), once."""
    from redis import Redis

    from grader.worker.enqueue import make_queue
    from grader.worker.reconciler import reconcile

    setup_logging()
    settings = read_settings()
    engine = migrated_engine(settings)
    queue = make_queue(settings, Redis.from_url(settings.redis_url))
    report = reconcile(engine=engine, queue=queue, settings=settings)
    click.echo(
        f"reconciled: {len(report.enqueued)} queued enqueued, {len(report.requeued)} "
        f"abandoned re-queued, {len(report.abandoned)} failed after too many attempts"
    )


reconcile = reconcile_command


@click.group()
def users() -> None:
    """Manage accounts (tokens are printed once and stored hashed)."""


def _engine() -> Any:
    return migrated_engine(read_settings())


@users.command("add")
@click.argument("name")
@click.option("--role", type=click.Choice(ROLES), default=Role.STUDENT.value, show_default=True)
def users_add(name: str, role: str) -> None:
    """Create an account and print its token (shown only this once)."""
    name = name.strip()
    if not name or len(name) > 100:
        fail("a user name must have 1 to 100 characters")
    with session_scope(_engine()) as session:
        try:
            _user, token = create_user(session=session, name=name, role=Role(role))
        except UserExists:
            fail(f"user {name!r} already exists")
    click.echo(token)


@users.command("import")
@click.argument("roster", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def users_import(roster: Path) -> None:
    """Create the accounts of a CSV roster (name,role); print name,token for each new one."""
    rows: list[tuple[str, Role]] = []
    with roster.open(newline="", encoding="utf-8-sig") as handle:
        for number, record in enumerate(csv.reader(handle), start=1):
            if not record or not "".join(record).strip() or record[0].lstrip().startswith("#"):
                continue
            name = record[0].strip()
            role = (record[1].strip().lower() if len(record) > 1 else "") or "student"
            if number == 1 and name.lower() == "name":
                continue  # header
            if role not in ROLES:
                fail(f"{roster}:{number}: role must be one of {', '.join(ROLES)}, not {role!r}")
            if not name or len(name) > 100:
                fail(f"{roster}:{number}: a user name must have 1 to 100 characters")
            rows.append((name, Role(role)))
    created = skipped = 0
    writer = csv.writer(sys.stdout)
    with session_scope(_engine()) as session:
        for name, role in rows:
            try:
                _user, token = create_user(session=session, name=name, role=role)
            except UserExists:
                click.echo(f"grader: {name}: already exists, skipped", err=True)
                skipped += 1
                continue
            writer.writerow([name, token])
            created += 1
    click.echo(f"grader: {created} created, {skipped} skipped", err=True)


@users.command("list")
def users_list() -> None:
    """List accounts (never tokens)."""
    with session_scope(_engine()) as session:
        for user in list_users(session=session):
            state = "" if user.active else " (disabled)"
            click.echo(f"{user.name}\t{user.role}{state}")


@users.command("token")
@click.argument("name")
def users_token(name: str) -> None:
    """Replace NAME's token and print the new one (the old one stops working)."""
    with session_scope(_engine()) as session:
        user = get_user_by_name(session=session, name=name)
        if user is None:
            fail(f"no user {name!r}")
        token = rotate_token(session=session, user=user)
    click.echo(token)


@click.group()
def storage() -> None:
    """Manage the archive storage (GRADER_STORAGE_DIR)."""


@storage.command("gc")
@click.option("--dry-run", is_flag=True, help="Report what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def storage_gc(dry_run: bool, as_json: bool) -> None:
    """Remove archives no submission needs (retention: GRADER_ARCHIVE_RETENTION_DAYS, …)."""
    import json

    from grader.db.archive_store import open_archive_store
    from grader.storage_gc import collect_garbage

    settings = read_settings()
    engine = migrated_engine(settings)
    report = collect_garbage(
        engine=engine,
        store=open_archive_store(
            settings.storage_url,
            storage_dir=settings.storage_dir,
            database_url=settings.database_url,
            engine=engine,
        ),
        settings=settings,
        dry_run=dry_run,
    )
    click.echo(json.dumps(report.as_dict(), indent=2) if as_json else report.summary())
