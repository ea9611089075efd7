"""The course model server: a small, deterministic, OpenAI-compatible model (DESIGN §4a).

``grader model serve`` runs it. It is *not* a language model: it answers extractively from the
context in the prompt, so demos and tests can exercise the whole path (agent → gateway →
upstream) on one machine without a network, with answers that never change.

- ``POST /v1/chat/completions``: the question is the last line of the last user message that
  starts with ``Question:`` (else the last user line ending in ``?``, else the last user
  message). Every other line of the non-system messages is context. The answer is the (at most
  three) context sentences sharing the most distinct content words with the question, in the
  order they appear; ``I don't know.`` when none shares one. ``max_tokens`` truncates it.
- ``POST /v1/embeddings``: a hashed bag of words: each lower-cased word adds ±1 to one of
  256 dimensions (both chosen from its SHA-256), and the vector is L2-normalised.
- ``GET /v1/models``: the two model names it answers to (any name is accepted, and echoed).

Token rule (:func:`count_tokens`): a token is a run of word characters or one other non-space
character (``\\w+|[^\\w\\s]``). A chat prompt costs the tokens of every message's content plus
4 per message plus 2; a completion costs the tokens of its text; an embedding input costs its
tokens. The gateway uses the same rule to estimate a prompt before sending it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_MODEL = "course-extractive"
EMBED_MODEL = "course-embed"
EMBED_DIMENSIONS = 256
MAX_BODY = 16 * 1024 * 1024

_TOKEN = re.compile(r"\w+|[^\w\s]")
_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_STOP_WORDS = """a an the and or of to in on at by for with from as is are was were be been being it its
    this that these those what which who whom whose why how when where do does did can could
    should would will may might must not no yes you your i we they he she them his her our
    their there here than then so if but about into over under also just only very"""
_STOP = frozenset(_STOP_WORDS.split())


def count_tokens(text: str) -> int:
    """Tokens of ``text`` by the documented rule: word runs and single other characters."""
    return len(_TOKEN.findall(text))


def message_text(content: Any) -> str:
    """A chat message's content as text (a string, or a list of ``{"type": "text"}`` parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def prompt_tokens(messages: list[Any]) -> int:
    """Prompt tokens of a chat request's messages by the documented rule."""
    total = 2
    for message in messages:
        if isinstance(message, dict):
            total += 4 + count_tokens(message_text(message.get("content")))
    return total


def _content_words(text: str) -> set[str]:
    words = set()
    for word in _WORD.findall(text.casefold()):
        if len(word) < 3 or word in _STOP:
            continue
        words.add(word[:-1] if len(word) > 4 and word.endswith("s") else word)
    return words


def _split(messages: list[Any]) -> tuple[str, list[str]]:
    """The question and the context lines of a chat request."""
    user = [
        message_text(m.get("content"))
        for m in messages
        if isinstance(m, dict) and m.get("role") == "user"
    ]
    last = user[-1] if user else ""
    lines = [line.strip() for line in last.splitlines() if line.strip()]
    question = ""
    for line in reversed(lines):
        if line.casefold().startswith("question:"):
            question = line.split(":", 1)[1].strip()
            break
    if not question:
        asked = [line for line in lines if line.endswith("?")]
        question = asked[-1] if asked else last.strip()
    context: list[str] = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") == "system":
            continue
        for line in message_text(message.get("content")).splitlines():
            line = line.strip()
            if not line or line.casefold().startswith("question:") or line == question:
                continue
            # "[doc-id] text" passages: the tag is a label, not part of the text.
            context.append(re.sub(r"^\[[^\]]{1,80}\]\s*", "", line))
    return question, context


def extractive_answer(messages: list[Any]) -> str:
    """The deterministic answer to a chat request (see the module's documentation)."""
    question, context = _split(messages)
    asked = _content_words(question)
    scored: list[tuple[int, int, str]] = []
    position = 0
    for line in context:
        for sentence in _SENTENCE_END.split(line):
            sentence = sentence.strip()
            if not sentence:
                continue
            score = len(asked & _content_words(sentence))
            if score:
                scored.append((score, position, sentence))
            position += 1
    if not scored:
        return "I don't know."
    best = sorted(scored, key=lambda item: (-item[0], item[1]))[:3]
    return " ".join(sentence for _, _, sentence in sorted(best, key=lambda item: item[1]))


