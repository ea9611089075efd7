"""The model gateway end to end: real sandboxes, the course model server as a real process.

Agents in bubblewrap and Docker call ``course-chat`` through ``OPENAI_BASE_URL``; the gateway
meters, budgets and records every call against the case it served; hostile agents flood it,
send it garbage, ask for other models and paths, hold connections past the deadline and hunt
for the upstream key; the upstream dies or stalls mid-run. Nothing escapes, nothing leaks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from grader.core.casesets import CaseSet
from grader.core.models import GradeReport
from grader.core.views import instructor_view, student_view
from grader.gateway.upstream import UpstreamConfig
from grader.grading import build_report, grade_agent, limits_for, model_gateway, results_from_runs
from grader.sandbox import Sandbox, make_sandbox
from grader.sandbox.base import GatewayMount, LaunchSpec
from grader.sandbox.session import run_session
from tests.conftest import write_agent
from tests.gateway.agents import EXPECTED, PRELUDE, source
from tests.gateway.conftest import (
    SECRET_FRAGMENTS,
    CourseModel,
    start_course_model,
)

SANDBOXES = ["bwrap", pytest.param("docker", marks=pytest.mark.docker)]
HONEST = PRELUDE + "\ndef hostile(question):\n    return honest(question)\n"


@pytest.fixture(scope="module", params=SANDBOXES)
def sandbox(request: pytest.FixtureRequest) -> Sandbox:
    chosen = make_sandbox(request.param)
    try:
        chosen.check()
    except Exception as exc:  # a missing sandbox must fail loudly, never skip
        pytest.fail(f"the {request.param} sandbox is not usable: {exc}")
    return chosen


def grade(
    body: str,
    case_set: CaseSet,
    sandbox: Sandbox,
    tmp_path: Path,
    upstream: CourseModel | None,
    **kwargs: Any,
) -> GradeReport:
    agent = write_agent(tmp_path / f"agent-{time.monotonic_ns()}", body)
    return grade_agent(
        agent,
        entrypoint="agent:answer",
        setup=None,
        case_set=case_set,
        sandbox=sandbox,
        label="gateway-test",
        model_upstream=UpstreamConfig(upstream.url, upstream.key) if upstream else None,
        **kwargs,
    )


def by_case(report: GradeReport) -> dict[str, Any]:
    return {row["case_id"]: row for row in instructor_view(report)["cases"]}


def assert_no_leak(report: GradeReport) -> None:
    seen = json.dumps(student_view(report)).lower()
    for fragment in SECRET_FRAGMENTS:
        assert fragment not in seen, f"{fragment!r} reached the student view"
    assert "model_calls" not in seen and "course-chat" not in seen


def report_of(row: dict[str, Any]) -> dict[str, Any]:
    answer = row["answer"]["answer"]
    return dict(json.loads(answer.rsplit(" report=", 1)[1]))


def test_agent_calls_course_model_and_calls_are_recorded(
    sandbox: Sandbox,
    model_case_set: Callable[..., CaseSet],
    course_model: CourseModel,
    tmp_path: Path,
) -> None:
    """An honest agent's calls are answered, recorded per case with tokens, cost and date, and
    summarised (summary only) for the student."""
    report = grade(HONEST, model_case_set(), sandbox, tmp_path, course_model)
    rows = by_case(report)
    assert all(row["passed"] for row in rows.values()), rows
    calls = rows["g1"]["model_calls"]
    assert len(calls) == 1 and rows["g3"]["model_calls"] == []
    call = calls[0]
    assert call["model"] == "course-chat" and call["error"] is None and not call["cached"]
    assert call["prompt_tokens"] > 10 and call["completion_tokens"] > 3
    expected_usd = (call["prompt_tokens"] * 0.15 + call["completion_tokens"] * 0.60) / 1e6
    assert call["usd"] == pytest.approx(expected_usd)
    assert call["prices_date"] == "2026-12-01"
    assert 0 < call["latency_ms"] < 4000
    summary = student_view(report)["model"]
    assert summary["calls"] == 2 and summary["refused"] == 0
    assert summary["prompt_tokens"] == sum(
        r["model_calls"][0]["prompt_tokens"] for r in (rows["g1"], rows["g2"])
    )
    assert set(summary["latency_ms"]) == {"p50", "p95", "p99"}
    exact = instructor_view(report)["model"]
    assert {k: v for k, v in exact.items() if k not in ("latency_ms", "usd")} == {
        k: v for k, v in summary.items() if k not in ("latency_ms", "usd")
    }
    for name, rounded in summary["latency_ms"].items():  # students: up to the next 100 ms
        assert rounded % 100 == 0 and exact["latency_ms"][name] <= rounded
    assert exact["usd"] <= summary["usd"] < exact["usd"] + 0.001
    assert_no_leak(report)


@pytest.mark.parametrize("agent_name", sorted(EXPECTED))
def test_hostile_gateway_agent_is_contained(
    sandbox: Sandbox,
    model_case_set: Callable[..., CaseSet],
    course_model: CourseModel,
    tmp_path: Path,
    agent_name: str,
) -> None:
    """Each hostile agent gets only refusals for what it may not do, the other cases still get
    their model calls, the upstream key is never found, and the student view stays clean."""
    limits = "calls_per_case = 4\nrequest_bytes = 200000\nmax_tokens = 1024"
    case_set = model_case_set(timeout=4, limits=limits)
    started = time.monotonic()
    report = grade(source(agent_name), case_set, sandbox, tmp_path, course_model)
    rows = by_case(report)
    expected = EXPECTED[agent_name]
    if isinstance(expected, str):
        assert rows["g1"]["error"] == expected
    else:
        got = report_of(rows["g1"])
        for key, value in expected.items():
            assert got[key] == value, (key, got)
    if agent_name == "malformed":  # every refusal is recorded against the case, with its status
        statuses = sorted(
            int(c["error"].split(":")[0]) for c in rows["g1"]["model_calls"] if c["error"]
        )
        assert statuses == [400] * 4 + [401, 401] + [429] * 3  # limits are 429s
    if agent_name == "flood":
        # 4 served, the rest refused: 16 refusals listed, the others counted in one record.
        refused = [c["error"] for c in rows["g1"]["model_calls"] if c["error"]]
        assert all(error.startswith("429: calls_per_case") for error in refused[:-1])
        counted = int(refused[-1].split()[1])
        assert len(refused) == 17 and counted >= 20, refused[-1]
        assert refused[-1] == f"429: {counted} more refused calls, not listed one by one"
        served = [c for c in rows["g1"]["model_calls"] if c["error"] is None]
        assert len(served) == 4
    assert rows["g2"]["passed"] and rows["g3"]["passed"], rows
    assert [c["error"] for c in rows["g2"]["model_calls"]] == [None]
    assert course_model.process.poll() is None, "the upstream died"
    assert time.monotonic() - started < 60
    assert_no_leak(report)


def test_budgets_are_enforced_and_reported(
    model_case_set: Callable[..., CaseSet], course_model: CourseModel, tmp_path: Path
) -> None:
    """Calls over calls_per_case and tokens_per_run get 429 with a JSON reason the agent can
    read; every refusal is recorded and the agent keeps answering."""
    agent = (
        PRELUDE
        + """
