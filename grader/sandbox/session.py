"""The grader's side of the sandbox protocol: questions in, answers out, limits enforced here.

:func:`run_session` feeds questions one at a time to the runner inside any :class:`Sandbox`,
reads one line back per question with a per-case deadline, a whole-run deadline and a line-size
cap, and turns every misbehaviour into an :class:`ErrorKind` for that case only. When the
sandbox must be killed (a timeout, a runaway line, a crash), a fresh one is started for the
remaining cases. Case ids never enter the sandbox: each question gets a random ``qid``.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from grader.core.models import ErrorKind
from grader.exceptions import AgentStartError

from .base import AgentProcess, ExitInfo, LaunchSpec, Sandbox


@dataclass(frozen=True)
class CaseRun:
    """What came back for one question: a decoded answer value or an error kind."""

    key: str
    value: Any = None
    error: ErrorKind | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class SessionResult:
    runs: tuple[CaseRun, ...]
    restarts: int
    stderr_tail: str


class CaseObserver(Protocol):
    """Told when each question starts and ends (the model gateway records calls per case)."""

    def begin_case(self, key: str, deadline: float) -> None: ...

    def end_case(self) -> None: ...


class _Read(Enum):
    TIMEOUT = "timeout"
    EOF = "eof"
    TOO_LONG = "too_long"


class _LineReader:
    """Assembles newline-terminated lines from an AgentProcess, honouring deadline and cap."""

    def __init__(self, process: AgentProcess, max_line_bytes: int, clock: Callable[[], float]):
        self._process = process
        self._max = max_line_bytes
        self._clock = clock
        self._buffer = bytearray()

    def next_line(self, deadline: float) -> bytes | _Read:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                return _Read.TOO_LONG if len(line) > self._max else line
            if len(self._buffer) > self._max:
                return _Read.TOO_LONG
            remaining = deadline - self._clock()
            if remaining <= 0:
                return _Read.TIMEOUT
            chunk = self._process.read(remaining)
            if chunk is None:
                continue
            if chunk == b"":
                return _Read.EOF
            self._buffer += chunk


def _decode(line: bytes) -> dict[str, Any] | None:
    """A JSON object, or None. NaN and Infinity are refused like any other invalid JSON."""

    def _reject_constant(name: str) -> Any:
        raise ValueError(name)

    try:
        value = json.loads(line, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class _Session:
    def __init__(self, sandbox: Sandbox, spec: LaunchSpec, clock: Callable[[], float]) -> None:
        self.sandbox = sandbox
        self.spec = spec
        self.limits = spec.limits
        self.clock = clock
        self.run_deadline = clock() + spec.limits.run_timeout_s
        self.process: AgentProcess | None = None
        self.reader: _LineReader | None = None
        self.launches = 0
        self.stderr_tail = ""

    def stop(self) -> ExitInfo | None:
        if self.process is None:
            return None
        info = self.process.terminate()
        self.stderr_tail = self.process.stderr_tail()
        self.process = self.reader = None
        return info

    def start(self) -> ErrorKind | None:
        """Launch and wait for the runner's handshake. On the first launch a failure raises
        AgentStartError (the package is broken, and no question has been asked yet); on a
        restart it is an error kind for the case at hand."""
        first = self.launches == 0
        self.launches += 1
        self.process = self.sandbox.launch(self.spec)
        self.reader = _LineReader(self.process, self.limits.max_line_bytes, self.clock)
        deadline = min(self.clock() + self.limits.setup_timeout_s, self.run_deadline)
        line = self.reader.next_line(deadline)
        message = _decode(line) if isinstance(line, bytes) else None
        if message is not None and message.get("ready") is True:
            return None
        info = self.stop()
        if line is _Read.TIMEOUT:
            reason, kind = (
                f"the agent did not finish starting within {self.limits.setup_timeout_s:g} s",
                ErrorKind.TIMEOUT,
            )
        elif info is not None and info.oom_killed:
            reason, kind = "the agent ran out of memory while starting", ErrorKind.OOM
        elif message is not None and isinstance(message.get("fatal"), str):
            reason, kind = f"the agent failed to start: {message['fatal'][:300]}", ErrorKind.CRASHED
        else:
            reason, kind = "the agent exited while starting", ErrorKind.CRASHED
        if first:
            raise AgentStartError(" ".join(reason.split()))
        return kind

    def ask(
        self, question: str, key: str = "", observer: CaseObserver | None = None
    ) -> tuple[Any, ErrorKind | None]:
        if observer is None:
            return self._ask(question)
        observer.begin_case(key, min(self.clock() + self.limits.case_timeout_s, self.run_deadline))
        try:
            return self._ask(question)
        finally:
            observer.end_case()

    def _ask(self, question: str) -> tuple[Any, ErrorKind | None]:
        assert self.process is not None and self.reader is not None
        qid = secrets.token_hex(12)
        request = json.dumps({"qid": qid, "question": question}, ensure_ascii=False) + "\n"
        try:
            self.process.write(request.encode("utf-8"))
        except OSError:
            return None, self._exit_kind()
        deadline = min(self.clock() + self.limits.case_timeout_s, self.run_deadline)
        line = self.reader.next_line(deadline)
        if line is _Read.TIMEOUT:
            self.stop()
            return None, ErrorKind.TIMEOUT
        if line is _Read.EOF:
            return None, self._exit_kind()
        if line is _Read.TOO_LONG:
            self.stop()  # the stream is out of step: start afresh for the next case
            return None, ErrorKind.INVALID_OUTPUT
        message = _decode(line)
        if message is None or message.get("qid") != qid:
            self.stop()
            return None, ErrorKind.INVALID_OUTPUT
        if "answer" in message:
            return message["answer"], None
        if "invalid" in message:  # the agent returned something that is not JSON
            return None, ErrorKind.INVALID_OUTPUT
        return None, ErrorKind.CRASHED  # the agent raised: {"qid": ..., "error": ...}

    def _exit_kind(self) -> ErrorKind:
        info = self.stop()
        return ErrorKind.OOM if info is not None and info.oom_killed else ErrorKind.CRASHED


def run_session(
    sandbox: Sandbox,
    spec: LaunchSpec,
    questions: Sequence[tuple[str, str]],
    *,
    clock: Callable[[], float] = time.monotonic,
    observer: CaseObserver | None = None,
) -> SessionResult:
    """Ask every ``(key, question)`` in order and return one :class:`CaseRun` per question.

    ``observer`` (the run's model gateway) is told which case is being answered, and until when.

    Raises :class:`AgentStartError` when the agent cannot start at all, and
    :class:`grader.exceptions.SandboxFailure` when the sandbox infrastructure breaks.
    """
    session = _Session(sandbox, spec, clock)
    runs: list[CaseRun] = []
    failed_restarts = 0
    try:
        for key, question in questions:
            started = clock()
            if started >= session.run_deadline:
                runs.append(CaseRun(key, error=ErrorKind.TIMEOUT))
                continue
            if failed_restarts >= 2:
                # The agent keeps failing to come back up; don't spend the run restarting it.
                runs.append(CaseRun(key, error=ErrorKind.CRASHED))
                continue
            if session.process is None:
                start_error = session.start()
                if start_error is not None:
                    failed_restarts += 1
                    runs.append(CaseRun(key, error=start_error, seconds=clock() - started))
                    continue
                failed_restarts = 0
            asked = clock()
            value, error = session.ask(question, key, observer)
            runs.append(CaseRun(key, value=value, error=error, seconds=clock() - asked))
    finally:
        session.stop()
    return SessionResult(tuple(runs), max(session.launches - 1, 0), session.stderr_tail)
