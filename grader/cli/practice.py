"""``grader practice …``: publish the public practice set, and grade an agent on it locally.

``publish`` exits 0 when the set was written, 4 when the leak check refused it (one line per
offending public case on stderr), 5 when the set's evaluator audit fails (one line) and 2 on
bad input. ``run`` exits 0 whenever grading completed,
2 on bad input and 3 when the requested sandbox cannot run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from grader.core.casesets import CaseSet
from grader.core.models import Case, CaseKind, GradeReport
from grader.core.views import instructor_view
from grader.exceptions import GraderError
from grader.practice.leakcheck import refusal_lines
from grader.practice.publish import (
    MANIFEST_FILE,
    AuditRefused,
    LeakRefused,
    publish_practice_set,
)

from .helpers import (
    EXIT_AUDIT_FAILED,
    EXIT_LEAK_REFUSED,
    choose_sandbox_or_fail,
    fail,
    grade_package_or_fail,
    load_cases_or_fail,
    model_upstream_option,
    note,
    sandbox_option,
)
from .render import case_model_cell, print_student_view

#: The practice set ``practice run`` grades on by default: the source set in a checkout of this
#: repository. (The server serves the *published* set, ``Settings.practice_dir``.)
PRACTICE_SOURCE_DIR = Path("practice_cases")


@click.group()
def practice() -> None:
    """Publish the public practice set; grade an agent on it with full per-case detail."""


# ------------------------------------------------------------------------------------ publish


@practice.command()
@click.option(
    "--private",
    "private_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="The private case set the practice set must not leak.",
)
@click.option(
    "--public",
    "public_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="The practice case set to publish (cases.jsonl, policy.toml, corpus).",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="Folder to publish into; must not exist or be empty unless --replace.",
)
@click.option("--replace", is_flag=True, help="Replace a previously published folder at --out.")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as one JSON object.")
def publish(
    private_dir: Path, public_dir: Path, out_dir: Path, replace: bool, as_json: bool
) -> None:
    """Leak-check the public set against the private one and publish it to --out."""
    try:
        published = publish_practice_set(public_dir, private_dir, out_dir, replace=replace)
    except LeakRefused as exc:
        note(f"grader: {exc}")
        for line in refusal_lines(exc.report):
            note(f"  {line}")
        sys.exit(EXIT_LEAK_REFUSED)
    except AuditRefused as exc:
        fail(str(exc), EXIT_AUDIT_FAILED)
    except GraderError as exc:
        fail(str(exc))
    manifest = published.manifest
    if as_json:
        click.echo(json.dumps(manifest, ensure_ascii=False))
        return
    counts = manifest["counts"]
    leak = manifest["leak_check"]
    click.echo(f"published practice set {manifest['version']} to {published.path}")
    click.echo(
        f"{counts['cases']} cases ({counts['by_kind']['answerable']} answerable, "
        f"{counts['by_kind']['refusal']} refusal), {counts['documents']} documents"
    )
    click.echo(
        f"leak check: clean against {leak['private_cases']} private cases "
        f"(closest similarity {leak['closest_similarity']}, threshold "
        f"{leak['thresholds']['reworded_similarity']})"
    )


# ---------------------------------------------------------------------------------------- run


def case_labels(case: Case) -> dict[str, Any]:
    """What a public case expects (safe to show: the practice set is public)."""
    return {
        "expected_citations": list(case.expected_citations),
        "allowed_citations": list(case.allowed_citations),
        "required_concepts": [list(group) for group in case.required_concepts],
        "forbidden_terms": list(case.forbidden_terms),
        "max_citations": case.max_citations,
    }


def practice_view(report: GradeReport, case_set: CaseSet) -> dict[str, Any]:
    """The instructor view (every case, question and answer) plus each case's labels."""
    cases = case_set.by_id()
    view = instructor_view(report, cases=cases)
    view["practice_set"] = str(case_set.root)
    for row in view["cases"]:
        row["labels"] = case_labels(cases[row["case_id"]])
    return view


