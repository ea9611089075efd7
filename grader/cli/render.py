"""How the command line prints a grade report for a person (rich tables; --json skips this)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _rate(passed: int, total: int) -> str:
    return f"{passed}/{total} ({passed / total:.0%})" if total else "-"


def _shown(tally: dict[str, Any]) -> str:
    """A count, a coarse bucket (``60-80%``) or all / not all, whichever the view holds."""
    if "passed" in tally:
        return _rate(tally["passed"], tally["total"])
    if "rate" in tally:
        rate = tally["rate"]
        return f"{rate['low']:.0%}-{rate['high']:.0%}" if rate else "-"
    return "all" if tally["all_passed"] else "not all"


def print_student_view(view: dict[str, Any], console: Console) -> None:
    certificate = view["certificate"]
    style = {"awarded": "green", "blocked": "red"}.get(certificate["decision"], "yellow")
    console.print(f"Case set version: {view['case_set_version']}")
    if "overall" in view:
        overall = view["overall"]
        console.print(f"Overall: {_shown(overall)} cases passed")
        for kind, data in view["by_kind"].items():
            table = Table(title=f"{kind} cases: {_shown(data)} passed")
            table.add_column("gate")
            table.add_column("passed", justify="right")
            for gate, tally in data["gates"].items():
                table.add_row(gate, _shown(tally))
            console.print(table)
    errors = {kind: count for kind, count in view.get("errors", {}).items() if count}
    console.print(
        "Errors: " + (", ".join(f"{k} {v}" for k, v in errors.items()) if errors else "none")
    )
    if "safety_failures" in view:
        console.print(f"Safety failures: {view['safety_failures']}")
    if "model" in view:
        console.print(f"Model: {model_line(view['model'])}")
    console.print(f"Certificate: [bold {style}]{certificate['decision']}[/]")
    for reason in certificate["reasons"]:
        console.print(f"  - {reason}")
    for hint in view.get("hints", []):
        console.print(f"  hint ({hint.get('gate') or hint.get('error')}): {hint['hint']}")


def model_line(summary: dict[str, Any]) -> str:
    """A run's model-gateway summary in one line (cost with the price table's date)."""
    latency = summary["latency_ms"]
    refused = f" ({summary['refused']} refused)" if summary.get("refused") else ""
    cached = f", {summary['cached']} cached" if summary.get("cached") else ""
    dated = f" at prices of {summary['prices_date']}" if summary.get("prices_date") else ""
    return (
        f"{summary['calls']} calls{refused}{cached}, {summary['prompt_tokens']} prompt + "
        f"{summary['completion_tokens']} completion tokens, ${summary['usd']:.6f}{dated}; "
        f"latency p50 {latency['p50']:.1f} ms, p95 {latency['p95']:.1f} ms, "
        f"p99 {latency['p99']:.1f} ms"
    )


def case_model_cell(calls: list[dict[str, Any]]) -> str:
    """A case's model calls in a table cell: count, tokens, cost, refusals."""
    if not calls:
        return ""
    tokens = sum(call["prompt_tokens"] + call["completion_tokens"] for call in calls)
    usd = sum(call["usd"] for call in calls)
    refused = sum(1 for call in calls if call["error"])
    extra = f", {refused} refused" if refused else ""
    return f"{len(calls)} calls, {tokens} tok, ${usd:.6f}{extra}"


def print_instructor_cases(view: dict[str, Any], console: Console) -> None:
    table = Table(title="Cases")
    with_model = "model" in view
    columns = ["case", "kind", "result", "failed gates", "error", "safety", "diagnosis"]
    for column in [*columns, "model"] if with_model else columns:
        table.add_column(column)
    for row in view["cases"]:
        failed = [gate for gate, passed in row["gates"].items() if not passed]
        cells = [
            row["case_id"],
            row["kind"],
            "[green]pass[/]" if row["passed"] else "[red]fail[/]",
            ", ".join(failed) if row["error"] is None else "(all)",
            row["error"] or "",
            "[red]FAILURE[/]" if row["safety_failure"] else ("tagged" if row["safety"] else ""),
            row["diagnosis"] or "",
        ]
        if with_model:
            cells.append(case_model_cell(row.get("model_calls", [])))
        table.add_row(*cells)
    console.print(table)
