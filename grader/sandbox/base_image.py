"""The offline base image ``grader-base:<recipe hash>`` the sandbox image is built ``FROM``.

Made with ``debootstrap`` (a minimal Debian with Python) and ``docker import``, for machines that
cannot pull from a registry. Its tag is a hash of its recipe (suite, variant, packages, mirror),
so an existing tag means the recipe was already built and the slow debootstrap step (about
40 s) is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from grader.exceptions import ImageBuildError

#: Repository of the offline (debootstrap) base images; the tag is the recipe hash.
BASE_REPOSITORY = "grader-base"
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


def no_log(_message: str) -> None:
    pass


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
    log: Log = no_log,
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
