"""The Docker sandbox at the AgentProcess level: protocol plumbing and isolation.

Each ``docker``-marked test starts one container with a tiny agent built in ``tmp_path``; the
agent reports what it can see or do from inside, and the test checks it against DESIGN §4's
Docker settings. The unmarked tests at the end need no engine (stream framing, image recipes).
"""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from grader.exceptions import SandboxFailure, SandboxUnavailable
from grader.sandbox.base import LaunchSpec, Limits
from grader.sandbox.base_image import BaseRecipe, apt_mirror
from grader.sandbox.docker import DockerSandbox
from grader.sandbox.docker_orphans import (
    OWNER_LABEL,
    ROLE_LABEL,
    SUBMISSION_LABEL,
    owner_token,
    remove_orphans,
)
from grader.sandbox.docker_process import DockerAgentProcess, _returncode
from grader.sandbox.images import SANDBOX_UID, requirements_listed

from .conftest import Driver

Launch = Callable[[LaunchSpec], Driver]
MakeSpec = Callable[..., LaunchSpec]

ECHO = """
import os
def answer(question):
    return {"answer": question, "citations": [], "confidence": 0.5,
            "needs_human_review": False, "cwd": os.getcwd()}
"""


def _containers(client: docker.DockerClient, label: str) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": f"{SUBMISSION_LABEL}={label}"}))


@pytest.mark.docker
def test_ready_handshake_and_round_trip(make_spec: MakeSpec, launch: Launch) -> None:
    driver = launch(make_spec(ECHO))
    driver.ready()
    assert driver.ask("How does chunking work?")["answer"] == "How does chunking work?"
    # Non-ASCII text survives both directions (the image runs with a UTF-8 locale).
    assert driver.ask("Qual foi o placar? ¿Qué? Schöne Grüße 🙂")["answer"].endswith("🙂")
    assert driver.ask("x")["cwd"] == "/agent"


@pytest.mark.docker
def test_stdout_prints_go_to_stderr_tail_capped(make_spec: MakeSpec, launch: Launch) -> None:
    body = """
import sys
def setup():
    sys.stderr.write("x" * 200_000)
    print("stray print")  # the runner sends the agent's stdout to stderr
    sys.stdout.flush()
    sys.stderr.write("END-MARKER")
    sys.stderr.flush()
def answer(question):
    return {"answer": "ok"}
"""
    spec = make_spec(body, setup="agent:setup", limits=Limits(max_stderr_bytes=1000))
    driver = launch(spec)
    driver.ready()
    assert driver.ask("q")["answer"] == "ok"
    tail = driver.process.stderr_tail()
    assert len(tail) <= 1000
    assert tail.endswith("END-MARKER")
    assert "stray print" in tail


@pytest.mark.docker
def test_large_answer_line_passes_intact(make_spec: MakeSpec, launch: Launch) -> None:
    body = """
def answer(question):
    return {"answer": "y" * 900_000}
"""
    driver = launch(make_spec(body))
    driver.ready()
    assert driver.ask("big")["answer"] == "y" * 900_000


@pytest.mark.docker
def test_read_honours_timeout(make_spec: MakeSpec, launch: Launch) -> None:
    body = """
import time
def answer(question):
    time.sleep(1.5)
    return {"answer": "late"}
"""
    driver = launch(make_spec(body))
    driver.ready()
    driver.process.write(b'{"qid": "q1", "question": "slow"}\n')
    started = time.monotonic()
    assert driver.process.read(0.3) is None
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 1.0
    assert driver.line(5.0) == {"qid": "q1", "answer": {"answer": "late"}}


@pytest.mark.docker
def test_write_never_hangs_when_the_agent_stops_reading(
    make_spec: MakeSpec, launch: Launch
) -> None:
    body = """
import time
def setup():
    time.sleep(60)  # never reads stdin
def answer(question):
    return {"answer": "never"}
"""
    driver = launch(make_spec(body, setup="agent:setup", limits=Limits(case_timeout_s=1.0)))
    started = time.monotonic()
    with pytest.raises(OSError):
        for _ in range(200):  # 200 MB: far beyond every pipe and socket buffer
            driver.process.write(b"z" * (1 << 20))
    assert time.monotonic() - started < 10


