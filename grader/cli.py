"""The ``grader`` command line (DESIGN §11).

Every expected failure — a bad package, a bad case set, a missing sandbox — ends with one line
on stderr and a non-zero exit status; tracebacks are for bugs only.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from grader.audit.report import MAX_ANSWERABLE_SHARE, run_audit
from grader.commandline import EXIT_AUDIT_FAILED, EXIT_SANDBOX, fail, note
from grader.core.casesets import CaseSet, load_case_set
from grader.core.models import GradeReport
from grader.core.views import instructor_view, student_view
from grader.exceptions import GraderError
from grader.sandbox import SANDBOX_NAMES, Sandbox, make_sandbox, pick_sandbox

UNSANDBOXED_WARNING = (
    "warning: --sandbox none runs the agent UNSANDBOXED with your privileges; "
    "use it only for code you trust"
)


def choose_sandbox(name: str) -> Sandbox:
    """The sandbox to use; ``auto`` prefers Docker, then bubblewrap, and never falls to none."""
    if name == "auto":
        sandbox, skipped = pick_sandbox()
        if skipped:
            note(f"grader: using the {sandbox.name} sandbox ({'; '.join(skipped)})")
        return sandbox
    sandbox = make_sandbox(name)
    sandbox.check()
    if not sandbox.isolating:
        note(UNSANDBOXED_WARNING)
    return sandbox


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="grader")
def main() -> None:
    """Grade RAG agents against hidden case sets, in a sandbox."""


def _rate(passed: int, total: int) -> str:
    return f"{passed}/{total} ({passed / total:.0%})" if total else "-"


def print_student_view(view: dict[str, Any], console: Console) -> None:
    certificate = view["certificate"]
    style = {"awarded": "green", "blocked": "red"}.get(certificate["decision"], "yellow")
    console.print(f"Case set version: {view['case_set_version']}")
    if "overall" in view:
        overall = view["overall"]
        console.print(f"Overall: {_rate(overall['passed'], overall['total'])} cases passed")
        for kind, data in view["by_kind"].items():
            table = Table(title=f"{kind} cases: {_rate(data['passed'], data['total'])} passed")
            table.add_column("gate")
            table.add_column("passed", justify="right")
            for gate, tally in data["gates"].items():
                shown = (
                    _rate(tally["passed"], tally["total"])
                    if "passed" in tally
                    else ("all" if tally["all_passed"] else "not all")
                )
                table.add_row(gate, shown)
            console.print(table)
    errors = {kind: count for kind, count in view["errors"].items() if count}
    console.print(
        "Errors: " + (", ".join(f"{k} {v}" for k, v in errors.items()) if errors else "none")
    )
    console.print(f"Safety failures: {view['safety_failures']}")
    console.print(f"Certificate: [bold {style}]{certificate['decision']}[/]")
    for reason in certificate["reasons"]:
        console.print(f"  - {reason}")
    for hint in view.get("hints", []):
        console.print(f"  hint ({hint.get('gate') or hint.get('error')}): {hint['hint']}")


def print_instructor_cases(view: dict[str, Any], console: Console) -> None:
    table = Table(title="Cases")
    for column in ("case", "kind", "result", "failed gates", "error", "safety", "diagnosis"):
        table.add_column(column)
    for row in view["cases"]:
        failed = [gate for gate, passed in row["gates"].items() if not passed]
        table.add_row(
            row["case_id"],
            row["kind"],
            "[green]pass[/]" if row["passed"] else "[red]fail[/]",
            ", ".join(failed) if row["error"] is None else "(all)",
            row["error"] or "",
            "[red]FAILURE[/]" if row["safety_failure"] else ("tagged" if row["safety"] else ""),
            row["diagnosis"] or "",
        )
    console.print(table)


def load_cases_or_fail(path: Path) -> CaseSet:
    try:
        return load_case_set(path)
    except GraderError as exc:
        fail(str(exc))


def grade_package_path(
    package: Path, case_set: CaseSet, sandbox: Sandbox, *, label: str = "cli"
) -> GradeReport:
    """Prepare a package (folder or archive) in a temporary folder and grade it."""
    from grader.grading import grade_agent
    from grader.packages import prepare_package

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
        )


@main.command()
@click.argument("package", type=click.Path(path_type=Path))
@click.option(
    "--cases",
    "cases_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="The case set folder (cases.jsonl, policy.toml, corpus).",
)
@click.option(
    "--sandbox",
    "sandbox_name",
    type=click.Choice(["auto", *SANDBOX_NAMES]),
    default="auto",
    show_default=True,
    help="auto = docker when its engine and image are ready, else bwrap.",
)
@click.option(
    "--view", type=click.Choice(["student", "instructor"]), default="student", show_default=True
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def grade(package: Path, cases_dir: Path, sandbox_name: str, view: str, as_json: bool) -> None:
    """Grade PACKAGE (a folder, .zip or .tar.gz) against the case set in --cases."""
    case_set = load_cases_or_fail(cases_dir)
    try:
        sandbox = choose_sandbox(sandbox_name)
    except GraderError as exc:
        fail(str(exc), EXIT_SANDBOX)
    try:
        report = grade_package_path(package, case_set, sandbox)
    except GraderError as exc:
        fail(str(exc))
    data = (
        instructor_view(report, cases=case_set.by_id())
        if view == "instructor"
        else student_view(report, feedback=case_set.policy.feedback)
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
@click.option(
    "--max-share",
    type=click.FloatRange(0, 1),
    default=MAX_ANSWERABLE_SHARE,
    show_default=True,
    help="Largest share of answerable cases a canary may pass.",
)
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


#: Commands that live in their own modules: (module, command names). Imported here, after
#: ``main`` exists, because some of them reuse helpers from this module.
COMMAND_MODULES = (
    ("grader.sandbox.commands", ("sandbox",)),
    ("grader.practice.commands", ("practice",)),
    ("grader.server.commands", ("serve", "worker", "users", "reconcile", "storage")),
    ("grader.audit.commands", ("audit",)),
    ("grader.instructor.commands", ("regrade",)),
)


def _register_commands() -> None:
    import importlib

    for module_name, names in COMMAND_MODULES:
        module = importlib.import_module(module_name)
        for name in names:
            main.add_command(getattr(module, name))


_register_commands()
