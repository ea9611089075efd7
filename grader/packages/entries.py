"""Member checks shared by zip, tar and folders, and the writer that creates the unpacked tree.

A member is checked by its header (name, type, declared size) before any byte is read, then its
bytes are counted as they are really read (:class:`ByteBudget`), and only then written.
"""

from __future__ import annotations

import enum
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from grader.exceptions import PackageError

from .limits import (
    CHUNK_BYTES,
    ArchiveLimits,
    format_bytes,
    package_error,
    show_name,
)
from .manifest import MANIFEST_NAME

# Linux refuses longer path components (NAME_MAX), so such a member could never be written.
_MAX_COMPONENT_BYTES = 255
# Folders that archivers add beside the real content and that never hold a package.
_IGNORED_TOP_LEVEL = frozenset({"__MACOSX"})


class MemberKind(enum.Enum):
    """What a member is; only files and folders may be unpacked."""

    FILE = enum.auto()
    DIR = enum.auto()
    SYMLINK = enum.auto()
    HARDLINK = enum.auto()
    DEVICE = enum.auto()
    FIFO = enum.auto()
    SOCKET = enum.auto()
    SPARSE = enum.auto()
    OTHER = enum.auto()


# Every kind but FILE and DIR, with why it is refused. Links are refused wherever they point:
# even an inside link lets a later member write through it, and the sandbox needs none.
_REFUSED_KINDS = {
    MemberKind.SYMLINK: "symlinks are not allowed",
    MemberKind.HARDLINK: "hardlinks are not allowed",
    MemberKind.DEVICE: "device files are not allowed",
    MemberKind.FIFO: "fifos (named pipes) are not allowed",
    MemberKind.SOCKET: "sockets are not allowed",
    MemberKind.SPARSE: "sparse files are not allowed",
    MemberKind.OTHER: "special members (neither file nor folder) are not allowed",
}


@dataclass(frozen=True)
class Entry:
    """A checked member: its normalised relative path, whether it is a folder, its size."""

    parts: tuple[str, ...]
    is_dir: bool
    size: int

    @property
    def relpath(self) -> str:
        return "/".join(self.parts)


_DRIVE_LETTER = re.compile(r"[A-Za-z]:")
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Scope:
    """How messages name the whole (``archive``) and one of its members (``archive member``)."""

    whole: str
    member: str


ARCHIVE_SCOPE = Scope("archive", "archive member")
FOLDER_SCOPE = Scope("package folder", "package folder entry")


class EntryChecker:
    """Checks members one at a time against the limits and against each other."""

    def __init__(self, limits: ArchiveLimits, scope: Scope) -> None:
        self._limits = limits
        self._scope = scope
        self._members = 0
        self._total_bytes = 0
        self._files: set[tuple[str, ...]] = set()
        self._dirs: set[tuple[str, ...]] = set()

    def check(
        self, name: str, kind: MemberKind, size: int, compressed_size: int | None = None
    ) -> Entry | None:
        """Return the member as an entry, ``None`` for the root folder itself, or raise."""
        limits = self._limits
        self._members += 1
        if self._members > limits.max_members:
            raise package_error(
                f"{self._scope.whole} has too many members (more than {limits.max_members})"
            )
        parts = self._split_path(name)
        if kind in _REFUSED_KINDS:
            raise self.reject(name, _REFUSED_KINDS[kind])
        if not parts:
            if kind is MemberKind.DIR:
                return None  # "./" or "." names the destination itself
            raise self.reject(name, "a file needs a name")
        if kind is MemberKind.DIR:
            self._add_dir(name, parts)
            return Entry(parts, is_dir=True, size=0)
        self._check_file_size(name, size, compressed_size)
        self._add_file(name, parts)
        return Entry(parts, is_dir=False, size=size)

    def _split_path(self, name: str) -> tuple[str, ...]:
        """Normalise a member name to path components, refusing anything that could escape."""
        limits = self._limits
        if _CONTROL_CHARACTERS.search(name):
            raise self.reject(name, "control character in path")
        if "\\" in name:
            raise self.reject(name, "backslash in path (use '/' as the separator)")
        if name.startswith("/"):
            raise self.reject(name, "absolute path")
        if _DRIVE_LETTER.match(name):
            raise self.reject(name, "drive letter in path")
        if len(name) > limits.max_path_length:
            raise self.reject(
                name, f"path too long ({len(name)} characters; limit {limits.max_path_length})"
            )
        parts = tuple(part for part in name.split("/") if part not in ("", "."))
        if ".." in parts:
            raise self.reject(name, "path contains '..'")
        if len(parts) > limits.max_depth:
            raise self.reject(
                name, f"path too deep ({len(parts)} levels; limit {limits.max_depth})"
            )
        for part in parts:
            try:
                encoded = part.encode("utf-8")
            except UnicodeEncodeError:
                raise self.reject(name, "path is not valid UTF-8") from None
            if len(encoded) > _MAX_COMPONENT_BYTES:
                raise self.reject(
                    name, f"path component too long (over {_MAX_COMPONENT_BYTES} bytes)"
                )
        return parts

    def _check_file_size(self, name: str, size: int, compressed_size: int | None) -> None:
        limits = self._limits
        if compressed_size is not None and size >= limits.ratio_check_min_bytes:
            ratio = size / max(compressed_size, 1)
            if ratio > limits.max_ratio:
                raise self.reject(
                    name,
                    f"compression ratio {ratio:.0f}:1 is over the limit "
                    f"{limits.max_ratio}:1 (zip bomb?)",
                )
        if size > limits.max_file_bytes:
            raise self.reject(
                name,
                f"file too large ({format_bytes(size)}; limit "
                f"{format_bytes(limits.max_file_bytes)})",
            )
        self._total_bytes += size
        if self._total_bytes > limits.max_total_bytes:
            raise total_size_error(self._scope, limits)

    def _add_dir(self, name: str, parts: tuple[str, ...]) -> None:
        # A folder listed twice is harmless; a folder where a file is, is a conflict.
        for depth in range(1, len(parts) + 1):
            prefix = parts[:depth]
            if prefix in self._files:
                raise self.reject(name, f"{'/'.join(prefix)!r} is both a file and a folder")
            self._dirs.add(prefix)

    def _add_file(self, name: str, parts: tuple[str, ...]) -> None:
        if parts in self._files:
            raise self.reject(name, "duplicate member (the same path appears twice)")
        if parts in self._dirs:
            raise self.reject(name, "is both a file and a folder")
        self._add_dir(name, parts[:-1])
        self._files.add(parts)

    def reject(self, name: str, reason: str) -> PackageError:
        """The error for member ``name``, quoting it safely."""
        return package_error(f"{self._scope.member} {show_name(name)}: {reason}")


