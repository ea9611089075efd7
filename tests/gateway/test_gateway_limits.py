"""The gateway's limits against callers that push on them, over its real Unix socket.

The gateway runs in this process (as in a grading run); the upstream is the course model server
as its own process, or, where an upstream must misbehave, a small real HTTP server that does.
"""

from __future__ import annotations

import http.client
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest

from grader.core.casesets import CaseSet
from grader.gateway.server import REFUSALS_RECORDED, Gateway, connect
from grader.gateway.upstream import UpstreamConfig
from grader.grading import model_gateway
from tests.gateway.conftest import CourseModel

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "Context: Chunks overlap so no sentence is cut.\nWhy?"}]


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, gateway: Gateway) -> None:
        super().__init__("gateway", timeout=10)
        self.gateway = gateway

    def connect(self) -> None:
        self.sock = connect(self.gateway.socket_path)


def call(gateway: Gateway, body: bytes | dict[str, Any], *, token: str | None = None) -> int:
    """POST ``body`` to the chat route; the status."""
    connection = _UnixConnection(gateway)
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    connection.request(
        "POST",
        CHAT,
        body=raw,
        headers={
            "Authorization": f"Bearer {token or gateway.token}",
            "Content-Type": "application/json",
        },
    )
    status = connection.getresponse().status
    connection.close()
    return status


@contextmanager
def running(
    case_set: CaseSet, url: str, key: str = "", *, seconds: float = 4.0
) -> Iterator[Gateway]:
    """The run's gateway with case ``g1`` being answered for ``seconds``."""
    with model_gateway(case_set, upstream=UpstreamConfig(url, key)) as gateway:
        assert gateway is not None
        gateway.begin_case("g1", time.monotonic() + seconds)
        yield gateway
        gateway.end_case()


def served_tokens(gateway: Gateway) -> int:
    return sum(c.prompt_tokens + c.completion_tokens for c in gateway.calls("g1") if not c.error)


def test_refusals_are_recorded_up_to_a_cap_and_then_counted(
    model_case_set: Callable[..., CaseSet], course_model: CourseModel
) -> None:
    """An agent hammering the gateway with a wrong key gets 401 every time, but the case keeps
    at most the capped number of records plus one that counts the rest."""
    with running(model_case_set(), course_model.url, course_model.key) as gateway:
        statuses = {call(gateway, {"model": "course-chat"}, token="wrong") for _ in range(60)}
        records = gateway.calls("g1")
    assert statuses == {401}
    assert len(records) == REFUSALS_RECORDED + 1
    assert (
        records[-1].error
        == f"429: {60 - REFUSALS_RECORDED} more refused calls, not listed one by one"
    )


def test_nan_and_several_completions_are_refused_without_using_a_call(
    model_case_set: Callable[..., CaseSet], course_model: CourseModel
) -> None:
    """``NaN`` in a body and ``n`` above 1 get 400 and are recorded; the agent's allowance of
    calls is untouched, so its next honest call is served."""
    case_set = model_case_set(limits="calls_per_case = 1")
    with running(case_set, course_model.url, course_model.key) as gateway:
        nan = b'{"model": "course-chat", "messages": [], "temperature": NaN}'
        assert call(gateway, nan) == 400
        assert call(gateway, {"model": "course-chat", "messages": MESSAGES, "n": 3}) == 400
        assert call(gateway, {"model": "course-chat", "messages": MESSAGES}) == 200
        errors = [c.error for c in gateway.calls("g1")]
    assert errors[0] is not None and errors[0].startswith("400: the request body is not valid")
    assert errors[1] is not None and errors[1].startswith("400: 'n' must be 1")
    assert errors[2] is None


def test_simultaneous_calls_cannot_overshoot_the_token_budget(
    model_case_set: Callable[..., CaseSet], course_model: CourseModel
) -> None:
    """Eight calls at once, each asking for many tokens, together stay within tokens_per_case:
    each call holds its prompt and its pinned max_tokens until its usage is counted."""
    case_set = model_case_set(limits="calls_per_case = 8\ntokens_per_case = 120")
    body = {"model": "course-chat", "messages": MESSAGES * 3, "max_tokens": 100}
    with running(case_set, course_model.url, course_model.key) as gateway:
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda _: call(gateway, body), range(8)))
        tokens = served_tokens(gateway)
    assert 200 in statuses and 429 in statuses
    assert 0 < tokens <= 120


class _Upstream(http.server.BaseHTTPRequestHandler):
    """A real OpenAI-style HTTP upstream that misbehaves as ``server.mode`` says."""

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        answer = {"choices": [{"message": {"role": "assistant", "content": "Chunks overlap."}}]}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if getattr(self.server, "mode", "") == "trickle":
            for byte in data:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.3)
        else:
            self.wfile.write(data)


@contextmanager
def odd_upstream(mode: str) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    server.mode = mode  # type: ignore[attr-defined]
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_an_upstream_that_reports_no_usage_is_charged_the_whole_hold(
    model_case_set: Callable[..., CaseSet],
) -> None:
    """Without a ``usage`` in the answer, the call costs its prompt estimate and all the
    max_tokens it was allowed, so the token budget still binds."""
    case_set = model_case_set(limits="calls_per_case = 4\ntokens_per_case = 300")
    body = {"model": "course-chat", "messages": MESSAGES, "max_tokens": 100}
    with odd_upstream("no-usage") as url, running(case_set, url) as gateway:
        statuses = [call(gateway, body) for _ in range(4)]
        records = [c for c in gateway.calls("g1") if c.error is None]
    assert statuses[0] == 200 and statuses[-1] == 429
    assert records[0].completion_tokens == 100  # the whole max_tokens it was allowed
    assert sum(c.prompt_tokens + c.completion_tokens for c in records) <= 300


def test_an_upstream_that_trickles_its_answer_gets_504_by_the_deadline(
    model_case_set: Callable[..., CaseSet],
) -> None:
    """The case deadline bounds the whole upstream call, not each read: an upstream sending a
    byte every 0.3 s is cut off, and the agent has its 504 within the deadline."""
    with odd_upstream("trickle") as url, running(model_case_set(), url, seconds=1.5) as gateway:
        started = time.monotonic()
        status = call(gateway, {"model": "course-chat", "messages": MESSAGES})
        elapsed = time.monotonic() - started
        errors = [c.error for c in gateway.calls("g1")]
    assert status == 504 and elapsed < 2.0, elapsed
    assert errors and errors[0] is not None and errors[0].startswith("504")


@pytest.mark.parametrize("limit", ["request_bytes", "max_tokens", "temperature_max"])
def test_every_limit_is_a_429_naming_it(
    limit: str, model_case_set: Callable[..., CaseSet], course_model: CourseModel
) -> None:
    """Over any of the policy's model limits the agent gets 429 with the limit's name."""
    case_set = model_case_set(limits="request_bytes = 2000\nmax_tokens = 50\ntemperature_max = 0.5")
    body: dict[str, Any] = {"model": "course-chat", "messages": MESSAGES}
    if limit == "request_bytes":
        body["messages"] = MESSAGES * 40
    elif limit == "max_tokens":
        body["max_tokens"] = 51
    else:
        body["temperature"] = 0.7
    with running(case_set, course_model.url, course_model.key) as gateway:
        assert call(gateway, body) == 429
        error = gateway.calls("g1")[0].error
    assert error is not None and error.startswith(f"429: {limit}")
