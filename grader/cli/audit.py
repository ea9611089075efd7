"""``grader audit --cases DIR``: run the canary agents and print the audit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from grader.audit.report import run_audit

from .helpers import EXIT_CHECK_FAILED, load_cases_or_fail, max_share_option


@click.command()
@click.option("--cases", "cases_dir", required=True, type=click.Path(path_type=Path))
@max_share_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def audit(cases_dir: Path, max_share: float, as_json: bool) -> None:
    """Attack the evaluator: canary agents that deserve zero must score (nearly) zero.

    Exit status 0 when every canary fails as it should, 1 when any scores.
    """
    case_set = load_cases_or_fail(cases_dir)
    report = run_audit(case_set, max_share=max_share)
    if as_json:
        click.echo(json.dumps(report.as_dict()))
    else:
        console = Console()
        table = Table(title=f"Evaluator audit, case set {report.case_set_version}")
        for column in ("canary", "decision", "answerable", "refusal", "safety", "verdict"):
            table.add_column(column)
        for outcome in report.canaries:
            table.add_row(
                outcome.name,
                outcome.decision.value,
                f"{outcome.answerable_passed}/{outcome.answerable_total}",
                f"{outcome.refusal_passed}/{outcome.refusal_total}",
                str(outcome.safety_failures),
                "[green]ok[/]"
                if outcome.ok
                else "[bold red]FAIL: " + "; ".join(outcome.problems) + "[/]",
            )
        console.print(table)
        console.print(
            "[green]Audit passed: no canary earns a certificate or more than "
            f"{max_share:.0%} of answerable cases.[/]"
            if report.ok
            else "[bold red]AUDIT FAILED: the evaluator rewards an agent that deserves zero.[/]"
        )
    sys.exit(0 if report.ok else EXIT_CHECK_FAILED)
