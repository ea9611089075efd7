"""Serving the app (``grader serve``): gunicorn processes that each run waitress.

Why this pairing (README "Serving"): waitress reads every request, body included, in its
non-blocking I/O loop and hands it to an application thread only once it is complete, so a
client that trickles its body holds a socket, never a thread, a database connection or a
rate-limit slot. gunicorn's arbiter keeps the processes (one per core by default) alive:
restarts, graceful stop on SIGTERM, TTIN/TTOU. Any other WSGI server can serve :func:`app`.
"""

from __future__ import annotations

import gc
import json
import os
import time
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication
from gunicorn.workers.base import Worker
from waitress import wasyncore
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import BaseWSGIServer, create_server
from waitress.utilities import RequestEntityTooLarge

from grader.settings import Settings

from . import create_app, upload_body_limit
from .errors import too_large_message


class GraderApplication(BaseApplication):  # type: ignore[misc]
    """gunicorn running ``create_app(settings)`` in each worker process (no preloading: every
    process opens its own database and Redis connections)."""

    def __init__(self, settings: Settings, options: dict[str, Any]) -> None:
        self.settings = settings
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            if value is not None and key in self.cfg.settings:
                self.cfg.set(key, value)

    def load(self) -> Flask:
        return create_app(self.settings)


def _channel_class(max_upload_bytes: int) -> type[HTTPChannel]:
    """waitress's connection class, answering an over-long body with the app's JSON 413."""
    body = json.dumps({"error": too_large_message(max_upload_bytes)}).encode()

    class TooLarge(RequestEntityTooLarge):  # type: ignore[misc]
        def to_response(self, ident: str | None = None) -> tuple[str, list[tuple[str, str]], bytes]:
            return f"{self.code} {self.reason}", [("Content-Type", "application/json")], body

    class Parser(HTTPRequestParser):  # type: ignore[misc]
        error: Any

        def received(self, data: bytes) -> int:
            consumed: int = super().received(data)
            if type(self.error) is RequestEntityTooLarge:
                self.error = TooLarge(self.error.body)
            return consumed

    class Channel(HTTPChannel):  # type: ignore[misc]
        parser_class = Parser

    return Channel


class WaitressWorker(Worker):  # type: ignore[misc]
    """A gunicorn worker process whose HTTP server is waitress, on gunicorn's listening socket.

    Settings are ``grader serve``'s (or, under a plain ``gunicorn -k``, read from the
    environment); the thread count is gunicorn's ``threads``.
    """

    def run(self) -> None:
        settings = getattr(self.app, "settings", None) or Settings()
        # Everything built so far (modules, the app, its engine) lives as long as the process.
        # Moving it out of the collector's reach keeps full collections from scanning it: they
        # were the longest pauses in the poll tail (README "Serving").
        gc.collect()
        gc.freeze()
        idle = settings.serve_idle_timeout_seconds
        socket_map: dict[int, Any] = {}
        create_server(
            self.wsgi,
            map=socket_map,
            sockets=[listener.sock for listener in self.sockets],
            threads=self.cfg.threads,
            connection_limit=settings.serve_connection_limit,
            channel_timeout=idle,
            cleanup_interval=max(1, min(30, idle // 2)),
            # Refused with 413 from the headers when the length is declared, else as soon as
            # the body passes it: nothing larger than an upload is ever buffered (waitress
            # refuses a length equal to its limit, hence the + 1).
            max_request_body_size=upload_body_limit(settings) + 1,
            # poll(2), not select(2): select cannot watch descriptors numbered above 1023.
            asyncore_use_poll=True,
            ident="grader",
            # Forwarding headers reach the app untouched; it decides which proxies to believe.
            clear_untrusted_proxy_headers=False,
        )
        listeners = [d for d in socket_map.values() if isinstance(d, BaseWSGIServer)]
        channel_class = _channel_class(settings.max_upload_bytes)
        for listener in listeners:
            listener.channel_class = channel_class
        # waitress's own loop, one turn at a time, so gunicorn sees this process alive (at most
        # one heartbeat a second) and a SIGTERM (which clears ``alive``) stops it within one.
        beat = 0.0
        while self.alive:
            if time.monotonic() - beat >= 1.0:
                self.notify()
                beat = time.monotonic()
            wasyncore.loop(timeout=1.0, map=socket_map, use_poll=True, count=1)
            if self.ppid != os.getppid():
                self.log.info("parent changed, shutting down: %s", self)
                break
        # Graceful stop: accept nothing more, finish the requests already read.
        for listener in listeners:
            listener.accepting = False
        deadline = time.monotonic() + self.cfg.graceful_timeout
        while time.monotonic() < deadline and any(
            isinstance(d, HTTPChannel) and d.requests for d in list(socket_map.values())
        ):
            self.notify()
            wasyncore.loop(timeout=0.2, map=socket_map, use_poll=True, count=1)
        listeners[0].task_dispatcher.shutdown(timeout=5)


def app() -> Flask:
    """``gunicorn 'grader.server.wsgi:app()'``: the app configured from the environment."""
    return create_app(Settings())
