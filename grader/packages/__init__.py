"""Agent packages: validate an upload, unpack it safely, and read its ``agent.toml`` (DESIGN §4).

A package arrives as a ``.zip``, a ``.tar.gz`` or (for local runs) a folder. Everything in it
is hostile until proven otherwise, so unpacking happens in three steps:

1. **Headers.** Every member's name, type and declared size is checked before a single byte is
   decompressed: no absolute paths, ``..``, drive letters or backslashes; no links, devices,
   fifos or other special members; member count, path length and depth, per-file and total
   size, and (for zip) compression ratio within :class:`ArchiveLimits`.
2. **Read-through.** Every file is decompressed into nothing while the bytes are counted, so a
   corrupt, truncated or size-lying archive is rejected before anything is written.
3. **Write.** Only then is the destination created and filled, by this module (never by
   ``extractall``), with fixed permissions (files 0644, folders 0755), refusing to follow or
   replace anything, and counting written bytes against the caps once more.

Any failure raises :class:`~grader.exceptions.PackageError` with a one-line reason and leaves
the destination as it was found: absent, or empty.

A folder is checked against the same rules and copied, so the sandbox always mounts an
immutable private copy rather than a folder its owner can still change.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from grader.exceptions import PackageError

from .archives import extract_archive
from .entries import discard
from .folders import copy_folder
from .limits import DEFAULT_LIMITS, ArchiveLimits, package_error
from .manifest import MANIFEST_NAME, AgentManifest, parse_manifest

__all__ = [
    "DEFAULT_LIMITS",
    "MANIFEST_NAME",
    "PACKAGE_DIRNAME",
    "AgentManifest",
    "AgentPackage",
    "ArchiveLimits",
    "extract_archive",
    "parse_manifest",
    "prepare_package",
    "sha256_file",
]

#: The folder inside ``prepare_package``'s ``workdir`` that receives the package copy.
PACKAGE_DIRNAME = "package"


@dataclass(frozen=True)
class AgentPackage:
    """A package ready to mount: its private copy, its manifest and its content hash."""

    #: The folder holding ``agent.toml`` (inside ``workdir``; mount it read-only).
    root: Path
    manifest: AgentManifest
    #: SHA-256 of the archive bytes; for a folder, of its sorted paths and file contents.
    sha256: str
    #: What the caller passed in (archive or folder).
    source: Path


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def prepare_package(
    source: Path, workdir: Path, *, limits: ArchiveLimits = DEFAULT_LIMITS
) -> AgentPackage:
    """Check ``source`` (folder or archive), copy it into ``workdir/package`` and parse it.

    ``workdir/package`` must not exist yet (or be empty). On any failure it is left absent or
    empty and :class:`PackageError` says why. A ``workdir/package`` that already has content
    raises :class:`FileExistsError` (a caller bug, not a bad package).
    """
    if not source.exists():
        raise package_error(f"package not found: {source}")
    dest = workdir / PACKAGE_DIRNAME
    dest_existed = dest.is_dir()
    if source.is_dir():
        digest = copy_folder(source, dest, limits)
        root = dest
    elif source.is_file():
        root = extract_archive(source, dest, limits=limits)
        digest = sha256_file(source)
    else:
        raise package_error(f"package is neither a folder nor an archive file: {source}")
    try:
        manifest = parse_manifest(root)
    except PackageError:
        discard(dest, keep_folder=dest_existed)
        raise
    return AgentPackage(root=root, manifest=manifest, sha256=digest, source=source)