@pytest.mark.docker
def test_bad_entrypoint_reports_fatal_and_exit_code(make_spec: MakeSpec, launch: Launch) -> None:
    driver = launch(make_spec(ECHO, entrypoint="missing_module:answer"))
    fatal = driver.line()
    assert "ModuleNotFoundError" in fatal["fatal"]
    driver.wait_eof()
    info = driver.process.terminate()
    assert info.returncode == 3
    assert info.oom_killed is False


@pytest.mark.docker
def test_runs_as_non_root_without_capabilities(make_spec: MakeSpec, launch: Launch) -> None:
    body = """
import os
def answer(question):
    status = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        status[key] = value.strip()
    return {"answer": "ok", "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
            "groups": os.getgroups(), "status": status}
"""
    driver = launch(make_spec(body))
    driver.ready()
    info = driver.ask("who am i")
    assert info["uid"] == info["euid"] == SANDBOX_UID
    assert info["gid"] == SANDBOX_UID
    assert info["groups"] in ([], [SANDBOX_UID])
    status = info["status"]
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[cap], 16) == 0, (cap, status[cap])
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"  # the engine's default seccomp filter is on


@pytest.mark.docker
def test_no_network_at_all(make_spec: MakeSpec, launch: Launch, docker_api: Any) -> None:
    # A listener on every host interface: if the container could reach the host (through
    # the bridge gateway or a shared loopback) the connection would succeed.
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen()
    port = listener.getsockname()[1]
    ipam = docker_api.networks.get("bridge").attrs["IPAM"]["Config"][0]
    # Older engines leave Gateway out; the bridge's gateway is then the subnet's first host.
    gateway = ipam.get("Gateway") or str(next(ipaddress.ip_network(ipam["Subnet"]).hosts()))
    targets = [["1.1.1.1", 53], ["127.0.0.1", 6379], ["127.0.0.1", port], [gateway, port]]
    body = f"""
import os, socket
TARGETS = {targets!r}
def answer(question):
    results = {{}}
    for host, port in TARGETS:
        try:
            socket.create_connection((host, port), timeout=2).close()
            results[f"{{host}}:{{port}}"] = "connected"
        except OSError as exc:
            results[f"{{host}}:{{port}}"] = type(exc).__name__
    try:
        socket.getaddrinfo("pypi.org", 443)
        dns = "resolved"
    except OSError as exc:
        dns = type(exc).__name__
    return {{"answer": "ok", "results": results, "dns": dns,
            "interfaces": sorted(os.listdir("/sys/class/net"))}}
"""
    try:
        driver = launch(make_spec(body))
        driver.ready()
        report = driver.ask("connect")
    finally:
        listener.close()
    assert report["interfaces"] == ["lo"]
    assert "connected" not in report["results"].values(), report["results"]
    assert report["dns"] != "resolved"