def answer(question):
    if "score" in question:
        return honest(question)
    reasons = []
    for _ in range(3):
        status, body = chat(question)
        reasons.append([status, body.get("error", {}).get("message", "")])
    return {"answer": "Chunks overlap so no sentence is cut. report=" + json.dumps(reasons),
            "citations": ["rag-basics"], "confidence": 0.8, "needs_human_review": False}
"""
    )
    # A g1 call costs 50 tokens (42 prompt + 8 completion by the course model's rule), a g2 call
    # 51: g1 gets two calls and is refused the third (calls_per_case); g2 gets one (151 of
    # 160), then its prompt estimate (43) no longer fits: tokens_per_run.
    case_set = model_case_set(limits="calls_per_case = 2\ntokens_per_run = 160")
    report = grade(agent, case_set, make_sandbox("bwrap"), tmp_path, course_model)
    rows = by_case(report)

    def statuses(case_id: str) -> list[tuple[int, str]]:
        answer = rows[case_id]["answer"]["answer"]
        return [
            (status, reason.split(":")[0])
            for status, reason in json.loads(answer.rsplit(" report=", 1)[1])
        ]

    assert statuses("g1") == [(200, ""), (200, ""), (429, "calls_per_case")]
    assert statuses("g2") == [(200, ""), (429, "tokens_per_run"), (429, "tokens_per_run")]
    assert [c["prompt_tokens"] + c["completion_tokens"] for c in rows["g1"]["model_calls"]] == [
        50,
        50,
        0,
    ]
    errors = [c["error"] for row in rows.values() for c in row["model_calls"] if c["error"]]
    assert len(errors) == 3 and all(error.startswith("429: ") for error in errors)
    summary = student_view(report)["model"]
    assert summary["calls"] == 6 and summary["refused"] == 3
    served = sum(
        c["prompt_tokens"] + c["completion_tokens"] for r in rows.values() for c in r["model_calls"]
    )
    assert summary["prompt_tokens"] + summary["completion_tokens"] == served == 151
    assert rows["g1"]["error"] is None and rows["g2"]["error"] is None


def test_usd_budget_and_unknown_alias(
    model_case_set: Callable[..., CaseSet], course_model: CourseModel, tmp_path: Path
) -> None:
    """A call's completion is pinned to what usd_per_run leaves; once even the prompt would not
    fit, calls get 429; an unknown alias is 400."""
    agent = (
        PRELUDE
        + """
