"""Caps on what a package may contain, and the one-line errors every check raises."""

from __future__ import annotations

import tarfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import IO

from grader.exceptions import PackageError

MIB = 1024 * 1024
CHUNK_BYTES = 256 * 1024
# Longest member name quoted in an error message, so a 300-character name stays readable.
_MAX_SHOWN_NAME = 80
# Exceptions that reading a damaged archive can raise from zipfile, tarfile, gzip and zlib.
READ_ERRORS: tuple[type[BaseException], ...] = (
    zipfile.BadZipFile,
    tarfile.TarError,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,
    RuntimeError,
)


@dataclass(frozen=True)
class ArchiveLimits:
    """Caps on what a package may contain; a package over any of them is rejected whole."""

    #: Size of the archive file itself.
    max_archive_bytes: int = 20 * MIB
    #: Sum of all unpacked file sizes (declared and actually written).
    max_total_bytes: int = 100 * MIB
    #: Size of any one unpacked file.
    max_file_bytes: int = 20 * MIB
    #: Files and folders together.
    max_members: int = 2000
    #: Largest uncompressed/compressed size ratio of one zip member (zip-bomb guard).
    max_ratio: int = 100
    #: Zip members smaller than this are exempt from ``max_ratio``: a small, repetitive text
    #: file legitimately compresses more than 100:1 and cannot be a bomb on its own (the
    #: per-file and total caps still apply).
    ratio_check_min_bytes: int = 1 * MIB
    #: Characters in a member's path.
    max_path_length: int = 255
    #: Components in a member's path.
    max_depth: int = 20

    def __post_init__(self) -> None:
        for limit in fields(self):
            value = getattr(self, limit.name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"archive limit {limit.name} must be a positive integer")


DEFAULT_LIMITS = ArchiveLimits()


def guarded_reader(source: IO[bytes], archive_format: str) -> Callable[[int], bytes]:
    """``source.read`` that turns any decompression or format error into a PackageError."""

    def read(size: int) -> bytes:
        try:
            return source.read(size)
        except READ_ERRORS as exc:
            raise corrupt_error(archive_format, exc) from None

    return read


def corrupt_error(archive_format: str, exc: BaseException) -> PackageError:
    if archive_format == "folder":
        return package_error(f"cannot read a package file: {short_reason(exc)}")
    return package_error(f"corrupt or unreadable {archive_format} archive: {short_reason(exc)}")


def short_reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def show_name(name: str) -> str:
    """Quote a member name for a message: escaped, and shortened if very long."""
    if len(name) > _MAX_SHOWN_NAME:
        name = name[: _MAX_SHOWN_NAME - 3] + "..."
    return repr(name)


def format_bytes(size: int) -> str:
    if size >= MIB:
        return f"{size / MIB:.1f} MiB"
    return f"{size} bytes"


def package_error(message: str) -> PackageError:
    """A PackageError whose message is guaranteed to be a single line."""
    return PackageError(" ".join(message.split()))
