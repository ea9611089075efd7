"""A running sandbox container, spoken to over the engine's *attach* stream.

Stdin goes in raw; stdout and stderr come back multiplexed in 8-byte-header frames. A reader
thread drains that stream continuously, so an agent that floods stderr never blocks on a full
pipe, and :meth:`DockerAgentProcess.read` can honour its timeout.
"""

from __future__ import annotations

import atexit
import contextlib
import select
import socket
import ssl
import threading
import time
import weakref

import docker
import docker.errors

from grader.exceptions import SandboxFailure

from .base import AgentProcess, ExitInfo, LaunchSpec
from .docker_orphans import force_remove
from .staging import StagedRun

_STDOUT, _STDERR = 1, 2
#: Stdout bytes buffered ahead of the reader before the reader thread stops draining. Enough
#: for several maximal protocol lines; a flood beyond it waits for the grader (backpressure).
_MIN_STDOUT_BUFFER = 4 << 20


class DockerAgentProcess(AgentProcess):
    """A running sandbox container, spoken to over its attach socket."""

    def __init__(
        self,
        client: docker.DockerClient,
        container_id: str,
        sock: socket.socket,
        keepalive: object,
        spec: LaunchSpec,
        staged: StagedRun | None = None,
    ) -> None:
        self.container_id = container_id
        self._staged = staged
        self._client = client
        self._sock = sock
        # The SDK's socket wrapper owns the HTTP response; if it were garbage-collected the
        # connection would close under us.
        self._keepalive = keepalive
        self._write_timeout = spec.limits.case_timeout_s
        self._stderr_cap = spec.limits.max_stderr_bytes
        self._stdout_cap = max(_MIN_STDOUT_BUFFER, 4 * spec.limits.max_line_bytes)

        self._cond = threading.Condition()
        self._stdout = bytearray()
        self._stderr = bytearray()
        self._eof = False
        self._closing = False
        self._exit: ExitInfo | None = None
        self._terminate_lock = threading.Lock()

        sock.setblocking(False)
        self._reader = threading.Thread(
            target=self._read_loop, name=f"sandbox-{container_id[:12]}", daemon=True
        )
        self._reader.start()
        _LIVE.add(self)

    # ----------------------------------------------------------------- AgentProcess

    def write(self, data: bytes) -> None:
        """Send ``data`` to the runner's stdin.

        Raises ``BrokenPipeError`` once the container is gone, and ``TimeoutError`` (an
        ``OSError``) if the runner has not consumed its input for ``case_timeout_s`` — a write
        must never hang the grader.
        """
        if self._closing:
            raise BrokenPipeError("sandbox terminated")
        view = memoryview(data)
        deadline = time.monotonic() + self._write_timeout
        poller = select.poll()
        poller.register(self._sock, select.POLLOUT)
        while view:
            try:
                sent = self._sock.send(view)
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("sandbox stdin not drained in time") from None
                poller.poll(left * 1000)
                continue
            view = view[sent:]

    def read(self, timeout: float) -> bytes | None:
        """Next stdout bytes; ``b""`` at end of stream; ``None`` if nothing came in time."""
        with self._cond:
            if not self._stdout and not self._eof:
                self._cond.wait_for(lambda: bool(self._stdout) or self._eof, max(timeout, 0))
            if self._stdout:
                data = bytes(self._stdout)
                self._stdout.clear()
                self._cond.notify_all()  # wake the reader if it paused on a full buffer
                return data
            return b"" if self._eof else None

    def stderr_tail(self) -> str:
        """The last ``max_stderr_bytes`` the agent wrote to stderr, decoded leniently."""
        with self._cond:
            return self._stderr.decode("utf-8", errors="replace")

    def terminate(self) -> ExitInfo:
        """Kill the container, record how it ended, remove it. Idempotent; safe when gone.

        The exit status follows ``subprocess`` conventions so that every sandbox reports the
        same thing: a process ended by signal N (docker-init reports 128+N) is ``-N``.
        """
        with self._terminate_lock:
            if self._exit is not None:
                return self._exit
            self._closing = True
            api = self._client.api
            returncode: int | None = None
            oom = False
            try:
                state = api.inspect_container(self.container_id)["State"]
                if state.get("Running"):
                    api.kill(self.container_id)
                    api.wait(self.container_id, timeout=30)
                    state = api.inspect_container(self.container_id)["State"]
                returncode = _returncode(state.get("ExitCode"))
                oom = bool(state.get("OOMKilled"))
            except docker.errors.NotFound:
                pass  # already removed by someone else: nothing to kill, nothing to report
            except (docker.errors.DockerException, OSError):
                # kill raced with the container exiting, or wait timed out: removal below
                # with force=True still kills whatever is left.
                pass
            self._exit = ExitInfo(returncode=returncode, oom_killed=oom)
            removal_error = force_remove(self._client, self.container_id)
            if self._staged is not None and removal_error is None:
                self._staged.remove()
            self._close_stream()
            _LIVE.discard(self)
            if removal_error is not None:
                raise SandboxFailure(
                    f"could not remove sandbox container {self.container_id[:12]}: {removal_error}"
                )
            return self._exit

    # ----------------------------------------------------------------- internals

    def _read_loop(self) -> None:
        """Demultiplex the attach stream until EOF: stdout to the buffer, stderr to the tail."""
        pending = bytearray()
        poller = select.poll()
        poller.register(self._sock, select.POLLIN)
        try:
            while True:
                poller.poll()
                try:
                    chunk = self._sock.recv(1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    break
                pending += chunk
                self._dispatch(pending)
        except (OSError, ValueError):
            pass  # the socket was shut down or closed by terminate()
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def _dispatch(self, pending: bytearray) -> None:
        """Consume every complete frame at the start of ``pending``."""
        offset = 0
        size = len(pending)
        out: list[bytes] = []
        err: list[bytes] = []
        while size - offset >= 8:
            length = int.from_bytes(pending[offset + 4 : offset + 8], "big")
            end = offset + 8 + length
            if end > size:
                break
            payload = bytes(pending[offset + 8 : end])
            (err if pending[offset] == _STDERR else out).append(payload)
            offset = end
        del pending[:offset]
        if not out and not err:
            return
        with self._cond:
            if err:
                self._stderr += b"".join(err)
                excess = len(self._stderr) - self._stderr_cap
                if excess > 0:
                    del self._stderr[:excess]
            if out:
                self._stdout += b"".join(out)
                self._cond.notify_all()
                # Backpressure: stop draining while the grader is this far behind.
                while len(self._stdout) > self._stdout_cap and not self._closing:
                    self._cond.wait(0.5)

    def _close_stream(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with self._cond:
            self._cond.notify_all()
        self._reader.join(timeout=5)
        with self._cond:
            self._eof = True  # even if the reader is somehow still stuck, reads now end
        with contextlib.suppress(OSError):
            self._sock.close()
        close = getattr(self._keepalive, "close", None)
        if callable(close):
            with contextlib.suppress(OSError):
                close()


# --------------------------------------------------------------------------- housekeeping

#: Processes not yet terminated; killed at interpreter exit so a crashing grader leaves
#: nothing running (remove_orphans is the backstop for a grader that is killed outright).
_LIVE: weakref.WeakSet[DockerAgentProcess] = weakref.WeakSet()


@atexit.register
def _terminate_live() -> None:
    for process in list(_LIVE):
        with contextlib.suppress(Exception):
            process.terminate()


def _returncode(code: object) -> int | None:
    if not isinstance(code, int):
        return None
    if 128 < code <= 128 + 64:
        return -(code - 128)
    return code


def underlying_socket(raw: object) -> socket.socket:
    """The real socket behind the SDK's attach object (a ``SocketIO`` for unix/tcp hosts)."""
    sock = getattr(raw, "_sock", raw)
    # TLS is refused because decrypted bytes can wait inside the SSL object while the socket
    # polls idle, which would break read()'s timeout; each worker drives a local engine anyway.
    if not isinstance(sock, socket.socket) or isinstance(sock, ssl.SSLSocket):
        raise SandboxFailure(
            f"unsupported Docker transport ({type(sock).__name__}); use a unix socket or "
            "plain tcp DOCKER_HOST"
        )
    return sock