def total_size_error(scope: Scope, limits: ArchiveLimits) -> PackageError:
    return package_error(
        f"{scope.whole} unpacks to more than the total size limit "
        f"({format_bytes(limits.max_total_bytes)})"
    )


def package_root(entries: list[Entry]) -> tuple[str, ...]:
    """``()`` for the destination itself, or ``(folder,)`` when one top folder holds agent.toml."""
    if any(entry.parts == (MANIFEST_NAME,) for entry in entries):
        return ()
    top_level = {entry.parts[0] for entry in entries} - _IGNORED_TOP_LEVEL
    if len(top_level) != 1:
        return ()
    (folder,) = top_level
    if any(entry.parts == (folder, MANIFEST_NAME) and not entry.is_dir for entry in entries):
        return (folder,)
    return ()


class ByteBudget:
    """Counts bytes as they are really read, because declared sizes can lie."""

    def __init__(self, limits: ArchiveLimits, scope: Scope) -> None:
        self._limits = limits
        self._scope = scope
        self._total_bytes = 0

    def pump(
        self,
        read: Callable[[int], bytes],
        entry: Entry,
        sink: Callable[[bytes], object] | None = None,
    ) -> None:
        """Move one file's bytes from ``read`` to ``sink`` (or nowhere), enforcing the caps."""
        limits = self._limits
        file_bytes = 0
        while chunk := read(CHUNK_BYTES):
            file_bytes += len(chunk)
            self._total_bytes += len(chunk)
            if file_bytes > entry.size:
                raise self._reject(entry, "holds more data than its header declares")
            if file_bytes > limits.max_file_bytes:
                raise self._reject(entry, "file too large")
            if self._total_bytes > limits.max_total_bytes:
                raise total_size_error(self._scope, limits)
            if sink is not None:
                sink(chunk)
        if file_bytes != entry.size:
            raise self._reject(entry, "holds less data than its header declares")

    def _reject(self, entry: Entry, reason: str) -> PackageError:
        return package_error(f"{self._scope.member} {show_name(entry.relpath)}: {reason}")


class TreeWriter:
    """Creates folders (0755) and files (0644) under a root, never following or replacing."""

    def __init__(self, root: Path) -> None:
        self._root = root

    def make_dir(self, parts: tuple[str, ...]) -> None:
        path = self._root
        for part in parts:
            path = path / part
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                # Only a folder this writer made can be here; anything else is an attack.
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    raise package_error(
                        f"cannot create folder {show_name(path.name)}: path exists"
                    ) from None
                continue
            os.chmod(path, 0o755)  # mkdir's mode is filtered by the umask

    def open_file(self, parts: tuple[str, ...]) -> IO[bytes]:
        self.make_dir(parts[:-1])
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        descriptor = os.open(self._root.joinpath(*parts), flags, 0o644)
        os.fchmod(descriptor, 0o644)  # never setuid, never executable, whatever was declared
        return os.fdopen(descriptor, "wb")


@contextmanager
def populating(dest: Path) -> Iterator[TreeWriter]:
    """Create ``dest`` and yield a writer into it; on any failure put ``dest`` back as found."""
    existed = dest.is_dir()
    if not existed:
        dest.mkdir(parents=True)
    os.chmod(dest, 0o755)
    try:
        yield TreeWriter(dest)
    except BaseException:
        discard(dest, keep_folder=existed)
        raise


def discard(dest: Path, *, keep_folder: bool = False) -> None:
    """Remove what was unpacked into ``dest`` (and ``dest`` itself unless ``keep_folder``)."""
    if not keep_folder:
        shutil.rmtree(dest, ignore_errors=True)
        return
    for child in dest.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def require_empty_destination(dest: Path) -> None:
    """Refuse to unpack over anything: ``dest`` must be absent or an empty folder."""
    if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
        raise FileExistsError(f"destination exists and is not an empty folder: {dest}")


def unix_kind(mode: int) -> MemberKind:
    if stat.S_ISREG(mode):
        return MemberKind.FILE
    if stat.S_ISDIR(mode):
        return MemberKind.DIR
    if stat.S_ISLNK(mode):
        return MemberKind.SYMLINK
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return MemberKind.DEVICE
    if stat.S_ISFIFO(mode):
        return MemberKind.FIFO
    if stat.S_ISSOCK(mode):
        return MemberKind.SOCKET
    return MemberKind.OTHER
