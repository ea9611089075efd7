"""Building the Docker sandbox image, and checking that the Docker sandbox can run here.

Two images are involved:

``grader-base:<recipe hash>``
    An offline base made with ``debootstrap`` (a minimal Debian with Python) and ``docker
    import``, for machines that cannot pull from a registry. Its tag is a hash of its recipe
    (suite, variant, packages, mirror), so an existing tag means the recipe was already built
    and the slow debootstrap step (about 40 s) is skipped.

``grader-sandbox:latest`` (and ``grader-sandbox:<content hash>``)
    Built from the repository's ``Dockerfile`` and ``sandbox-requirements.txt`` ``FROM`` either
    that base or, in production, a public Python image (``base_image="python:3.11-slim"``).
    The content hash covers the Dockerfile, the requirements, the build arguments and the base
    image id, so rebuilding an unchanged recipe is a no-op that only re-points ``latest``.

The runner is not part of either image: :mod:`grader.sandbox.docker` mounts it read-only.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

from grader.exceptions import SandboxFailure, SandboxUnavailable

#: Repository of the sandbox image; ``:latest`` is what the Docker sandbox runs by default.
SANDBOX_REPOSITORY = "grader-sandbox"
SANDBOX_IMAGE = f"{SANDBOX_REPOSITORY}:latest"
#: Repository of the offline (debootstrap) base images; the tag is the recipe hash.
BASE_REPOSITORY = "grader-base"
#: The fixed non-root user (and group) the agent runs as. Not 65534 ("nobody"), so that the
#: agent shares its uid with no other process or file on the host.
SANDBOX_UID = 10001

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"
REQUIREMENTS = REPO_ROOT / "sandbox-requirements.txt"

DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: ``python3`` rather than ``python3-minimal``: the minimal package lacks much of the standard
#: library (``http``, ``email``, ...) that agents legitimately use.
BASE_PACKAGES: tuple[str, ...] = ("python3",)
#: Bump when the way a base is made changes (cleanup steps, import changes), to force rebuilds.
BASE_RECIPE_VERSION = 1

_IMAGE_ENV = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
)

Log = Callable[[str], None]


def _no_log(_message: str) -> None:
    pass


class ImageBuildError(SandboxFailure):
    """Building the base or the sandbox image failed; the message says what to do."""


def docker_client(timeout: int = 60) -> docker.DockerClient:
    """A client for the engine named by the environment (``DOCKER_HOST`` or the local socket).

    ``version="auto"`` negotiates the API version with the daemon, so Debian's 20.10 engine
    (API 1.41) works with the SDK's newer default.
    """
    return docker.from_env(version="auto", timeout=timeout)


# --------------------------------------------------------------------------- base image


@dataclass(frozen=True)
class BaseRecipe:
    """Everything that determines the content of an offline base image."""

    suite: str = DEFAULT_SUITE
    variant: str = "minbase"
    packages: tuple[str, ...] = BASE_PACKAGES
    mirror: str = DEFAULT_MIRROR

    @property
    def digest(self) -> str:
        """A stable hash of the recipe; the base image's tag."""
        payload = json.dumps(
            {
                "version": BASE_RECIPE_VERSION,
                "suite": self.suite,
                "variant": self.variant,
                "packages": sorted(self.packages),
                "mirror": self.mirror.rstrip("/"),
                "env": list(_IMAGE_ENV),
            },
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @property
    def image(self) -> str:
        """The image reference, ``grader-base:<digest>``."""
        return f"{BASE_REPOSITORY}:{self.digest}"


def apt_mirror(
    suite: str = DEFAULT_SUITE,
    sources: tuple[Path, ...] | None = None,
) -> str:
    """The Debian mirror this machine's apt uses for ``suite`` (falls back to deb.debian.org).

    Reads one-line ``.list`` files and deb822 ``.sources`` files, the two formats apt reads;
    ``GRADER_DEBOOTSTRAP_MIRROR`` overrides. Using apt's own mirror matters offline: it is the
    one mirror this machine is known to reach.
    """
    override = os.environ.get("GRADER_DEBOOTSTRAP_MIRROR")
    if override:
        return override
    if sources is None:
        folder = Path("/etc/apt/sources.list.d")
        found = sorted(folder.glob("*.sources")) + sorted(folder.glob("*.list"))
        sources = (Path("/etc/apt/sources.list"), *found)
    for path in sources:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        uri = (
            _mirror_from_deb822(text, suite)
            if path.suffix == ".sources"
            else _mirror_from_list(text, suite)
        )
        if uri:
            return uri
    return DEFAULT_MIRROR


def _mirror_from_list(text: str, suite: str) -> str | None:
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        parts = line.split()
        if not parts or parts[0] != "deb":
            continue
        # Skip an options block such as "[signed-by=... arch=amd64]".
        rest = parts[1:]
        if rest and rest[0].startswith("["):
            while rest and not rest[0].endswith("]"):
                rest = rest[1:]
            rest = rest[1:]
        if len(rest) >= 2 and rest[1] == suite:
            return rest[0]
    return None


def _mirror_from_deb822(text: str, suite: str) -> str | None:
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for raw in stanza.splitlines():
            if raw.startswith("#") or ":" not in raw or raw[:1].isspace():
                continue
            key, _, value = raw.partition(":")
            fields[key.strip().lower()] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        if "deb" not in fields.get("types", "").split():
            continue
        if suite in fields.get("suites", "").split():
            uris = fields.get("uris", "").split()
            if uris:
                return uris[0]
    return None


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


def base_recipe(*, with_pip: bool = False, mirror: str | None = None) -> BaseRecipe:
    """The offline base recipe for this machine; ``with_pip`` adds pip for the requirements."""
    packages = BASE_PACKAGES + (("python3-pip",) if with_pip else ())
    return BaseRecipe(packages=packages, mirror=mirror or apt_mirror(DEFAULT_SUITE))


def image_exists(client: docker.DockerClient, ref: str) -> bool:
    """True when the engine has an image named ``ref``."""
    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def ensure_base_image(
    client: docker.DockerClient,
    recipe: BaseRecipe | None = None,
    *,
    log: Log = _no_log,
) -> str:
    """Return the reference of the offline base image for ``recipe``, making it if missing.

    Making it runs ``debootstrap`` (needs root and the ``debootstrap`` package; about 40 s),
    trims the apt caches, and streams the folder as a tar into ``docker import``.
    """
    recipe = recipe or base_recipe()
    if image_exists(client, recipe.image):
        log(f"base image {recipe.image} already built (recipe cached)")
        return recipe.image
    if shutil.which("debootstrap") is None:
        raise ImageBuildError(
            "debootstrap is not installed; run scripts/build-base-image.sh "
            "(or apt-get install -y debootstrap), or build with --base python:3.11-slim"
        )
    if os.geteuid() != 0:
        raise ImageBuildError("making the offline base image with debootstrap needs root")

    # /var/tmp, not /tmp: the root file system is ~250 MB and /tmp may be a small tmpfs.
    work = Path(tempfile.mkdtemp(prefix="grader-base-", dir="/var/tmp"))
    rootfs = work / "rootfs"
    try:
        started = time.monotonic()
        log(f"debootstrap {recipe.suite} ({', '.join(recipe.packages)}) from {recipe.mirror}")
        cmd = [
            "debootstrap",
            f"--variant={recipe.variant}",
            f"--include={','.join(recipe.packages)}",
            recipe.suite,
            str(rootfs),
            recipe.mirror,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-5:])
            raise ImageBuildError(f"debootstrap failed (exit {done.returncode}): {tail}")
        log(f"debootstrap done in {time.monotonic() - started:.0f} s")
        _trim_rootfs(rootfs)

        started = time.monotonic()
        _import_rootfs(client, rootfs, recipe)
        log(f"imported {recipe.image} in {time.monotonic() - started:.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return recipe.image


def _trim_rootfs(rootfs: Path) -> None:
    """Drop what only debootstrap needed: downloaded packages and apt lists (~30 MB)."""
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*"):
        for path in rootfs.glob(pattern):
            if path.is_file() or path.is_symlink():
                path.unlink()
    tmp = rootfs / "tmp"
    tmp.mkdir(exist_ok=True)
    tmp.chmod(0o1777)


def _import_rootfs(client: docker.DockerClient, rootfs: Path, recipe: BaseRecipe) -> None:
    """Stream ``tar -C rootfs -c .`` into the engine's image import, without a temp tarball."""
    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert tar.stdout is not None

    def chunks() -> Iterator[bytes]:
        assert tar.stdout is not None
        while chunk := tar.stdout.read(1 << 20):
            yield chunk

    changes = [f"ENV {item}" for item in _IMAGE_ENV]
    changes += [f"LABEL grader.base.recipe={recipe.digest}", 'CMD ["python3"]']
    repository, _, tag = recipe.image.partition(":")
    try:
        client.api.import_image(
            src=chunks(), repository=repository, tag=tag, changes=changes, stream_src=True
        )
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"docker import of the base image failed: {exc}") from exc
    finally:
        tar.stdout.close()
        stderr = tar.stderr.read().decode(errors="replace") if tar.stderr else ""
        code = tar.wait()
    if code != 0:
        raise ImageBuildError(f"tar of the base rootfs failed (exit {code}): {stderr.strip()}")
    if not image_exists(client, recipe.image):
        raise ImageBuildError(f"docker import finished but {recipe.image} is missing")


