"""Slow and oversized uploads against a real `grader serve` (loopback, bounded in time).

A client that sends an upload's headers and then trickles its body must cost the server a
socket, not an application thread: /healthz and ordinary uploads keep being answered.
"""

from __future__ import annotations

import io
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from sqlalchemy.engine import Engine
from werkzeug.datastructures import FileStorage, MultiDict
from werkzeug.test import encode_multipart

from grader.server import upload_body_limit
from grader.settings import Settings
from tests.server.conftest import Account, honest_agent, make_zip, submission_row

SLOW_CONNECTIONS = 100
#: Seconds the slow clients keep trickling while the server is probed.
SLOW_PHASE_SECONDS = 10.0
#: Generous for a loaded 2-core machine; an unprotected server misses it by seconds.
HEALTHZ_P99_LIMIT = 1.0
PROBE_TIMEOUT = 10.0


def _port(base: str) -> int:
    port = urlsplit(base).port
    assert port is not None
    return port


def upload_headers(account: Account, length: int) -> bytes:
    return (
        "POST /api/submissions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {account.token}\r\n"
        "Content-Type: multipart/form-data; boundary=slowboundary\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


@contextmanager
def slow_uploads(port: int, account: Account, count: int) -> Iterator[set[int]]:
    """``count`` uploads that announce 1 MiB and then send one byte a second until the block
    ends (then they are closed, never completed). Yields the indexes of connections the
    server closed meanwhile (a server may shed them; this one should not need to)."""
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]
    dropped: set[int] = set()
    stop = threading.Event()

    def drip() -> None:
        for sock in sockets:  # headers first, then the body a byte at a time
            sock.sendall(upload_headers(account, 1024 * 1024))
        while not stop.wait(1.0):
            for index, sock in enumerate(sockets):
                try:
                    sock.send(b"x")
                except OSError:
                    dropped.add(index)

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    try:
        time.sleep(1.5)  # every connection has sent its headers and started its body
        yield dropped
    finally:
        stop.set()
        dripper.join(timeout=30)
        for sock in sockets:
            sock.close()


def receive_until_closed(sock: socket.socket) -> str:
    chunks = []
    while chunk := sock.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def get_healthz(port: int) -> float:
    """Seconds one GET /healthz on a new connection took; ``PROBE_TIMEOUT`` if it failed."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=PROBE_TIMEOUT):
            return time.perf_counter() - started
    except OSError:
        return PROBE_TIMEOUT


def post_archive(port: int, account: Account, data: bytes) -> tuple[int, bytes]:
    """POST /api/submissions with ``data`` as the package; the status and body."""
    package = FileStorage(io.BytesIO(data), filename="agent.zip", content_type="application/zip")
    boundary, body = encode_multipart(MultiDict({"package": package}))
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/submissions",
        data=body,
        headers={
            **account.headers,
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_slow_uploads_do_not_starve_healthz_or_a_normal_upload(
    live_server: Callable[..., str], student: Account, engine: Engine
) -> None:
    """With 100 uploads trickling a byte a second, /healthz p99 stays under 1 s, no probe
    fails, and a normal upload made meanwhile is accepted and recorded."""
    port = _port(live_server())
    latencies: list[float] = []
    with slow_uploads(port, student, SLOW_CONNECTIONS) as dropped:
        deadline = time.monotonic() + SLOW_PHASE_SECONDS
        status, payload = post_archive(port, student, make_zip(honest_agent(salt="during")))
        while time.monotonic() < deadline:
            latencies.append(get_healthz(port))
            time.sleep(0.05)
        held_open = SLOW_CONNECTIONS - len(dropped)
    assert held_open == SLOW_CONNECTIONS  # the server kept every slow upload waiting
    assert status == 202, payload
    submission_id = http_json_id(payload)
    assert submission_row(engine, submission_id).status == "queued"
    failed = sum(1 for value in latencies if value >= PROBE_TIMEOUT)
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    assert len(latencies) >= 20 and failed == 0, (len(latencies), failed)
    assert p99 < HEALTHZ_P99_LIMIT, f"/healthz p99 {p99:.3f} s under slow uploads"


def http_json_id(payload: bytes) -> str:
    submission_id: str = json.loads(payload)["id"]
    return submission_id


def test_an_oversized_upload_is_refused_from_its_headers(
    live_server: Callable[..., str], student: Account, settings: Settings
) -> None:
    """A declared body over the upload limit gets 413 without the server waiting for it."""
    port = _port(live_server())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(upload_headers(student, upload_body_limit(settings) + 1))
        answer = receive_until_closed(sock)  # no body byte was ever sent
    head, _, body = answer.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 413 "), answer
    assert json.loads(body) == {
        "error": f"upload too large (limit {settings.max_upload_bytes} bytes)"
    }


def test_a_stalled_upload_is_closed_after_the_idle_timeout(
    live_server: Callable[..., str], make_settings: Callable[..., Settings], student: Account
) -> None:
    """A client that sends part of a body and then nothing is disconnected after
    GRADER_SERVE_IDLE_TIMEOUT_SECONDS, freeing its connection slot."""
    port = _port(live_server(make_settings(serve_idle_timeout_seconds=2)))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(upload_headers(student, 1024 * 1024) + b"--slowboundary\r\n")
        started = time.monotonic()
        assert sock.recv(4096) == b""  # closed by the server, with no response
        waited = time.monotonic() - started
    assert 1.5 <= waited < 25, waited
