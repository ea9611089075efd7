"""``grader compare BASELINE CANDIDATE --cases DIR``: grade two packages on one case set in one
run and compare them pairwise (DESIGN §7, seed 002 §06).

Both packages go through the same grading path as ``grader grade`` (same case set object, same
sandbox), so the comparison is on one case-set version by construction. Every detail is shown
(flipped cases included): use it on a case set you may see, such as the practice set. Exit
status 0 whatever the verdict; 2 on bad input, 3 when the sandbox cannot run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grader.core.compare import DEFAULT_ALPHA, Comparison, Metric, compare_results, metric_names
from grader.exceptions import GraderError

from .helpers import (
    choose_sandbox_or_fail,
    fail,
    grade_package_or_fail,
    load_cases_or_fail,
    note,
    sandbox_option,
)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _diff(value: float | None, family: str) -> str:
    if value is None:
        return "-"
    if family in ("rate", "retrieval"):
        return f"{value * 100:+.1f} pp" if family == "rate" else f"{value:+.3f}"
    if family == "count":
        return f"{value:+.0f}"
    return f"{value:+.4g}"


def _value(value: float | None, family: str) -> str:
    if value is None:
        return "-"
    if family == "rate":
        return _rate(value)
    if family == "count":
        return f"{value:.0f}"
    return f"{value:.4g}"


def print_comparison(data: dict[str, Any], comparison: Comparison, console: Console) -> None:
    """The comparison as rich tables: primary metric, per kind and gate, guardrails, slices,
    flipped cases, then the verdict line."""
    console.print(f"Case set version: {data['case_set_version']}")
    primary = data["primary"]
    low, high = primary["ci95"]
    table = Table(title=f"Primary metric: {primary['metric']} ({primary['cases']} paired cases)")
    for column in ("baseline", "candidate", "difference (95% CI)", "discordant", "McNemar p"):
        table.add_column(column, justify="right")
    table.add_row(
        _rate(primary["baseline"]),
        _rate(primary["candidate"]),
        f"{primary['difference'] * 100:+.1f} pp ({low * 100:+.1f} to {high * 100:+.1f})",
        f"{data['mcnemar']['baseline_only']} baseline only, "
        f"{data['mcnemar']['candidate_only']} candidate only",
        f"{data['mcnemar']['p_value']:.3g}",
    )
    console.print(table)
    gates = Table(title="Cases passed by kind and gate (baseline → candidate)")
    for column in ("kind", "gate", "baseline", "candidate", "difference"):
        gates.add_column(column, justify="right" if column not in ("kind", "gate") else "left")
    for kind, test in data["by_kind"].items():
        gates.add_row(
            f"[bold]{kind}[/]",
            "[bold](all gates)[/]",
            f"{test['baseline_passed']}/{test['cases']}",
            f"{test['candidate_passed']}/{test['cases']}",
            f"{test['difference']:+d}",
        )
        for gate, counts in data["gates"].get(kind, {}).items():
            style = "red" if counts["difference"] < 0 else ("green" if counts["difference"] else "")
            diff = f"{counts['difference']:+d}"
            gates.add_row(
                "",
                gate,
                f"{counts['baseline_passed']}/{counts['cases']}",
                f"{counts['candidate_passed']}/{counts['cases']}",
                f"[{style}]{diff}[/]" if style else diff,
            )
    console.print(gates)
    guards = Table(title="Guardrails")
    for column in ("guardrail", "baseline", "candidate", "difference", "regressed"):
        guards.add_column(column, justify="left" if column == "guardrail" else "right")
    for name, guard in comparison.guardrails.items():
        guards.add_row(
            name,
            _value(guard.baseline, guard.family),
            _value(guard.candidate, guard.family),
            _diff(guard.difference, guard.family),
            "[red]REGRESSED[/]" if guard.regressed else "no",
        )
    console.print(guards)
    if data["slices"]:
        slices = Table(title="Slices (cases passed)")
        for column in ("slice", "baseline", "candidate", "baseline only", "cand. only", "p"):
            slices.add_column(column, justify="left" if column == "slice" else "right")
        for name, test in data["slices"].items():
            slices.add_row(
                escape(name),
                f"{test['baseline_passed']}/{test['cases']}",
                f"{test['candidate_passed']}/{test['cases']}",
                str(test["baseline_only"]),
                str(test["candidate_only"]),
                f"{test['p_value']:.3g}",
            )
        console.print(slices)
    if data["flipped"]:
        flipped = Table(title="Flipped cases")
        for column in ("case", "kind", "baseline", "candidate"):
            flipped.add_column(column)
        for flip in data["flipped"]:
            colour = "green" if flip["to"] == "passed" else "red"
            flipped.add_row(
                escape(flip["case_id"]), flip["kind"], flip["from"], f"[{colour}]{flip['to']}[/]"
            )
        console.print(flipped)
    else:
        console.print("Flipped cases: none")
    colour = {"better": "green", "worse": "red"}.get(data["verdict"], "yellow")
    console.print(f"[bold {colour}]{escape(comparison.verdict_line())}[/]")


@click.command()
@click.argument("baseline", type=click.Path(path_type=Path))
@click.argument("candidate", type=click.Path(path_type=Path))
@click.option(
    "--cases",
    "cases_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="The case set folder both packages are graded on (e.g. practice_cases).",
)
@click.option(
    "--primary",
    default=Metric.ANSWERABLE_PASS_RATE.value,
    show_default=True,
    type=click.Choice(metric_names()),
    help="The declared primary metric (a pass rate over paired cases).",
)
@click.option(
    "--alpha",
    default=DEFAULT_ALPHA,
    show_default=True,
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="McNemar's exact p must be below this for a 'better' or 'worse' verdict.",
)
@sandbox_option("docker when its engine and image are ready, else bwrap")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def compare(
    baseline: Path,
    candidate: Path,
    cases_dir: Path,
    primary: str,
    alpha: float,
    sandbox_name: str,
    as_json: bool,
) -> None:
    """Grade BASELINE and CANDIDATE (folders, .zip or .tar.gz) on --cases and compare them.

    Prints the primary metric's paired difference with a bootstrap 95% CI, McNemar's exact
    test, guardrails, slices and flipped cases. Exit status 0 whatever the verdict.
    """
    case_set = load_cases_or_fail(cases_dir)
    sandbox = choose_sandbox_or_fail(sandbox_name)
    if not as_json:
        note(f"grader: grading the baseline {baseline} and the candidate {candidate}")
    reports = [
        grade_package_or_fail(package, case_set, sandbox, label=label)
        for package, label in ((baseline, "baseline"), (candidate, "candidate"))
    ]
    try:
        comparison = compare_results(
            reports[0].results,
            reports[1].results,
            baseline_version=reports[0].versions.case_set,
            candidate_version=reports[1].versions.case_set,
            cases=case_set.by_id(),
            primary=primary,
            alpha=alpha,
        )
    except GraderError as exc:
        fail(str(exc))
    data = comparison.as_dict()
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False))
        return
    print_comparison(data, comparison, Console(highlight=False))
