"""What every ``grader`` command shares: exit statuses, the one-line failure, settings, sandbox.

An expected failure (bad input, bad settings, an unusable sandbox) ends with one line on
stderr, prefixed ``grader:``, and a non-zero status; tracebacks are for bugs only.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeVar

import click
from pydantic import ValidationError

from grader.audit.report import MAX_ANSWERABLE_SHARE
from grader.core.casesets import CaseSet, load_case_set
from grader.exceptions import GraderError, SandboxUnavailable
from grader.sandbox import SANDBOX_NAMES, Sandbox, make_sandbox, pick_sandbox
from grader.settings import Settings

FC = TypeVar("FC", bound=Callable[..., object])

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from grader.core.models import GradeReport
    from grader.gateway.upstream import UpstreamConfig

#: Bad input: a package, a case set, an option, the settings.
EXIT_BAD_INPUT = 2
#: The requested sandbox cannot run here (or the worker's sandbox cannot).
EXIT_SANDBOX = 3
#: ``practice publish``: the leak check refused the public set.
EXIT_LEAK_REFUSED = 4
#: ``check-cases`` and ``practice publish``: the case set is valid but its evaluator audit
#: (DESIGN §9) fails — a canary agent that deserves zero scores on it.
EXIT_AUDIT_FAILED = 5
#: ``grader audit``: a canary scores; ``grader sandbox doctor``: the Docker sandbox is unusable.
#: (Older than the statuses above, and kept: scripts test for 1.)
EXIT_CHECK_FAILED = 1

UNSANDBOXED_WARNING = (
    "grader: WARNING: --sandbox none runs the agent UNSANDBOXED with your own privileges; "
    "use it only for code you trust"
)
FALLBACK_WARNING = (
    "grader: WARNING: bubblewrap is not usable here ({reason}). Your agent will run UNSANDBOXED, "
    "with your own privileges, files and network. The practice cases are public, so nothing "
    "leaks, but only run code you trust this way; install bubblewrap to sandbox it."
)


#: ``--max-share``, shared by ``check-cases`` and ``audit``: they run the same audit.
max_share_option = click.option(
    "--max-share",
    type=click.FloatRange(0, 1),
    default=MAX_ANSWERABLE_SHARE,
    show_default=True,
    help="Largest share of answerable cases a canary may pass.",
)


def sandbox_option(auto_means: str) -> Callable[[FC], FC]:
    """``--sandbox auto|<registered name>``; what ``auto`` means differs by command."""
    return click.option(
        "--sandbox",
        "sandbox_name",
        type=click.Choice(["auto", *SANDBOX_NAMES]),
        default="auto",
        show_default=True,
        help=f"auto = {auto_means}.",
    )


#: ``--model-upstream URL`` on ``grade`` and ``practice run`` (else GRADER_MODEL_UPSTREAM_URL).
model_upstream_option = click.option(
    "--model-upstream",
    "model_upstream",
    metavar="URL",
    default=None,
    help="OpenAI-compatible base URL the model gateway forwards to (e.g. "
    "http://127.0.0.1:8400/v1); default GRADER_MODEL_UPSTREAM_URL.",
)


def fail(message: str, status: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``message`` as one line on stderr and exit with ``status``."""
    click.echo(f"grader: {' '.join(message.split())}", err=True)
    sys.exit(status)


def note(message: str) -> None:
    """A line for the person at the terminal (stderr, so --json output stays clean)."""
    click.echo(message, err=True)


