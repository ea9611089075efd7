"""Grading one agent package against one case set: sandbox session, validation, gates, decision.

This is the single path every grading goes through — the CLI, the rq worker, practice runs, the
canary audit and regrading from recorded answers — so they cannot disagree: an answer is
validated by :func:`answer_or_error`, graded by :func:`grade_answer` and decided by
:func:`decide_results`, whoever produced it.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator, Sequence
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
from grader.gateway.server import Gateway
from grader.gateway.upstream import Upstream, UpstreamConfig
from grader.sandbox.base import GatewayMount, LaunchSpec, Limits, Sandbox
from grader.sandbox.session import CaseRun, run_session
from grader.sandbox.staging import private_folder


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


@contextlib.contextmanager
def model_gateway(
    case_set: CaseSet,
    *,
    upstream: UpstreamConfig | None = None,
    cache_dir: Path | None = None,
) -> Iterator[Gateway | None]:
    """The run's model gateway when the set's policy names models (DESIGN §4a), else None."""
    if not case_set.policy.models:
        yield None
        return
    folder = private_folder()
    try:
        gateway = Gateway(
            policy=case_set.policy,
            case_set_version=case_set.version,
            folder=folder,
            upstream=Upstream(upstream) if upstream is not None and upstream.url else None,
            cache_dir=cache_dir,
        )
        with gateway:
            yield gateway
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def grade_agent(
    agent_dir: Path,
    *,
    entrypoint: str,
    setup: str | None,
    case_set: CaseSet,
    sandbox: Sandbox,
    label: str = "local",
    package_sha256: str | None = None,
    model_upstream: UpstreamConfig | None = None,
    model_cache_dir: Path | None = None,
) -> GradeReport:
    """Run the agent in ``sandbox`` on every case of ``case_set`` and grade the answers.

    When the set's policy names models, the agent reaches ``model_upstream`` through a gateway
    that meters, budgets and records its calls (DESIGN §4a).
    """
    root = case_set.root.resolve()
    for exposed in sandbox.exposed_host_paths:
        if root.is_relative_to(exposed):
            raise SandboxUnavailable(
                f"the case set is under {exposed}, which the {sandbox.name} sandbox shows to "
                "agents; move it elsewhere"
            )
    questions = [(case.id, case.question) for case in case_set.cases]
    with model_gateway(case_set, upstream=model_upstream, cache_dir=model_cache_dir) as gateway:
        spec = LaunchSpec(
            agent_dir=agent_dir,
            corpus_dir=case_set.corpus.root,
            entrypoint=entrypoint,
            setup=setup,
            label=label,
            limits=limits_for(case_set.policy),
            gateway=GatewayMount(gateway.folder, gateway.token) if gateway else None,
        )
        session = run_session(sandbox, spec, questions, observer=gateway)
        results = results_from_runs(case_set, session.runs)
        if gateway is not None:
            results = tuple(
                result.model_copy(update={"model_calls": gateway.calls(result.case_id)})
                for result in results
            )
    report = build_report(
        case_set,
        results,
        sandbox=sandbox.name,
        sandbox_image=getattr(sandbox, "image_id", None),
        package_sha256=package_sha256,
        restarts=session.restarts,
    )
    return report.model_copy(update={"model_gateway": gateway is not None})
