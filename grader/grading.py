"""Grading one agent package against one case set: sandbox session, validation, gates, decision.

This is the single path every grading goes through — the CLI, the rq worker, practice runs, the
canary audit and regrading from recorded answers — so they cannot disagree: an answer is
validated by :func:`answer_or_error`, graded by :func:`grade_answer` and decided by
:func:`decide_results`, whoever produced it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from grader.core.casesets import CaseSet
from grader.core.models import (
    Answer,
    Case,
    CaseResult,
    CertificateDecision,
    ErrorKind,
    GradeReport,
    Policy,
)
from grader.core.retrieval import case_metrics, mean_metrics
from grader.core.scoring import decide, grade_case
from grader.exceptions import SandboxUnavailable
from grader.sandbox.base import LaunchSpec, Limits, Sandbox
from grader.sandbox.session import CaseRun, run_session


def limits_for(policy: Policy) -> Limits:
    """Sandbox limits from a case set's policy."""
    return Limits(
        memory_mb=policy.memory_limit_mb,
        pids=policy.pids_limit,
        case_timeout_s=policy.case_timeout_seconds,
        setup_timeout_s=policy.setup_timeout_seconds,
        run_timeout_s=policy.run_timeout_seconds,
        max_line_bytes=policy.max_answer_bytes,
    )


def answer_or_error(value: Any) -> tuple[Answer | None, ErrorKind | None]:
    """An agent's decoded JSON answer as a validated :class:`Answer`, or invalid output."""
    try:
        return Answer.from_json_value(value), None
    except (ValidationError, ValueError):
        return None, ErrorKind.INVALID_OUTPUT


def validate_answer(run: CaseRun) -> tuple[Answer | None, ErrorKind | None]:
    """A run's answer value as a validated :class:`Answer`, or the error kind it ends in."""
    if run.error is not None:
        return None, run.error
    return answer_or_error(run.value)


def grade_answer(
    case_set: CaseSet,
    case: Case,
    answer: Answer | None,
    error: ErrorKind | None,
    *,
    seconds: float | None = None,
) -> CaseResult:
    """Grade one case's answer (or error) by the set's policy against the set's corpus."""
    return grade_case(
        case, answer, error, policy=case_set.policy, documents=case_set.corpus, seconds=seconds
    )


def decide_results(case_set: CaseSet, results: Sequence[CaseResult]) -> CertificateDecision:
    """The certificate decision the set's policy gives these results."""
    return decide(results, case_set.policy)


def results_from_runs(case_set: CaseSet, runs: Sequence[CaseRun]) -> tuple[CaseResult, ...]:
    by_id = case_set.by_id()
    return tuple(
        grade_answer(case_set, by_id[run.key], *validate_answer(run), seconds=round(run.seconds, 4))
        for run in runs
    )


def build_report(
    case_set: CaseSet,
    results: tuple[CaseResult, ...],
    *,
    sandbox: str,
    sandbox_image: str | None = None,
    package_sha256: str | None = None,
    restarts: int = 0,
) -> GradeReport:
    """Decision, retrieval metrics and versions around a set of case results."""
    by_id = case_set.by_id()
    per_case = (
        case_metrics(by_id[result.case_id], result.answer)
        for result in results
        if result.answer is not None
    )
    versions = case_set.versions.model_copy(
        update={
            "sandbox": sandbox,
            "sandbox_image": sandbox_image,
            "package_sha256": package_sha256,
        }
    )
    return GradeReport(
        versions=versions,
        results=results,
        decision=decide_results(case_set, results),
        retrieval=mean_metrics(row for row in per_case if row is not None),
        restarts=restarts,
    )


def grade_agent(
    agent_dir: Path,
    *,
    entrypoint: str,
    setup: str | None,
    case_set: CaseSet,
    sandbox: Sandbox,
    label: str = "local",
    package_sha256: str | None = None,
) -> GradeReport:
    """Run the agent in ``sandbox`` on every case of ``case_set`` and grade the answers."""
    root = case_set.root.resolve()
    for exposed in sandbox.exposed_host_paths:
        if root.is_relative_to(exposed):
            raise SandboxUnavailable(
                f"the case set is under {exposed}, which the {sandbox.name} sandbox shows to "
                "agents; move it elsewhere"
            )
    spec = LaunchSpec(
        agent_dir=agent_dir,
        corpus_dir=case_set.corpus.root,
        entrypoint=entrypoint,
        setup=setup,
        label=label,
        limits=limits_for(case_set.policy),
    )
    session = run_session(sandbox, spec, [(case.id, case.question) for case in case_set.cases])
    results = results_from_runs(case_set, session.runs)
    return build_report(
        case_set,
        results,
        sandbox=sandbox.name,
        sandbox_image=getattr(sandbox, "image_id", None),
        package_sha256=package_sha256,
        restarts=session.restarts,
    )