# --------------------------------------------------------------------------- sandbox image


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
    log: Log = _no_log,
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


# --------------------------------------------------------------------------- doctor


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
    """Check the Docker engine, the sandbox image, a hardened smoke run and bubblewrap."""
    checks: list[DoctorCheck] = []
    engine_fix = "run scripts/docker-engine.sh"
    build_fix = "run scripts/build-base-image.sh"
    client: docker.DockerClient | None = None
    try:
        client = docker_client(timeout=10)
        version = client.version()
        checks.append(
            DoctorCheck(
                "docker engine",
                True,
                f"{version.get('Version', '?')} (API {version.get('ApiVersion', '?')})",
            )
        )
    except docker.errors.DockerException as exc:
        checks.append(DoctorCheck("docker engine", False, _one_line(exc), engine_fix))

    if client is not None:
        try:
            img = client.images.get(image)
            labels = img.labels or {}
            checks.append(DoctorCheck("sandbox image", True, f"{image} {img.short_id}"))
            built_from = labels.get("grader.sandbox.context")
            current = context_digest() if DOCKERFILE.exists() else None
            if current is not None:
                fresh = built_from == current
                checks.append(
                    DoctorCheck(
                        "sandbox image current",
                        fresh,
                        "built from this Dockerfile and sandbox-requirements.txt"
                        if fresh
                        else "Dockerfile or sandbox-requirements.txt changed since the build",
                        "" if fresh else build_fix,
                        required=False,
                    )
                )
        except docker.errors.ImageNotFound:
            checks.append(DoctorCheck("sandbox image", False, f"{image} not found", build_fix))
            smoke = False
        except docker.errors.DockerException as exc:
            checks.append(DoctorCheck("sandbox image", False, _one_line(exc), engine_fix))
            smoke = False
        if smoke:
            checks.append(_smoke_check(image))

    checks.append(_bwrap_check())
    return checks