def read_settings() -> Settings:
    """The settings from the environment, or one line naming each bad variable."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"GRADER_{'_'.join(str(part) for part in error['loc']).upper()}: {error['msg']}"
            for error in exc.errors()
        )
        fail(f"bad configuration: {problems}")


def migrated_engine(settings: Settings) -> Engine:
    """The database engine, its schema brought to the latest migration; bad URLs as one line."""
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from grader.db.engine import make_engine
    from grader.db.migrate import upgrade_database

    try:
        engine = make_engine(settings.database_url)
    except (ArgumentError, ValueError) as exc:
        fail(f"bad configuration: GRADER_DATABASE_URL: {exc}")
    try:
        upgrade_database(engine)
    except SQLAlchemyError as exc:
        # The driver's first line says what is wrong (no such host, refused, no such file).
        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        fail(f"database {engine.url.render_as_string(hide_password=True)}: {first}")
    return engine


def setup_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("GRADER_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def choose_sandbox(name: str, *, unsandboxed_fallback: bool = False) -> Sandbox:
    """The sandbox named by ``--sandbox``; what ``auto`` means depends on the cases at stake.

    ``grader grade`` (``unsandboxed_fallback=False``) may grade hidden cases: ``auto`` prefers
    Docker, then bubblewrap, and never falls back to none. ``grader practice run`` grades public
    cases only, so nothing can leak: ``auto`` uses bubblewrap when usable and otherwise runs the
    agent unsandboxed after a loud warning, so that a student without bubblewrap can practise.
    """
    if name != "auto":
        sandbox = make_sandbox(name)
        sandbox.check()
        if not sandbox.isolating:
            note(UNSANDBOXED_WARNING)
        return sandbox
    if not unsandboxed_fallback:
        sandbox, skipped = pick_sandbox()
        if skipped:
            note(f"grader: using the {sandbox.name} sandbox ({'; '.join(skipped)})")
        return sandbox
    try:
        sandbox = make_sandbox("bwrap")
        sandbox.check()
    except SandboxUnavailable as exc:
        note(FALLBACK_WARNING.format(reason=str(exc).rstrip(".")))
        return make_sandbox("none")
    note("grader: grading in the bubblewrap sandbox")
    return sandbox


def choose_sandbox_or_fail(name: str, *, unsandboxed_fallback: bool = False) -> Sandbox:
    """:func:`choose_sandbox`, or one line and exit status 3."""
    try:
        return choose_sandbox(name, unsandboxed_fallback=unsandboxed_fallback)
    except GraderError as exc:
        fail(str(exc), EXIT_SANDBOX)


def load_cases_or_fail(path: Path) -> CaseSet:
    try:
        return load_case_set(path)
    except GraderError as exc:
        fail(str(exc))


def model_settings(case_set: CaseSet, url: str | None) -> tuple[UpstreamConfig | None, Path | None]:
    """The upstream and cache folder for a set whose policy names models (settings read only
    then); ``url`` (``--model-upstream``) replaces GRADER_MODEL_UPSTREAM_URL."""
    from grader.gateway.upstream import UpstreamConfig

    if not case_set.policy.models:
        return None, None
    settings = read_settings()
    chosen = url if url is not None else settings.model_upstream_url
    if chosen and not chosen.startswith(("http://", "https://")):
        fail(f"--model-upstream {chosen!r}: not an http:// or https:// URL")
    key = settings.model_upstream_key.get_secret_value()
    return (UpstreamConfig(chosen, key) if chosen else None), settings.model_cache_dir


def grade_package_path(
    package: Path,
    case_set: CaseSet,
    sandbox: Sandbox,
    *,
    label: str = "cli",
    model_upstream: str | None = None,
) -> GradeReport:
    """Prepare a package (folder or archive) in a temporary folder and grade it."""
    from grader.grading import grade_agent
    from grader.packages import prepare_package

    upstream, cache_dir = model_settings(case_set, model_upstream)

    with tempfile.TemporaryDirectory(prefix="grader-package-") as workdir:
        prepared = prepare_package(package, Path(workdir))
        return grade_agent(
            prepared.root,
            entrypoint=prepared.manifest.entrypoint,
            setup=prepared.manifest.setup,
            case_set=case_set,
            sandbox=sandbox,
            label=label,
            package_sha256=prepared.sha256,
            model_upstream=upstream,
            model_cache_dir=cache_dir,
        )


def grade_package_or_fail(
    package: Path,
    case_set: CaseSet,
    sandbox: Sandbox,
    *,
    label: str = "cli",
    model_upstream: str | None = None,
) -> GradeReport:
    """:func:`grade_package_path`, or one line and exit status 2 (a bad package)."""
    try:
        return grade_package_path(
            package, case_set, sandbox, label=label, model_upstream=model_upstream
        )
    except GraderError as exc:
        fail(str(exc))
