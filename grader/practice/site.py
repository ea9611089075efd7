"""What the web server needs to serve the published practice set at ``/practice`` (no Flask here).

The server is configured with a practice folder: either one published set (it holds
``manifest.json``) or a folder of published sets, of which the newest by ``published_at`` is
served. :func:`find_release` picks it, :func:`page_data` gives the page its data, and
:func:`build_download` packs the set as a ``.tar.gz`` or ``.zip``. Archives are deterministic
(sorted entries, fixed timestamps and owners), so the same release always gives the same bytes
and an ETag can be its SHA-256.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from grader.core.casesets import CASES_FILE
from grader.exceptions import PracticeUnavailable

from .publish import MANIFEST_FILE, README_FILE

__all__ = [
    "ARCHIVE_FORMATS",
    "ArchiveFormat",
    "Download",
    "PracticeRelease",
    "PracticeUnavailable",
    "build_download",
    "cached_download",
    "find_release",
    "page_data",
]

ArchiveFormat = Literal["tar.gz", "zip"]
ARCHIVE_FORMATS: tuple[ArchiveFormat, ...] = ("tar.gz", "zip")
_MEDIA_TYPES: dict[ArchiveFormat, str] = {"tar.gz": "application/gzip", "zip": "application/zip"}
# Zip cannot store dates before 1980; used when a manifest has no usable date.
_EPOCH_1980 = datetime(1980, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class PracticeRelease:
    """One published practice set: its folder and its manifest."""

    root: Path
    manifest: dict[str, Any]

    @property
    def version(self) -> str:
        return str(self.manifest.get("version", ""))

    @property
    def published_at(self) -> datetime:
        """The publication time from the manifest (1980-01-01 when it has none)."""
        try:
            return datetime.strptime(
                str(self.manifest["published_at"]), "%Y-%m-%dT%H:%M:%SZ"
            ).replace(tzinfo=UTC)
        except (KeyError, ValueError):
            return _EPOCH_1980

    @property
    def archive_stem(self) -> str:
        return f"practice-set-{self.version}" if self.version else "practice-set"


@dataclass(frozen=True)
class Download:
    """An archive of a release, ready to send."""

    filename: str
    media_type: str
    data: bytes
    sha256: str


def _read_release(folder: Path) -> PracticeRelease | None:
    manifest_path = folder / MANIFEST_FILE
    if not manifest_path.is_file():
        return None
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or not (folder / CASES_FILE).is_file():
        return None
    return PracticeRelease(folder, manifest)


def find_release(practice_dir: Path) -> PracticeRelease:
    """The published set in ``practice_dir``, or the newest one among its sub-folders."""
    if not practice_dir.is_dir():
        raise PracticeUnavailable("no practice set has been published yet")
    release = _read_release(practice_dir)
    if release is not None:
        return release
    candidates = [
        found
        for child in practice_dir.iterdir()
        if child.is_dir() and not child.name.startswith(".")
        for found in (_read_release(child),)
        if found is not None
    ]
    if not candidates:
        raise PracticeUnavailable("no practice set has been published yet")
    return max(candidates, key=lambda found: (found.published_at, found.root.name))


def page_data(release: PracticeRelease) -> dict[str, Any]:
    """Everything the ``/practice`` page shows: version, date, counts, cases and the README."""
    cases: list[dict[str, Any]] = []
    for line in (release.root / CASES_FILE).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        case = json.loads(line)
        cases.append(
            {
                "id": case.get("id"),
                "kind": case.get("kind"),
                "question": case.get("question"),
                "slices": case.get("slices", []),
            }
        )
    readme_path = release.root / README_FILE
    return {
        "version": release.version,
        "published_at": release.manifest.get("published_at"),
        "grader_version": release.manifest.get("grader_version"),
        "counts": release.manifest.get("counts", {}),
        "cases": cases,
        "readme": readme_path.read_text(encoding="utf-8") if readme_path.is_file() else "",
        "downloads": {fmt: f"{release.archive_stem}.{fmt}" for fmt in ARCHIVE_FORMATS},
    }


def _files(root: Path) -> Iterator[Path]:
    """Regular files under ``root``, sorted, never following a symbolic link."""
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        if path.is_file():
            yield path


def _tar_gz(root: Path, stem: str, mtime: int) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        folders: set[str] = set()
        for path in _files(root):
            relative = path.relative_to(root)
            for depth in range(len(relative.parts)):
                folder = "/".join((stem, *relative.parts[:depth]))
                if folder not in folders:
                    folders.add(folder)
                    info = tarfile.TarInfo(folder)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, mtime
                    archive.addfile(info)
            info = tarfile.TarInfo(f"{stem}/{relative.as_posix()}")
            data = path.read_bytes()
            info.size, info.mode, info.mtime = len(data), 0o644, mtime
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def _zip(root: Path, stem: str, when: datetime) -> bytes:
    stamp = max(when, _EPOCH_1980).timetuple()[:6]
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in _files(root):
            info = zipfile.ZipInfo(f"{stem}/{path.relative_to(root).as_posix()}", stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return raw.getvalue()


def build_download(path: Path, archive_format: ArchiveFormat = "tar.gz") -> bytes:
    """The published set at ``path`` as a ``.tar.gz`` or ``.zip`` under one top-level folder."""
    release = _read_release(path)
    if release is None:
        raise PracticeUnavailable(f"{path} is not a published practice set")
    if archive_format == "tar.gz":
        return _tar_gz(path, release.archive_stem, int(release.published_at.timestamp()))
    if archive_format == "zip":
        return _zip(path, release.archive_stem, release.published_at)
    raise ValueError(f"unknown archive format {archive_format!r}")


@lru_cache(maxsize=8)
def _cached(path: Path, version: str, archive_format: ArchiveFormat) -> Download:
    release = PracticeRelease(path, {"version": version})
    data = build_download(path, archive_format)
    return Download(
        filename=f"{release.archive_stem}.{archive_format}",
        media_type=_MEDIA_TYPES[archive_format],
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
    )


def cached_download(release: PracticeRelease, archive_format: ArchiveFormat) -> Download:
    """:func:`build_download` of a release, built once per folder, version and format."""
    if archive_format not in ARCHIVE_FORMATS:
        raise ValueError(f"unknown archive format {archive_format!r}")
    return _cached(release.root.resolve(), release.version, archive_format)