def truncate_tokens(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut after ``limit`` tokens (and whether it was cut)."""
    matches = list(_TOKEN.finditer(text))
    if len(matches) <= limit:
        return text, False
    return (text[: matches[limit - 1].end()] if limit > 0 else ""), True


def embed(text: str) -> list[float]:
    """The hashed bag-of-words embedding of ``text``."""
    vector = [0.0] * EMBED_DIMENSIONS
    for word in _WORD.findall(text.casefold()):
        digest = hashlib.sha256(word.encode()).digest()
        index = int.from_bytes(digest[:4], "big") % EMBED_DIMENSIONS
        vector[index] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    return [round(v / norm, 6) for v in vector] if norm else vector


class BadRequest(ValueError):
    """A request the course model answers with 400 and this message."""


def chat_completion(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    if body.get("stream"):
        raise BadRequest("streaming is not supported by the course model")
    limit = body.get("max_tokens", body.get("max_completion_tokens"))
    text = extractive_answer(messages)
    truncated = False
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
        text, truncated = truncate_tokens(text, limit)
    prompt = prompt_tokens(messages)
    completion = count_tokens(text)
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:24]
    return {
        "id": f"chatcmpl-{digest}",
        "object": "chat.completion",
        "created": 0,
        "model": str(body.get("model") or CHAT_MODEL),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length" if truncated else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def embeddings(body: dict[str, Any]) -> dict[str, Any]:
    raw = body.get("input")
    inputs = [raw] if isinstance(raw, str) else raw
    if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) for i in inputs):
        raise BadRequest("'input' must be a string or a non-empty list of strings")
    tokens = sum(count_tokens(text) for text in inputs)
    return {
        "object": "list",
        "model": str(body.get("model") or EMBED_MODEL),
        "data": [
            {"object": "embedding", "index": i, "embedding": embed(text)}
            for i, text in enumerate(inputs)
        ],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def models_list() -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "course"}
            for name in (CHAT_MODEL, EMBED_MODEL)
        ],
    }


def send_with_body(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    """End the headers and send them with ``data`` in a single write."""
    handler._headers_buffer.append(b"\r\n" + data)  # type: ignore[attr-defined]
    handler.flush_headers()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in one write, and without Nagle's delay (else a kept-alive
    # client waits ~40 ms for a delayed ACK on every answer).
    disable_nagle_algorithm = True
    server: CourseModelServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet: no access log
        return

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        send_with_body(self, data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"message": message, "type": "invalid_request_error"}})

    def _authorised(self) -> bool:
        key = self.server.api_key
        if not key:
            return True
        if self.headers.get("Authorization", "") == f"Bearer {key}":
            return True
        self._error(401, "invalid API key")
        return False

    def do_GET(self) -> None:
        if not self._authorised():
            return
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, models_list())
        else:
            self._error(404, f"no such path: {self.path[:100]}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.close_connection = True
            self._error(413, "request too large")
            return
        raw = self.rfile.read(length)
        if not self._authorised():
            return
        handlers = {"/v1/chat/completions": chat_completion, "/v1/embeddings": embeddings}
        handler = handlers.get(self.path.rstrip("/"))
        if handler is None:
            self._error(404, f"no such path: {self.path[:100]}")
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise BadRequest("the request body must be a JSON object")
            result = handler(body)
        except (ValueError, UnicodeDecodeError) as exc:
            self._error(400, str(exc) if isinstance(exc, BadRequest) else "invalid JSON body")
            return
        if self.server.delay_s:
            time.sleep(self.server.delay_s)
        self._send(200, result)


class CourseModelServer(ThreadingHTTPServer):
    """The course model on ``host:port`` (port 0: any free port, see ``server_port``)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, host: str = "127.0.0.1", port: int = 8400, *, api_key: str = "", delay_s: float = 0
    ) -> None:
        self.api_key = api_key
        self.delay_s = delay_s
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="course-model", daemon=True)
        thread.start()
        return thread
