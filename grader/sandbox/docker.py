"""The Docker sandbox: one hardened, network-less container per submission.

The container runs ``python3 /grader/runner.py`` from the sandbox image (see
:mod:`grader.sandbox.images`) with the agent, the corpus and the runner bind-mounted read-only,
and nothing else of the host; :mod:`.docker_process` talks to it, :mod:`.docker_orphans`
removes what dead graders left.

Every limit that matters is set here when the container is created, not in the image: the image
is built from files course staff edit, the container settings are the grader's.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import docker
import docker.errors
from docker.types import LogConfig, Mount, Ulimit

from grader.exceptions import SandboxFailure, SandboxUnavailable
from grader.sandbox.base import (
    GATEWAY_MOUNT,
    RUNNER_PATH,
    AgentProcess,
    LaunchSpec,
    Sandbox,
)
from grader.sandbox.docker_orphans import (
    OWNER_LABEL,
    ROLE_LABEL,
    SUBMISSION_LABEL,
    force_remove,
    one_line,
    owner_token,
    remove_orphans,
)
from grader.sandbox.docker_process import DockerAgentProcess, underlying_socket
from grader.sandbox.images import SANDBOX_IMAGE, SANDBOX_UID, docker_client, ensure_usable
from grader.sandbox.staging import StagedRun, stage, sweep_staged

_FIX = "run scripts/docker-engine.sh and grader sandbox build"


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
        client = self._connect()
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
        removed = remove_orphans(self._connect())
        sweep_staged()  # their staged copies (not counted: no container to report)
        return removed

    def launch(self, spec: LaunchSpec) -> AgentProcess:
        """Create, attach to and start one container for ``spec``."""
        if self.image_id is None:
            self.check()
        assert self.image_id is not None
        client = self._connect()
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
                *(
                    [Mount(GATEWAY_MOUNT, str(spec.gateway.folder), type="bind", read_only=True)]
                    if spec.gateway is not None
                    else []
                ),
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
            **spec.gateway_env(),
        }
        labels = {
            SUBMISSION_LABEL: spec.label,
            ROLE_LABEL: "sandbox",
            OWNER_LABEL: owner_token(),
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
            raise SandboxFailure(f"docker create failed: {one_line(exc)}") from exc

        container_id = str(created["Id"])
        try:
            # Attach before start so that not one byte of output is missed. Control bytes
            # such as the engine's detach keys (ctrl-p ctrl-q) can never reach the stream:
            # the grader only writes JSON lines, where control characters are escaped.
            raw = api.attach_socket(
                container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            sock = underlying_socket(raw)
            process = DockerAgentProcess(client, container_id, sock, raw, spec, staged)
            api.start(container_id)
        except (docker.errors.DockerException, OSError, SandboxFailure) as exc:
            force_remove(client, container_id)
            raise SandboxFailure(f"docker start failed: {one_line(exc)}") from exc
        return process

    # ----------------------------------------------------------------- helpers

    def _connect(self) -> docker.DockerClient:
        """The engine client (connected on first use); raises SandboxUnavailable if down."""
        if self._client is not None:
            return self._client
        try:
            client = docker_client()
            client.ping()
        except docker.errors.DockerException as exc:
            raise SandboxUnavailable(
                f"Docker engine not reachable ({one_line(exc)[:120]}); {_FIX}"
            ) from None
        self._client = client
        return client


def _require_default_seccomp(client: docker.DockerClient) -> None:
    """Refuse an engine that would start the sandbox without its default seccomp profile."""
    try:
        options = [str(option) for option in client.info().get("SecurityOptions") or []]
    except docker.errors.DockerException as exc:
        raise SandboxUnavailable(f"Docker engine not reachable ({one_line(exc)[:120]})") from None
    seccomp = [option for option in options if option.startswith("name=seccomp")]
    if not seccomp or any("profile=unconfined" in option for option in seccomp):
        raise SandboxUnavailable(
            "the Docker engine runs containers without a seccomp profile; start dockerd "
            "without --seccomp-profile=unconfined on a kernel with seccomp"
        )