@pytest.mark.docker
def test_filesystem_read_only_except_small_noexec_tmp(make_spec: MakeSpec, launch: Launch) -> None:
    body = """
import errno, os, subprocess
def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
def write(path):
    def go():
        with open(path, "a") as handle:
            handle.write("pwned")
    return go
def fill_tmp():
    with open("/tmp/fill", "wb") as handle:
        for _ in range(32):          # 32 MiB into an 8 MiB /tmp
            handle.write(b"\\0" * (1 << 20))
            handle.flush()
def run_tmp_script():
    with open("/tmp/x.sh", "w") as handle:
        handle.write("#!/bin/sh\\necho executed\\n")
    os.chmod("/tmp/x.sh", 0o755)
    subprocess.run(["/tmp/x.sh"], check=True)
def answer(question):
    return {"answer": "ok",
            "root": attempt(write("/pwned")),
            "usr": attempt(write("/usr/pwned")),
            "var_tmp": attempt(write("/var/tmp/pwned")),
            "etc_passwd": attempt(write("/etc/passwd")),
            "agent": attempt(write("/agent/pwned")),
            "agent_code": attempt(write("/agent/agent.py")),
            "corpus": attempt(write("/corpus/rag-basics.md")),
            "runner": attempt(write("/grader/runner.py")),
            "tmp": attempt(write("/tmp/notes.txt")),
            "tmp_exec": attempt(run_tmp_script),
            "tmp_fill": attempt(fill_tmp),
            "docker_sock": os.path.exists("/var/run/docker.sock") or os.path.exists("/run/docker.sock"),
            "ro_mounts": sorted(line.split()[1] for line in open("/proc/self/mounts")
                                if "ro" in line.split()[3].split(","))}
"""
    spec = make_spec(body, limits=Limits(tmp_mb=8))
    driver = launch(spec)
    driver.ready()
    report = driver.ask("write")
    # /var/tmp is world-writable in the image: only the read-only root stops that write.
    for key in ("var_tmp", "agent"):
        assert report[key] == "EROFS", (key, report[key])
    # The staged copies of existing files are the grader's, 0644: permissions stop the write
    # first, and the mounts under them are read-only as well.
    for key in ("agent_code", "corpus"):
        assert report[key] in ("EROFS", "EACCES"), (key, report[key])
    assert {"/", "/agent", "/corpus", "/grader/runner.py"} <= set(report["ro_mounts"])
    for key in ("root", "usr", "etc_passwd", "runner"):
        assert report[key] in ("EROFS", "EACCES"), (key, report[key])
    assert report["tmp"] == "ok"
    assert report["tmp_exec"] == "EACCES"
    assert report["tmp_fill"] == "ENOSPC"
    assert report["docker_sock"] is False


