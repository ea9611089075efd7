"""The ``grader`` command group and its two oldest commands, ``grade`` and ``check-cases``.

Every other command lives in a module of this package, one per command group, and is added to
``main`` explicitly at the end of this module (DESIGN §11).
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

from grader.audit.report import run_audit
from grader.core.model_usage import SummaryBounds
from grader.core.views import instructor_view, student_view

from .audit import audit as audit_command
from .compare import compare
from .helpers import (
    EXIT_AUDIT_FAILED,
    choose_sandbox_or_fail,
    fail,
    grade_package_or_fail,
    load_cases_or_fail,
    max_share_option,
    model_upstream_option,
    sandbox_option,
)
from .model import model
from .practice import practice
from .regrade import regrade
from .render import print_instructor_cases, print_student_view
from .sandbox import sandbox
from .server import reconcile, serve, storage, users, worker


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="grader")
def main() -> None:
    """Grade RAG agents against hidden case sets, in a sandbox."""


@main.command()
@click.argument("package", type=click.Path(path_type=Path))
@click.option(
    "--cases",
    "cases_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="The case set folder (cases.jsonl, policy.toml, corpus).",
)
@sandbox_option("docker when its engine and image are ready, else bwrap")
@click.option(
    "--view", type=click.Choice(["student", "instructor"]), default="student", show_default=True
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@model_upstream_option
def grade(
    package: Path,
    cases_dir: Path,
    sandbox_name: str,
    view: str,
    as_json: bool,
    model_upstream: str | None,
) -> None:
    """Grade PACKAGE (a folder, .zip or .tar.gz) against the case set in --cases."""
    case_set = load_cases_or_fail(cases_dir)
    sandbox = choose_sandbox_or_fail(sandbox_name)
    report = grade_package_or_fail(package, case_set, sandbox, model_upstream=model_upstream)
    data = (
        instructor_view(report, cases=case_set.by_id())
        if view == "instructor"
        else student_view(
            report,
            feedback=case_set.policy.feedback,
            buckets=case_set.policy.feedback_buckets,
            model_bounds=SummaryBounds.of(case_set.policy, len(report.results)),
        )
    )
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False))
        return
    console = Console()
    print_student_view(data, console)
    if view == "instructor":
        print_instructor_cases(data, console)


@main.command("check-cases")
@click.argument("cases_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--no-audit", is_flag=True, help="Only validate: skip the evaluator audit (DESIGN §9)."
)
@max_share_option
def check_cases(cases_dir: Path, as_json: bool, no_audit: bool, max_share: float) -> None:
    """Validate a case set, print its version and counts, and run the evaluator audit.

    Exit status 0 when the set is valid and its audit passes, 2 when it is invalid, 5 when it
    is valid but a canary agent that deserves zero scores on it (--no-audit skips the audit).
    """
    case_set = load_cases_or_fail(cases_dir)
    counts = case_set.counts()
    safety = sum(case.safety for case in case_set.cases)
    audit = None if no_audit else run_audit(case_set, max_share=max_share)
    data = {
        "version": case_set.version,
        "versions": case_set.versions.model_dump(mode="json"),
        "cases": len(case_set.cases),
        "by_kind": counts,
        "safety_cases": safety,
        "documents": len(case_set.corpus),
        "warnings": list(case_set.warnings),
        "audit": audit.as_dict() if audit else None,
    }
    if as_json:
        click.echo(json.dumps(data))
    else:
        click.echo(f"case set {cases_dir}: valid, version {case_set.version}")
        click.echo(
            f"{len(case_set.cases)} cases: {counts['answerable']} answerable, "
            f"{counts['refusal']} refusal, {safety} safety-tagged; {len(case_set.corpus)} documents"
        )
        for warning in case_set.warnings:
            click.echo(f"warning: {warning}")
        if audit is not None:
            # A failing audit's verdict is the one line on stderr below; the canaries go here.
            click.echo(audit.verdict() if audit.ok else "evaluator audit, canaries that score:")
            for line in audit.failures():
                click.echo(f"  {line}")
    if audit is not None and not audit.ok:
        fail(audit.verdict(), EXIT_AUDIT_FAILED)


for command in (
    sandbox,
    practice,
    serve,
    worker,
    users,
    reconcile,
    storage,
    audit_command,
    regrade,
    compare,
    model,
):
    main.add_command(command)