def _check_manifest(case_set: CaseSet) -> None:
    manifest_path = case_set.root / MANIFEST_FILE
    if not manifest_path.is_file():
        return
    try:
        published_version = json.loads(manifest_path.read_text(encoding="utf-8")).get("version")
    except (ValueError, AttributeError):
        published_version = None
    if published_version != case_set.version:
        note(
            f"grader: note: this practice set (version {case_set.version}) differs from the one "
            f"its {MANIFEST_FILE} describes ({published_version})"
        )


def _print_case(row: dict[str, Any], console: Console) -> None:
    verdict = "[green]PASS[/]" if row["passed"] else "[red]FAIL[/]"
    safety = " [red]SAFETY FAILURE[/]" if row["safety_failure"] else ""
    console.print(f"\n[bold]{escape(row['case_id'])}[/] ({row['kind']}) {verdict}{safety}")
    console.print(f"  question: {escape(row['question'] or '')}")
    labels = row["labels"]
    if row["kind"] == CaseKind.ANSWERABLE.value:
        concepts = " and ".join(
            "(" + " | ".join(group) + ")" for group in labels["required_concepts"]
        )
        console.print(
            f"  expects: cite {escape(', '.join(labels['expected_citations']))}"
            f" (allowed: {escape(', '.join(labels['allowed_citations']))}); "
            f"concepts {escape(concepts)}"
        )
    else:
        console.print("  expects: a refusal (review flag, no citations, low confidence)")
    if labels["forbidden_terms"]:
        console.print(f"  forbidden: {escape(', '.join(labels['forbidden_terms']))}")
    gates = "  ".join(
        f"{gate} {'[green]ok[/]' if passed else '[red]FAIL[/]'}"
        for gate, passed in row["gates"].items()
    )
    console.print(f"  gates: {gates}")
    answer = row["answer"]
    if row["error"] is not None:
        console.print(f"  [red]no answer: {row['error']}[/]")
    elif answer is not None:
        console.print(f"  answer: {escape(answer['answer'])}")
        console.print(
            f"  citations: {escape(json.dumps(answer['citations'], ensure_ascii=False))}  "
            f"confidence: {answer['confidence']}  "
            f"needs_human_review: {str(answer['needs_human_review']).lower()}"
        )
    if row["diagnosis"]:
        console.print(f"  diagnosis: {row['diagnosis']}")
    if row.get("model_calls"):
        console.print(f"  model: {case_model_cell(row['model_calls'])}")


@practice.command()
@click.argument("agent", type=click.Path(path_type=Path))
@click.option(
    "--practice",
    "practice_dir",
    default=PRACTICE_SOURCE_DIR,
    show_default=True,
    type=click.Path(path_type=Path),
    help="The practice set folder (published or source).",
)
@sandbox_option("bwrap when usable, else unsandboxed with a warning")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@model_upstream_option
def run(
    agent: Path, practice_dir: Path, sandbox_name: str, as_json: bool, model_upstream: str | None
) -> None:
    """Grade AGENT (a folder, .zip or .tar.gz) on the practice set, showing every case."""
    case_set = load_cases_or_fail(practice_dir)
    _check_manifest(case_set)
    sandbox = choose_sandbox_or_fail(sandbox_name, unsandboxed_fallback=True)
    report = grade_package_or_fail(
        agent, case_set, sandbox, label="practice", model_upstream=model_upstream
    )
    view = practice_view(report, case_set)
    if as_json:
        click.echo(json.dumps(view, ensure_ascii=False))
        return
    console = Console(highlight=False)
    console.print(f"Practice set: {escape(str(case_set.root))} (sandbox: {sandbox.name})")
    for row in view["cases"]:
        _print_case(row, console)
    console.print()
    print_student_view(view, console)