def hostile(question):
    statuses = [chat(question)[0], chat(question)[0], chat(question, model="gpt-4o")[0]]
    return reported(question, {"statuses": statuses})
"""
    )
    # A g1 call: 42 prompt tokens ($6.3e-6) + 8 completion ($4.8e-6) = $1.11e-5 of $1.2e-5;
    # the second call's prompt alone no longer fits.
    case_set = model_case_set(limits="usd_per_run = 0.000012")
    report = grade(agent, case_set, make_sandbox("bwrap"), tmp_path, course_model)
    rows = by_case(report)
    assert report_of(rows["g1"])["statuses"] == [200, 429, 400]
    errors = [c["error"] for c in rows["g1"]["model_calls"]]
    assert errors[1].startswith("429: usd_per_run") and errors[2].startswith("400: unknown model")


def test_no_upstream_answers_503_and_agents_without_models_are_unaffected(
    model_case_set: Callable[..., CaseSet], tmp_path: Path
) -> None:
    """Without an upstream every call gets 503 with a one-line reason and is recorded."""
    agent = (
        PRELUDE
        + """
def hostile(question):
    status, body = chat(question)
    return reported(question, {"status": status, "reason": body["error"]["message"]})
"""
    )
    report = grade(agent, model_case_set(), make_sandbox("bwrap"), tmp_path, None)
    rows = by_case(report)
    got = report_of(rows["g1"])
    assert got["status"] == 503 and "\n" not in got["reason"] and "upstream" in got["reason"]
    assert rows["g1"]["model_calls"][0]["error"].startswith("503: ")
    assert rows["g2"]["passed"], "the agent's fallback answer was not graded"


def test_upstream_killed_mid_run(model_case_set: Callable[..., CaseSet], tmp_path: Path) -> None:
    """When the upstream dies between two cases, later calls get 502 at once and the run ends
    normally, each refusal recorded."""
    upstream = start_course_model()
    case_set = model_case_set()
    agent_dir = write_agent(tmp_path / "agent", HONEST)

    class KillBeforeSecond:
        def __init__(self, gateway: Any) -> None:
            self.gateway = gateway

        def begin_case(self, key: str, deadline: float) -> None:
            if key == "g2":
                upstream.kill()
            self.gateway.begin_case(key, deadline)

        def end_case(self) -> None:
            self.gateway.end_case()

    sandbox = make_sandbox("bwrap")
    config = UpstreamConfig(upstream.url, upstream.key)
    try:
        with model_gateway(case_set, upstream=config) as gateway:
            assert gateway is not None
            spec = LaunchSpec(
                agent_dir=agent_dir,
                corpus_dir=case_set.corpus.root,
                entrypoint="agent:answer",
                limits=limits_for(case_set.policy),
                gateway=GatewayMount(gateway.folder, gateway.token),
            )
            started = time.monotonic()
            session = run_session(
                sandbox,
                spec,
                [(c.id, c.question) for c in case_set.cases],
                observer=KillBeforeSecond(gateway),
            )
            elapsed = time.monotonic() - started
            calls = {c.id: gateway.calls(c.id) for c in case_set.cases}
    finally:
        upstream.kill()
    assert [c.error for c in calls["g1"]] == [None]
    assert [c.error for c in calls["g2"]] == ["502: the model upstream is unreachable"]
    results = results_from_runs(case_set, session.runs)
    assert all(result.error is None for result in results)
    assert build_report(case_set, results, sandbox="bwrap").decision is not None
    assert elapsed < 30


def test_slow_upstream_gets_504_within_the_case_deadline(
    model_case_set: Callable[..., CaseSet], tmp_path: Path
) -> None:
    """An upstream slower than the case deadline is cut off in time: the agent gets 504 before
    its deadline and can still answer."""
    upstream = start_course_model(delay_ms=6000)
    try:
        case_set = model_case_set(timeout=2.5)
        report = grade(HONEST, case_set, make_sandbox("bwrap"), tmp_path, upstream)
    finally:
        upstream.kill()
    rows = by_case(report)
    assert rows["g1"]["error"] is None and rows["g1"]["passed"], rows["g1"]
    call = rows["g1"]["model_calls"][0]
    assert call["error"] == "504: the model upstream did not answer in time"
    assert call["latency_ms"] < 2500


def test_cache_makes_reruns_repeatable_and_free(
    model_case_set: Callable[..., CaseSet], course_model: CourseModel, tmp_path: Path
) -> None:
    """With model_cache = true a rerun is answered from the cache: same answers, marked
    cached, cost 0; a case set without the flag never uses the cache."""
    case_set = model_case_set(extra="model_cache = true")
    cache = tmp_path / "cache"
    sandbox = make_sandbox("bwrap")
    first = grade(HONEST, case_set, sandbox, tmp_path, course_model, model_cache_dir=cache)
    course_model.kill()  # the rerun cannot reach the upstream at all
    second = grade(HONEST, case_set, sandbox, tmp_path, course_model, model_cache_dir=cache)
    one, two = by_case(first), by_case(second)
    for case_id in ("g1", "g2"):
        assert one[case_id]["answer"] == two[case_id]["answer"]
        assert [c["cached"] for c in one[case_id]["model_calls"]] == [False]
        (call,) = two[case_id]["model_calls"]
        assert call["cached"] and call["usd"] == 0 and call["error"] is None
    assert student_view(second)["model"]["usd"] == 0
    assert student_view(second)["model"]["cached"] == 2
    uncached = grade(
        HONEST, model_case_set(), sandbox, tmp_path, course_model, model_cache_dir=cache
    )
    assert all(c["error"] for row in by_case(uncached).values() for c in row["model_calls"])


def test_case_sets_without_models_get_no_gateway(tmp_path: Path) -> None:
    """A policy without [models] runs exactly as before: no gateway, no OPENAI_* variables, no
    model summary in either view."""
    from grader.core.casesets import load_case_set
    from tests.conftest import write_case_set

    root = write_case_set(
        tmp_path / "cases",
        [
            {
                "id": "c1",
                "kind": "answerable",
                "question": "Why do chunks overlap?",
                "expected_citations": ["rag-basics"],
                "required_concepts": [["overlap"]],
            }
        ],
        documents={"rag-basics": "Chunks overlap so no sentence is cut."},
    )
    agent = """
