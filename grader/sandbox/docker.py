"""The Docker sandbox: one hardened, network-less container per submission.

The container runs ``python3 /grader/runner.py`` from the sandbox image (see
:mod:`grader.sandbox.images`) with the agent, the corpus and the runner bind-mounted read-only,
and nothing else of the host. The grader talks to the runner over the engine's *attach* stream:
stdin goes in raw, stdout and stderr come back multiplexed in 8-byte-header frames. A reader
thread drains that stream continuously, so an agent that floods stderr never blocks on a full
pipe, and :meth:`DockerAgentProcess.read` can honour its timeout.

Every limit that matters is set here when the container is created, not in the image: the image
is built from files course staff edit, the container settings are the grader's.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.types import LogConfig, Mount, Ulimit

from grader.exceptions import SandboxFailure, SandboxUnavailable
from grader.sandbox.base import RUNNER_PATH, AgentProcess, ExitInfo, LaunchSpec, Sandbox
from grader.sandbox.images import SANDBOX_IMAGE, SANDBOX_UID, docker_client, ensure_usable
from grader.sandbox.staging import StagedRun, stage, sweep_staged

ROLE_LABEL = "grader.role"
SUBMISSION_LABEL = "grader.submission"
OWNER_LABEL = "grader.owner"
#: A sandbox container still running after this long is removed by :func:`remove_orphans`
#: whoever owns it: no legitimate run comes near it (the run deadline is minutes), and it is
#: the only way to reclaim containers whose owner lived on another host or in a container.
ORPHAN_MAX_AGE_S = 2 * 3600.0

_FIX = "run scripts/docker-engine.sh and grader sandbox build"
_STDOUT, _STDERR = 1, 2
#: Stdout bytes buffered ahead of the reader before the reader thread stops draining. Enough
#: for several maximal protocol lines; a flood beyond it waits for the grader (backpressure).
_MIN_STDOUT_BUFFER = 4 << 20


class DockerSandbox(Sandbox):
    """Runs each submission in its own container from the sandbox image.

    ``image`` is resolved to an image id at :meth:`check` time and that id is used for every
    launch, so a rebuild of ``latest`` during a run cannot change what a run is graded on;
    :attr:`image_id` is what eval records should store.
    """

    name = "docker"
    isolating = True

    def __init__(
        self,
        image: str = SANDBOX_IMAGE,
        *,
        client: docker.DockerClient | None = None,
        runner_path: Path = RUNNER_PATH,
        user: str = f"{SANDBOX_UID}:{SANDBOX_UID}",
    ) -> None:
        self.image = image
        self.runner_path = runner_path
        self.user = user
        self.image_id: str | None = None
        self._client = client
        self._swept = False
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- Sandbox interface

    def check(self) -> None:
        """Raise :class:`SandboxUnavailable` unless the engine answers and the image exists.

        The first successful check also removes sandbox containers left over by dead graders.
        """
        client = self.connect()
        image_id = ensure_usable(client, self.image)
        _require_default_seccomp(client)
        if not self.runner_path.is_file():
            raise SandboxUnavailable(f"sandbox runner {self.runner_path} is missing")
        with self._lock:
            self.image_id = image_id
            if not self._swept:
                self._swept = True
                # Sweeping is housekeeping; a failure here must not stop grading.
                with contextlib.suppress(docker.errors.DockerException):
                    remove_orphans(client)

    def sweep_orphans(self) -> int:
        """Remove sandbox containers whose grader died (see :func:`remove_orphans`)."""
        removed = remove_orphans(self.connect())
        sweep_staged()  # their staged copies (not counted: no container to report)
        return removed

    def launch(self, spec: LaunchSpec) -> AgentProcess:
        """Create, attach to and start one container for ``spec``."""
        if self.image_id is None:
            self.check()
        assert self.image_id is not None
        client = self.connect()
        # Copies under a neutral path: a bind mount shows its source path inside the container.
        staged = stage(spec, runner=self.runner_path)
        try:
            return self._launch(client, spec, staged)
        except BaseException:
            staged.remove()
            raise

    def _launch(
        self, client: docker.DockerClient, spec: LaunchSpec, staged: StagedRun
    ) -> AgentProcess:
        limits = spec.limits
        api = client.api

        host_config = api.create_host_config(
            network_mode="none",
            read_only=True,
            cap_drop=["ALL"],
            # No "seccomp=…" option: the engine then applies its default profile, which check()
            # has confirmed is on (the 20.10 engine takes only "unconfined" or a JSON profile).
            security_opt=["no-new-privileges"],
            mem_limit=f"{limits.memory_mb}m",
            # Equal to mem_limit: no swap, so a memory bomb is OOM-killed instead of thrashing.
            memswap_limit=f"{limits.memory_mb}m",
            pids_limit=limits.pids,
            nano_cpus=int(limits.cpus * 1e9),
            # docker-init as PID 1 reaps zombies and forwards signals; the runner is its child.
            init=True,
            ipc_mode="private",
            cgroupns="private",
            shm_size=f"{min(limits.tmp_mb, 64)}m",
            ulimits=[
                Ulimit(name="core", soft=0, hard=0),
                Ulimit(name="nofile", soft=1024, hard=1024),
            ],
            tmpfs={"/tmp": f"size={limits.tmp_mb}m,noexec,nosuid,nodev,mode=1777"},
            mounts=[
                # Bind mounts (not -v volumes): a missing source is an error, never an
                # empty folder the engine creates on the host.
                Mount("/agent", str(staged.agent), type="bind", read_only=True),
                Mount("/corpus", str(staged.corpus), type="bind", read_only=True),
                Mount("/grader/runner.py", str(staged.runner), type="bind", read_only=True),
            ],
            # No log driver: the engine would otherwise copy everything the agent prints to
            # a file on the host disk for the container's lifetime.
            log_config=LogConfig(type=LogConfig.types.NONE),
        )
        environment = {
            "AGENT_DIR": "/agent",
            "CORPUS_DIR": "/corpus",
            "AGENT_ENTRYPOINT": spec.entrypoint,
            "AGENT_SETUP": spec.setup or "",
            "HOME": "/tmp",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        labels = {
            SUBMISSION_LABEL: spec.label,
            ROLE_LABEL: "sandbox",
            OWNER_LABEL: _owner_token(),
        }
        try:
            created = api.create_container(
                image=self.image_id,
                command=["python3", "/grader/runner.py"],
                user=self.user,
                working_dir="/agent",
                hostname="sandbox",
                environment=environment,
                labels=labels,
                stdin_open=True,
                tty=False,
                network_disabled=True,
                host_config=host_config,
                # Otherwise the SDK copies proxy settings from ~/.docker/config.json into the
                # container's environment: nothing of the host's environment goes in.
                use_config_proxy=False,
            )
        except docker.errors.ImageNotFound as exc:
            self.image_id = None
            raise SandboxUnavailable(f"sandbox image {self.image} is gone; {_FIX}") from exc
        except docker.errors.DockerException as exc:
            raise SandboxFailure(f"docker create failed: {_one_line(exc)}") from exc

        container_id = str(created["Id"])
        try:
            # Attach before start so that not one byte of output is missed. Control bytes
            # such as the engine's detach keys (ctrl-p ctrl-q) can never reach the stream:
            # the grader only writes JSON lines, where control characters are escaped.
            raw = api.attach_socket(
                container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            sock = _underlying_socket(raw)
            process = DockerAgentProcess(client, container_id, sock, raw, spec, staged)
            api.start(container_id)
        except (docker.errors.DockerException, OSError, SandboxFailure) as exc:
            _force_remove(client, container_id)
            raise SandboxFailure(f"docker start failed: {_one_line(exc)}") from exc
        return process

    # ----------------------------------------------------------------- helpers

    def connect(self) -> docker.DockerClient:
        """The engine client (connected on first use); raises SandboxUnavailable if down."""
        if self._client is not None:
            return self._client
        try:
            client = docker_client()
            client.ping()
        except docker.errors.DockerException as exc:
            raise SandboxUnavailable(
                f"Docker engine not reachable ({_one_line(exc)[:120]}); {_FIX}"
            ) from None
        self._client = client
        return client


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
            removal_error = _force_remove(self._client, self.container_id)
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


def remove_orphans(
    client: docker.DockerClient, *, max_age_s: float | None = ORPHAN_MAX_AGE_S
) -> int:
    """Remove sandbox containers nobody is using any more; return how many were removed.

    A container labelled ``grader.role=sandbox`` is an orphan when it is not running, when
    the grader process that created it (on this host) has died, or when it has been running
    longer than ``max_age_s``. Running containers of live graders are left alone, so several
    workers can share one engine.
    """
    removed = 0
    containers: Iterable[dict[str, Any]] = client.api.containers(
        all=True, filters={"label": f"{ROLE_LABEL}=sandbox"}
    )
    now = time.time()
    for entry in containers:
        labels = entry.get("Labels") or {}
        running = entry.get("State") == "running"
        too_old = max_age_s is not None and now - float(entry.get("Created", now)) > max_age_s
        if running and not too_old and _owner_alive(labels.get(OWNER_LABEL, "")):
            continue
        if _force_remove(client, str(entry["Id"])) is None:
            removed += 1
    return removed


def _owner_token() -> str:
    """``host:pid:starttime`` of this process; the start time guards against pid reuse."""
    return f"{socket.gethostname()}:{os.getpid()}:{_process_start(os.getpid())}"


def _owner_alive(token: str) -> bool:
    """False only when the owner provably died: same host, and its pid is gone or reused."""
    host, _, rest = token.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return True  # another host's (or an unlabelled) container: cannot tell, keep it
    return _process_start(int(pid_text)) == start


def _process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot, or "" if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # Field 22; the command name (field 2) may contain spaces, so split after its ")".
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else ""


def _force_remove(client: docker.DockerClient, container_id: str) -> str | None:
    """Remove a container (killing it if needed); None on success or if already gone."""
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        return None
    except docker.errors.APIError as exc:
        if exc.status_code == 409 and "in progress" in str(exc):
            return None  # another caller is removing it right now
        return _one_line(exc)
    except docker.errors.DockerException as exc:
        return _one_line(exc)
    return None


def _returncode(code: object) -> int | None:
    if not isinstance(code, int):
        return None
    if 128 < code <= 128 + 64:
        return -(code - 128)
    return code


def _underlying_socket(raw: object) -> socket.socket:
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


def _require_default_seccomp(client: docker.DockerClient) -> None:
    """Refuse an engine that would start the sandbox without its default seccomp profile."""
    try:
        options = [str(option) for option in client.info().get("SecurityOptions") or []]
    except docker.errors.DockerException as exc:
        raise SandboxUnavailable(f"Docker engine not reachable ({_one_line(exc)[:120]})") from None
    seccomp = [option for option in options if option.startswith("name=seccomp")]
    if not seccomp or any("profile=unconfined" in option for option in seccomp):
        raise SandboxUnavailable(
            "the Docker engine runs containers without a seccomp profile; start dockerd "
            "without --seccomp-profile=unconfined on a kernel with seccomp"
        )


def _one_line(value: object) -> str:
    return " ".join(str(value).split())[:300]