def _smoke_check(image: str) -> DoctorCheck:
    """Run a trivial agent through :class:`DockerSandbox` with every hardening option on."""
    # Imported here: docker.py imports this module for the image name and uid.
    from grader.sandbox.base import LaunchSpec
    from grader.sandbox.docker import DockerSandbox

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
        for path in (Path(tmp), agent, corpus):
            path.chmod(0o755)
        (agent / "agent.py").chmod(0o644)
        spec = LaunchSpec(agent, corpus, "agent:answer", label="doctor")
        try:
            sandbox = DockerSandbox(image)
            sandbox.check()
            proc = sandbox.launch(spec)
        except Exception as exc:
            return DoctorCheck("hardened smoke run", False, _one_line(exc), "see the detail")
        try:
            ready = _read_line(proc.read, 30.0)
            proc.write(b'{"qid": "q1", "question": "ping"}\n')
            reply = _read_line(proc.read, 10.0)
        finally:
            info = proc.terminate()
    ok = _json_or_none(ready) == {"ready": True} and _reply_uid(reply) == SANDBOX_UID
    elapsed = time.monotonic() - started
    if ok:
        return DoctorCheck(
            "hardened smoke run",
            True,
            f"ready + one answer as uid {SANDBOX_UID} in {elapsed:.2f} s",
        )
    detail = f"unexpected output {(ready + reply)[:200]!r}, exit {info.returncode}"
    return DoctorCheck("hardened smoke run", False, detail, "rebuild: grader sandbox build")


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


def _bwrap_check() -> DoctorCheck:
    """bubblewrap is the fallback sandbox (DESIGN §4); not required for Docker.

    Runs the real :meth:`BwrapSandbox.check`: bubblewrap present, the sandbox user (when the
    grader is root), the seccomp filter compiled, and one sandbox started with every option.
    """
    # Imported here: bwrap.py pulls in the process launcher, which Docker-only users never need.
    from grader.sandbox.bwrap import BwrapSandbox
    from grader.sandbox.hardening import SETUP_FIX

    sandbox = BwrapSandbox()
    try:
        sandbox.check()
        user = sandbox.run_as()
    except SandboxUnavailable as exc:
        return DoctorCheck("bubblewrap", False, _one_line(exc), SETUP_FIX, False)
    who = f"as user {user.name} (uid {user.uid})" if user else f"as uid {os.geteuid()}"
    return DoctorCheck("bubblewrap", True, f"{sandbox.bwrap} runs {who} with seccomp", "", False)


def _one_line(value: object) -> str:
    text = " ".join(str(value).split())
    return text[:300]


def ensure_usable(client: docker.DockerClient, image: str) -> str:
    """Return the id of ``image``; raise SandboxUnavailable when it is missing."""
    try:
        return str(client.images.get(image).id)
    except docker.errors.ImageNotFound:
        raise SandboxUnavailable(
            f"sandbox image {image} not found; run scripts/docker-engine.sh and "
            "grader sandbox build"
        ) from None