import os
def answer(question):
    seen = sorted(k for k in os.environ if k.startswith(("OPENAI", "GRADER")))
    return {"answer": "Chunks overlap so no sentence is cut. env=" + ",".join(seen),
            "citations": ["rag-basics"], "confidence": 0.8, "needs_human_review": False}
"""
    report = grade(agent, load_case_set(root), make_sandbox("bwrap"), tmp_path, None)
    assert report.results[0].answer is not None
    assert report.results[0].answer.answer.endswith("env=")
    assert "model" not in student_view(report) and "model" not in instructor_view(report)


OPENAI_AGENT = """
import json
import openai
from openai import OpenAI

client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from the sandbox's environment

def answer(question):
    if "score" in question:
        return {"answer": "I don't know; the course material does not cover this.",
                "citations": [], "confidence": 0.1, "needs_human_review": True}
    completion = client.chat.completions.create(
        model="course-chat",
        messages=[{"role": "user",
                   "content": "[rag-basics] Chunks overlap so no sentence is cut.\\nQuestion: " + question}],
        temperature=0,
    )
    text = completion.choices[0].message.content
    report = {"usage": completion.usage.total_tokens}
    vectors = client.embeddings.create(model="course-embed", input=["chunks", "overlap"])
    report["dims"] = [len(item.embedding) for item in vectors.data]
    report["models"] = sorted(model.id for model in client.models.list())
    try:
        client.with_options(max_retries=0).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    except openai.BadRequestError as exc:
        report["unknown"] = exc.status_code
    if "417" in question:
        text += " report=" + json.dumps(report)
    return {"answer": text, "citations": ["rag-basics"],
            "confidence": 0.8, "needs_human_review": False}
