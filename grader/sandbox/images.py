"""Building the Docker sandbox image ``grader-sandbox:latest`` (``grader sandbox build``).

Built from the repository's ``Dockerfile`` and ``sandbox-requirements.txt`` ``FROM`` either the
offline base (:mod:`.base_image`) or, in production, a public Python image
(``base_image="python:3.11-slim"``); it is also tagged ``grader-sandbox:<content hash>``. The
content hash covers the Dockerfile, the requirements, the build arguments and the base image id,
so rebuilding an unchanged recipe is a no-op that only re-points ``latest``.

The runner is not part of the image: :mod:`grader.sandbox.docker` mounts it read-only.
:mod:`grader.sandbox.doctor` says whether the image is current and the sandbox usable.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import docker
import docker.errors

from grader.exceptions import ImageBuildError, SandboxUnavailable

from .base_image import Log, base_recipe, ensure_base_image, image_exists, no_log

#: Repository of the sandbox image; ``:latest`` is what the Docker sandbox runs by default.
SANDBOX_REPOSITORY = "grader-sandbox"
SANDBOX_IMAGE = f"{SANDBOX_REPOSITORY}:latest"
#: The fixed non-root user (and group) the agent runs as. Not 65534 ("nobody"), so that the
#: agent shares its uid with no other process or file on the host.
SANDBOX_UID = 10001

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"
REQUIREMENTS = REPO_ROOT / "sandbox-requirements.txt"


def docker_client(timeout: int = 60) -> docker.DockerClient:
    """A client for the engine named by the environment (``DOCKER_HOST`` or the local socket).

    ``version="auto"`` negotiates the API version with the daemon, so Debian's 20.10 engine
    (API 1.41) works with the SDK's newer default.
    """
    return docker.from_env(version="auto", timeout=timeout)


def requirements_listed(path: Path = REQUIREMENTS) -> list[str]:
    """The requirement lines of ``sandbox-requirements.txt`` (no blanks, no comments)."""
    if not path.exists():
        return []
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def context_digest(dockerfile: Path = DOCKERFILE, requirements: Path = REQUIREMENTS) -> str:
    """Hash of what the sandbox image is built from in this checkout (not the base)."""
    h = hashlib.sha256()
    for path in (dockerfile, requirements):
        h.update(path.name.encode() + b"\0")
        h.update(path.read_bytes() if path.exists() else b"")
        h.update(b"\0")
    h.update(f"uid={SANDBOX_UID}".encode())
    return h.hexdigest()[:16]


def _build_context(dockerfile: Path, requirements: Path, wheels: list[Path]) -> io.BytesIO:
    """A tar with the Dockerfile, the requirements and their wheels; nothing else of the repo
    (and not .venv) is sent to the engine."""
    buffer = io.BytesIO()
    files = [("Dockerfile", dockerfile), ("sandbox-requirements.txt", requirements)]
    files += [(f"wheels/{wheel.name}", wheel) for wheel in wheels]
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, path in files:
            data = path.read_bytes() if path.exists() else b""
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


def _host_wheels(requirements: Path, dest: Path, log: Log) -> list[Path]:
    """Build wheels for the requirements (and their dependencies) on the host.

    The host's pip configuration (index, proxy, certificates) is what works on this machine;
    a build container has none of it, and may have no network at all. The wheels are built by
    this interpreter, which is Python 3.11 like the image, so their tags match.
    """
    log(f"pip wheel -r {requirements.name} (on the host)")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "-r", str(requirements), "-w", str(dest)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise ImageBuildError(f"pip wheel for {requirements.name} failed: {tail}")
    wheels = sorted(dest.glob("*.whl"))
    log(f"{len(wheels)} wheel(s): {', '.join(w.name for w in wheels)}")
    return wheels


def build_sandbox_image(
    client: docker.DockerClient,
    *,
    base_image: str | None = None,
    force: bool = False,
    dockerfile: Path = DOCKERFILE,
    requirements: Path = REQUIREMENTS,
    log: Log = no_log,
) -> str:
    """Build ``grader-sandbox:latest`` and return its image id.

    ``base_image`` ``None`` means the offline debootstrap base (made when missing, with pip
    added if the requirements list packages); otherwise any Python 3.11 image the engine has
    or can pull, e.g. ``python:3.11-slim``. An image already built from the same content is
    reused unless ``force``.
    """
    if not dockerfile.exists():
        raise ImageBuildError(f"{dockerfile} not found")
    if base_image is None:
        recipe = base_recipe(with_pip=bool(requirements_listed(requirements)))
        base_image = ensure_base_image(client, recipe, log=log)
    base_id = _image_id_or_none(client, base_image) or base_image

    build_args = {"BASE_IMAGE": base_image, "SANDBOX_UID": str(SANDBOX_UID)}
    ctx = context_digest(dockerfile, requirements)
    digest = hashlib.sha256(f"{ctx}\0{base_id}".encode()).hexdigest()[:16]
    content_ref = f"{SANDBOX_REPOSITORY}:{digest}"

    if not force and image_exists(client, content_ref):
        image = client.images.get(content_ref)
        image.tag(SANDBOX_REPOSITORY, "latest")
        log(f"{content_ref} already built from this content; tagged latest")
        return str(image.id)

    log(f"building {SANDBOX_IMAGE} from {base_image}")
    labels = {
        "grader.sandbox.context": ctx,
        "grader.sandbox.digest": digest,
        "grader.sandbox.base": base_image,
    }
    with tempfile.TemporaryDirectory(prefix="grader-wheels-") as wheel_dir:
        wheels = (
            _host_wheels(requirements, Path(wheel_dir), log)
            if requirements_listed(requirements)
            else []
        )
        context = _build_context(dockerfile, requirements, wheels)
    try:
        image, logs = client.images.build(
            fileobj=context,
            custom_context=True,
            tag=content_ref,
            buildargs=build_args,
            labels=labels,
            rm=True,
            forcerm=True,
            pull=False,
            nocache=force,
            timeout=1800,
        )
    except docker.errors.BuildError as exc:
        tail = " | ".join(_log_lines(exc.build_log)[-5:])
        raise ImageBuildError(f"sandbox image build failed: {tail}") from exc
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"sandbox image build failed: {exc}") from exc
    for line in _log_lines(logs):
        log(line)
    image.tag(SANDBOX_REPOSITORY, "latest")
    return str(image.id)


def _log_lines(logs: Any) -> list[str]:
    lines: list[str] = []
    for entry in logs or ():
        if not isinstance(entry, dict):
            continue
        text = entry.get("stream") or entry.get("error") or ""
        lines.extend(part for part in str(text).splitlines() if part.strip())
    return lines


def _image_id_or_none(client: docker.DockerClient, ref: str) -> str | None:
    try:
        return str(client.images.get(ref).id)
    except docker.errors.ImageNotFound:
        return None


def image_is_current(client: docker.DockerClient, image: str = SANDBOX_IMAGE) -> bool | None:
    """Whether ``image`` was built from this checkout's Dockerfile and requirements (``None``
    when this checkout has no Dockerfile to compare with)."""
    if not DOCKERFILE.exists():
        return None
    labels = client.images.get(image).labels or {}
    return bool(labels.get("grader.sandbox.context") == context_digest())


def ensure_usable(client: docker.DockerClient, image: str) -> str:
    """Return the id of ``image``; raise SandboxUnavailable when it is missing."""
    try:
        return str(client.images.get(image).id)
    except docker.errors.ImageNotFound:
        raise SandboxUnavailable(
            f"sandbox image {image} not found; run scripts/docker-engine.sh and "
            "grader sandbox build"
        ) from None
