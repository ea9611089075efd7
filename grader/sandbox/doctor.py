"""``grader sandbox doctor``: what sandboxes are usable here, and what to run if not.

Every verdict comes from the sandboxes' own probes — :meth:`DockerSandbox.check` (engine,
image, seccomp profile, runner) and :meth:`BwrapSandbox.check` (bubblewrap, the sandbox user,
the seccomp filter, one real sandbox) — plus a hardened smoke run through
:meth:`DockerSandbox.launch` and the image's freshness from :mod:`.images`.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors

from grader.exceptions import GraderError, SandboxUnavailable

from .base import LaunchSpec
from .bwrap import BwrapSandbox
from .docker import DockerSandbox
from .hardening import SETUP_FIX
from .images import SANDBOX_IMAGE, SANDBOX_UID, docker_client, image_is_current

_ENGINE_FIX = "run scripts/docker-engine.sh and grader sandbox build"
_BUILD_FIX = "run scripts/build-base-image.sh"


@dataclass(frozen=True)
class DoctorCheck:
    """One line of ``grader sandbox doctor``.

    ``required`` marks checks the Docker sandbox cannot run without; the others (bubblewrap,
    image freshness) are reported but do not make the Docker sandbox unusable.
    """

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def doctor(image: str = SANDBOX_IMAGE, *, smoke: bool = True) -> list[DoctorCheck]:
    """Check the Docker sandbox (and, if usable, its image and a smoke run) and bubblewrap."""
    sandbox = DockerSandbox(image)
    checks = [_docker_check(sandbox)]
    if checks[0].ok:
        checks.append(_freshness_check(image))
        if smoke:
            checks.append(_smoke_check(sandbox))
    checks.append(_bwrap_check())
    return checks


def _docker_check(sandbox: DockerSandbox) -> DoctorCheck:
    try:
        sandbox.check()
        version = docker_client(timeout=10).version()
    except (GraderError, docker.errors.DockerException) as exc:
        return DoctorCheck("docker sandbox", False, _one_line(exc), _ENGINE_FIX)
    engine = f"{version.get('Version', '?')} (API {version.get('ApiVersion', '?')})"
    image_id = (sandbox.image_id or "?").removeprefix("sha256:")[:12]
    return DoctorCheck("docker sandbox", True, f"{sandbox.image} {image_id}, engine {engine}")


def _freshness_check(image: str) -> DoctorCheck:
    try:
        current = image_is_current(docker_client(timeout=10), image)
    except docker.errors.DockerException as exc:
        return DoctorCheck("sandbox image current", False, _one_line(exc), _BUILD_FIX, False)
    if current is None:
        return DoctorCheck(
            "sandbox image current", True, "no Dockerfile here to compare", "", False
        )
    if current:
        detail = "built from this Dockerfile and sandbox-requirements.txt"
        return DoctorCheck("sandbox image current", True, detail, "", False)
    detail = "Dockerfile or sandbox-requirements.txt changed since the build"
    return DoctorCheck("sandbox image current", False, detail, _BUILD_FIX, False)


def _smoke_check(sandbox: DockerSandbox) -> DoctorCheck:
    """Run a trivial agent through the Docker sandbox with every hardening option on."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="grader-doctor-") as tmp:
        agent = Path(tmp) / "agent"
        corpus = Path(tmp) / "corpus"
        agent.mkdir()
        corpus.mkdir()
        (agent / "agent.py").write_text(
            "import os\n"
            "def answer(q):\n"
            "    return {'answer': q, 'citations': [], 'confidence': 1.0,\n"
            "            'needs_human_review': False, 'uid': os.getuid()}\n"
        )
        try:
            proc = sandbox.launch(LaunchSpec(agent, corpus, "agent:answer", label="doctor"))
        except GraderError as exc:
            return DoctorCheck("hardened smoke run", False, _one_line(exc), "see the detail")
        try:
            ready = _read_line(proc.read, 30.0)
            proc.write(b'{"qid": "q1", "question": "ping"}\n')
            reply = _read_line(proc.read, 10.0)
        finally:
            info = proc.terminate()
    elapsed = time.monotonic() - started
    if _json_or_none(ready) == {"ready": True} and _reply_uid(reply) == SANDBOX_UID:
        detail = f"ready + one answer as uid {SANDBOX_UID} in {elapsed:.2f} s"
        return DoctorCheck("hardened smoke run", True, detail)
    detail = f"unexpected output {(ready + reply)[:200]!r}, exit {info.returncode}"
    return DoctorCheck("hardened smoke run", False, detail, "rebuild: grader sandbox build")


def _bwrap_check() -> DoctorCheck:
    """bubblewrap is the fallback sandbox (DESIGN §4): reported, never required for Docker."""
    sandbox = BwrapSandbox()
    try:
        sandbox.check()
        user = sandbox.run_as()
    except SandboxUnavailable as exc:
        return DoctorCheck("bubblewrap", False, _one_line(exc), SETUP_FIX, False)
    who = f"as user {user.name} (uid {user.uid})" if user else f"as uid {os.geteuid()}"
    return DoctorCheck("bubblewrap", True, f"{sandbox.bwrap} runs {who} with seccomp", "", False)


def _json_or_none(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _reply_uid(line: bytes) -> int | None:
    reply = _json_or_none(line)
    if isinstance(reply, dict) and isinstance(reply.get("answer"), dict):
        uid = reply["answer"].get("uid")
        return uid if isinstance(uid, int) else None
    return None


def _read_line(read: Callable[[float], bytes | None], timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    buffer = b""
    while b"\n" not in buffer:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        chunk = read(left)
        if not chunk:
            break
        buffer += chunk
    return buffer


def _one_line(value: object) -> str:
    return " ".join(str(value).split())[:300]