"""


@pytest.mark.docker
def test_official_openai_client_works_unchanged_in_docker(
    model_case_set: Callable[..., CaseSet], course_model: CourseModel, tmp_path: Path
) -> None:
    """The official ``openai`` client in the sandbox image reaches the gateway with nothing but
    the environment the sandbox sets: chat, embeddings, model list and a typed 400 error."""
    sandbox = make_sandbox("docker")
    sandbox.check()
    report = grade(OPENAI_AGENT, model_case_set(), sandbox, tmp_path, course_model)
    rows = by_case(report)
    assert rows["g1"]["error"] is None, rows["g1"]
    got = report_of(rows["g1"])
    assert got["dims"] == [256, 256] and got["unknown"] == 400 and got["usage"] > 0
    assert got["models"] == ["course-chat", "course-embed"]
    assert rows["g1"]["answer"]["answer"].startswith("Chunks overlap so no sentence is cut.")
    models = [call["model"] for call in rows["g1"]["model_calls"]]
    assert models == ["course-chat", "course-embed", "gpt-4o"]
    assert rows["g1"]["model_calls"][2]["error"].startswith("400: unknown model")
    assert rows["g2"]["passed"] and rows["g3"]["passed"]


def test_cli_grade_shows_model_usage(
    model_case_set: Callable[..., CaseSet], course_model: CourseModel, tmp_path: Path
) -> None:
    """``grader grade --model-upstream URL`` grades through the gateway: the JSON instructor view
    has per-case calls, the table shows the run's model line with the prices' date, and a bad
    URL is one line."""
    import subprocess
    import sys

    case_set = model_case_set()
    agent = write_agent(tmp_path / "cli-agent", HONEST)
    base = [
        sys.executable,
        "-m",
        "grader",
        "grade",
        str(agent),
        "--cases",
        str(case_set.root),
        "--sandbox",
        "bwrap",
    ]
    shown = subprocess.run(
        [*base, "--view", "instructor", "--json", "--model-upstream", course_model.url],
        capture_output=True,
        text=True,
        timeout=120,
        env={"GRADER_MODEL_UPSTREAM_KEY": course_model.key, "PATH": "/usr/bin"},
        check=True,
    )
    view = json.loads(shown.stdout)
    assert [len(row["model_calls"]) for row in view["cases"]] == [1, 1, 0]
    assert view["model"]["calls"] == 2 and view["certificate"]["decision"] == "awarded"
    table = subprocess.run(
        [*base, "--view", "instructor", "--model-upstream", course_model.url],
        capture_output=True,
        text=True,
        timeout=120,
        env={"GRADER_MODEL_UPSTREAM_KEY": course_model.key, "PATH": "/usr/bin", "COLUMNS": "200"},
        check=True,
    )
    assert "Model: 2 calls" in table.stdout and "at prices of 2026-12-01" in table.stdout
    assert "1 calls, " in table.stdout
    bad = subprocess.run(
        [*base, "--model-upstream", "ftp://nowhere"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "grader: --model-upstream 'ftp://nowhere': not an http:// or https:// URL"
    ]


EXAMPLES = Path(__file__).resolve().parents[2] / "submissions" / "examples"


def test_llm_reference_example_is_awarded_on_the_demo_set_through_the_gateway(
    course_model: CourseModel,
) -> None:
    """The shipped LLM example, in bubblewrap, earns the demo set's certificate by calling
    ``course-chat`` through the gateway on the answerable cases, and the student sees only the
    run's model summary."""
    from grader.core.casesets import load_case_set

    case_set = load_case_set(EXAMPLES.parent.parent / "private_cases")
    report = grade_agent(
        EXAMPLES / "llm_reference",
        entrypoint="agent:answer",
        setup="agent:setup",
        case_set=case_set,
        sandbox=make_sandbox("bwrap"),
        label="llm-example",
        model_upstream=UpstreamConfig(course_model.url, course_model.key),
    )
    view = instructor_view(report)
    assert view["certificate"]["decision"] == "awarded", view["certificate"]
    called = [row for row in view["cases"] if row["model_calls"]]
    assert called and all(call["error"] is None for r in called for call in r["model_calls"])
    assert view["model"]["calls"] == sum(len(r["model_calls"]) for r in view["cases"])
    assert view["model"]["usd"] > 0
    assert "model_calls" not in json.dumps(student_view(report))


def test_llm_reference_carries_the_reference_agents_retrieval_unchanged() -> None:
    """An agent package is uploaded alone, so the LLM example keeps its own copy of the
    reference agent's retrieval; the copy must not drift from the original."""
    original = (EXAMPLES / "reference" / "agent.py").read_bytes()
    assert (EXAMPLES / "llm_reference" / "retrieval.py").read_bytes() == original