@pytest.mark.docker
def test_environment_holds_no_host_variables(
    make_spec: MakeSpec, launch: Launch, docker_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRADER_HOST_CANARY", "canary-7f3a")
    body = """
import os
def answer(question):
    return {"answer": "ok", "env": dict(os.environ)}
"""
    spec = make_spec(body)
    driver = launch(spec)
    driver.ready()
    env = driver.ask("env")["env"]
    assert env["AGENT_DIR"] == "/agent"
    assert env["CORPUS_DIR"] == "/corpus"
    assert env["AGENT_ENTRYPOINT"] == "agent:answer"
    assert env["AGENT_SETUP"] == ""
    assert env["HOME"] == "/tmp"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    image_env = docker_api.images.get("grader-sandbox:latest").attrs["Config"]["Env"] or []
    allowed = {
        "AGENT_DIR",
        "CORPUS_DIR",
        "AGENT_ENTRYPOINT",
        "AGENT_SETUP",
        "HOME",
        "PYTHONDONTWRITEBYTECODE",
        "HOSTNAME",  # set by the engine to the container's host name ("sandbox")
        *(item.partition("=")[0] for item in image_env),
    }
    assert set(env) <= allowed, set(env) - allowed
    assert "canary-7f3a" not in repr(env)
    assert env.get("HOSTNAME") == "sandbox"


@pytest.mark.docker
def test_memory_bomb_is_oom_killed(make_spec: MakeSpec, launch: Launch) -> None:
    body = """
def answer(question):
    hoard = []
    while True:
        hoard.append(b"m" * (8 << 20))  # touched pages, so they really count
"""
    driver = launch(make_spec(body, limits=Limits(memory_mb=64)))
    driver.ready()
    driver.process.write(b'{"qid": "q1", "question": "eat"}\n')
    driver.wait_eof(timeout=30)
    info = driver.process.terminate()
    assert info.oom_killed is True
    assert info.returncode == -9


@pytest.mark.docker
def test_fork_bomb_is_contained_and_terminable(
    make_spec: MakeSpec, launch: Launch, docker_api: Any
) -> None:
    body = """
import os, time
def bomb():
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.01)
def answer(question):
    forked, error = 0, None
    while forked < 1000:
        try:
            pid = os.fork()
        except OSError as exc:
            error = exc.strerror
            break
        if pid == 0:
            bomb()
        forked += 1
    return {"answer": "done", "forked": forked, "error": error}
"""
    spec = make_spec(body, limits=Limits(pids=24))
    driver = launch(spec)
    driver.ready()
    report = driver.ask("fork")
    assert report["forked"] < 24
    assert report["error"] == "Resource temporarily unavailable"
    started = time.monotonic()
    info = driver.process.terminate()
    assert time.monotonic() - started < 10
    assert info.returncode == -9
    assert _containers(docker_api, spec.label) == []


@pytest.mark.docker
def test_terminate_removes_container_and_is_idempotent(
    make_spec: MakeSpec, launch: Launch, docker_api: Any
) -> None:
    spec = make_spec(ECHO)
    driver = launch(spec)
    driver.ready()
    (container,) = _containers(docker_api, spec.label)
    assert container.labels[ROLE_LABEL] == "sandbox"
    attrs = container.attrs
    assert attrs["HostConfig"]["NetworkMode"] == "none"
    assert attrs["HostConfig"]["ReadonlyRootfs"] is True
    assert attrs["HostConfig"]["Privileged"] is False
    first = driver.process.terminate()
    assert first.returncode == -9  # killed by us while waiting for a question
    assert first.oom_killed is False
    assert _containers(docker_api, spec.label) == []
    assert docker_api.api.containers(all=True, filters={"label": f"{ROLE_LABEL}=sandbox"}) == []
    assert driver.process.terminate() == first
    assert driver.process.read(0.1) == b""
    with pytest.raises(OSError):
        driver.process.write(b'{"qid": "q", "question": "late"}\n')


@pytest.mark.docker
def test_terminate_after_external_removal_does_not_raise(
    make_spec: MakeSpec, launch: Launch, docker_api: Any
) -> None:
    spec = make_spec(ECHO)
    driver = launch(spec)
    driver.ready()
    docker_api.api.remove_container(_containers(docker_api, spec.label)[0].id, force=True)
    driver.wait_eof(timeout=10)
    info = driver.process.terminate()
    assert info.returncode is None


@pytest.fixture
def stray_containers(docker_api: Any) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for container_id in made:
        with contextlib.suppress(docker.errors.NotFound):
            docker_api.api.remove_container(container_id, force=True)


@pytest.mark.docker
def test_remove_orphans_spares_live_owners(
    docker_api: Any, docker_sandbox: DockerSandbox, stray_containers: list[str]
) -> None:
    def start(owner: str) -> str:
        created = docker_api.api.create_container(
            docker_sandbox.image_id,
            command=["python3", "-c", "import time; time.sleep(60)"],
            labels={ROLE_LABEL: "sandbox", SUBMISSION_LABEL: "orphan-test", OWNER_LABEL: owner},
            host_config=docker_api.api.create_host_config(network_mode="none"),
        )
        stray_containers.append(created["Id"])
        docker_api.api.start(created["Id"])
        return str(created["Id"])

    host = socket.gethostname()
    dead = start(f"{host}:999999999:1")  # no such pid: its grader is gone
    live = start(owner_token())  # this test process: alive
    foreign = start("another-host:1:1")  # cannot tell: keep
    # Another worker's container, created but not started yet: in use, keep.
    fresh = docker_api.api.create_container(
        docker_sandbox.image_id,
        command=["true"],
        labels={ROLE_LABEL: "sandbox", SUBMISSION_LABEL: "orphan-test", OWNER_LABEL: owner_token()},
        host_config=docker_api.api.create_host_config(network_mode="none"),
    )["Id"]
    stray_containers.append(fresh)
    assert remove_orphans(docker_api) == 1
    remaining = {c["Id"] for c in docker_api.api.containers(all=True)}  # no inspect: no race
    assert dead not in remaining
    assert {live, foreign, fresh} <= remaining
    # Past the age limit every sandbox container goes, whoever owns it.
    assert remove_orphans(docker_api, max_age_s=0) == 3


@pytest.mark.docker
def test_check_reports_missing_image_with_fix() -> None:
    with pytest.raises(SandboxUnavailable, match="grader sandbox build"):
        DockerSandbox(image="grader-sandbox:no-such-tag").check()


@pytest.mark.docker
def test_private_agent_folder_is_staged_readable(
    make_spec: MakeSpec, launch: Callable[[LaunchSpec], Driver]
) -> None:
    """A grader-private (0700) agent folder still runs: the container gets a readable copy."""
    spec = make_spec(ECHO)
    spec.agent_dir.chmod(0o700)
    driver = launch(spec)
    driver.ready()
    assert driver.ask("ping")["answer"] == "ping"


@pytest.mark.docker
def test_missing_agent_folder_is_an_infrastructure_error(
    make_spec: MakeSpec, docker_sandbox: DockerSandbox
) -> None:
    """A launch whose agent folder vanished fails as a SandboxFailure naming it."""
    spec = make_spec(ECHO)
    shutil.rmtree(spec.agent_dir)
    with pytest.raises(SandboxFailure, match=r"agent folder .* does not exist"):
        docker_sandbox.launch(spec)


# --------------------------------------------------------------------------- no engine needed


class _GoneApi:
    """An engine API where the container has already disappeared."""

    def inspect_container(self, container_id: str) -> Any:
        raise docker.errors.NotFound("gone")

    def remove_container(self, container_id: str, **kwargs: Any) -> None:
        raise docker.errors.NotFound("gone")


class _GoneClient:
    api = _GoneApi()


def _frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def test_attach_stream_demultiplexing_across_split_frames() -> None:
    ours, engine = socket.socketpair()
    spec = LaunchSpec(Path("/"), Path("/"), "agent:answer", limits=Limits(max_stderr_bytes=8))
    process = DockerAgentProcess(_GoneClient(), "c" * 64, ours, None, spec)
    try:
        stream = (
            _frame(1, b'{"ready": true}\n')
            + _frame(2, b"warning: 0123456789")
            + _frame(1, b"")
            + _frame(1, b'{"qid": "q", "answer": {}}\n')
        )
        # Byte-by-byte: every header and payload boundary falls mid-recv at least once.
        for i in range(len(stream)):
            engine.sendall(stream[i : i + 1])
        received = b""
        deadline = time.monotonic() + 5
        while received.count(b"\n") < 2 and time.monotonic() < deadline:
            received += process.read(1.0) or b""
        assert received == b'{"ready": true}\n{"qid": "q", "answer": {}}\n'
        assert process.stderr_tail() == "23456789"  # capped to the last 8 bytes
        assert process.read(0.05) is None
        engine.close()
        assert process.read(5.0) == b""
        assert process.terminate().returncode is None  # already gone: no error
    finally:
        engine.close()
        process.terminate()


def test_exit_status_follows_subprocess_conventions() -> None:
    assert _returncode(0) == 0
    assert _returncode(3) == 3
    assert _returncode(137) == -9  # docker-init: child killed by SIGKILL
    assert _returncode(143) == -15
    assert _returncode(None) is None


def test_apt_mirror_reads_both_source_formats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GRADER_DEBOOTSTRAP_MIRROR", raising=False)
    deb822 = tmp_path / "debian.sources"
    deb822.write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
    one_line = tmp_path / "other.list"
    one_line.write_text(
        "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://list.example/d bookworm main\n"
    )
    assert apt_mirror("bookworm", (deb822,)) == "http://mirror.example/debian"
    assert apt_mirror("bookworm", (tmp_path / "missing.list", one_line)) == "http://list.example/d"
    assert apt_mirror("trixie", (deb822, one_line)) == "http://deb.debian.org/debian"
    monkeypatch.setenv("GRADER_DEBOOTSTRAP_MIRROR", "http://override.example/debian")
    assert apt_mirror("bookworm", (deb822,)) == "http://override.example/debian"


def test_base_recipe_tag_tracks_its_inputs(tmp_path: Path) -> None:
    plain = BaseRecipe(mirror="http://m.example/debian")
    assert plain.image == BaseRecipe(mirror="http://m.example/debian/").image
    assert plain.image.startswith("grader-base:")
    assert plain.digest != BaseRecipe(mirror="http://other.example/debian").digest
    with_pip = BaseRecipe(packages=("python3", "python3-pip"), mirror="http://m.example/debian")
    assert plain.digest != with_pip.digest
    requirements = tmp_path / "req.txt"
    requirements.write_text("# staff-controlled\n\nnumpy==1.26.4  # pinned\n  \n")
    assert requirements_listed(requirements) == ["numpy==1.26.4"]
    assert requirements_listed(tmp_path / "absent.txt") == []
