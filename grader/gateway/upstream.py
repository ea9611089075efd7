"""The gateway's client for the staff-configured model upstream (an OpenAI-compatible URL).

One pooled :mod:`httpx` client per run; every request carries its own deadline (the case's),
and the key (``GRADER_MODEL_UPSTREAM_KEY``) lives only here, in the grader's process.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

#: Longest any one upstream call may take, whatever the case deadline.
MAX_CALL_SECONDS = 120.0
#: Largest answer read from the upstream (a chat answer is a few KiB; embeddings of a long
#: input list some hundreds).
MAX_ANSWER_BYTES = 16 * 1024 * 1024


class UpstreamError(Exception):
    """The upstream could not answer: ``status`` is what the gateway answers (502 or 504)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class UpstreamConfig:
    """Where the gateway forwards calls: a base URL ending in ``/v1`` and an optional key."""

    url: str
    key: str = ""


class Upstream:
    """A pooled HTTP client to one upstream."""

    def __init__(self, config: UpstreamConfig) -> None:
        self.config = config
        headers = {"Authorization": f"Bearer {config.key}"} if config.key else {}
        self._client = httpx.Client(
            base_url=config.url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(MAX_CALL_SECONDS, connect=5.0),
            limits=httpx.Limits(max_connections=16, max_keepalive_connections=8),
            follow_redirects=False,
            trust_env=False,
        )

    def post(self, path: str, body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        """POST ``body`` to ``path`` (relative to the base URL) and return the JSON answer.

        ``timeout`` bounds the whole call, not each network read: an upstream that trickles its
        answer is cut off at the deadline (504), and an answer over ``MAX_ANSWER_BYTES`` is 502.
        """
        seconds = max(0.01, min(timeout, MAX_CALL_SECONDS))
        deadline = time.monotonic() + seconds
        received = bytearray()
        try:
            with self._client.stream(
                "POST",
                path.lstrip("/"),
                json=body,
                timeout=httpx.Timeout(seconds, connect=min(5, seconds)),
            ) as response:
                if response.status_code != 200:
                    # Never pass the upstream's own error text on: it may quote the key.
                    raise UpstreamError(
                        502, f"the model upstream answered HTTP {response.status_code}"
                    )
                for chunk in response.iter_bytes():
                    received += chunk
                    if time.monotonic() > deadline:
                        raise UpstreamError(504, "the model upstream did not answer in time")
                    if len(received) > MAX_ANSWER_BYTES:
                        raise UpstreamError(502, "the model upstream's answer is too large")
        except httpx.TimeoutException:
            raise UpstreamError(504, "the model upstream did not answer in time") from None
        except httpx.HTTPError:
            raise UpstreamError(502, "the model upstream is unreachable") from None
        try:
            data = json.loads(received)
        except ValueError:
            raise UpstreamError(502, "the model upstream answered with invalid JSON") from None
        if not isinstance(data, dict):
            raise UpstreamError(502, "the model upstream answered with invalid JSON")
        return data

    def close(self) -> None:
        self._client.close()
