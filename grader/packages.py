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

import enum
import gzip
import hashlib
import io
import itertools
import keyword
import os
import re
import shutil
import stat
import sys
import tarfile
import tomllib
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Literal, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from grader.exceptions import PackageError

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

MANIFEST_NAME = "agent.toml"
#: The folder inside ``prepare_package``'s ``workdir`` that receives the package copy.
PACKAGE_DIRNAME = "package"

_MIB = 1024 * 1024
_CHUNK_BYTES = 256 * 1024
# A manifest is three short keys; anything bigger is not a manifest worth parsing.
_MAX_MANIFEST_BYTES = 64 * 1024
# Linux refuses longer path components (NAME_MAX), so such a member could never be written.
_MAX_COMPONENT_BYTES = 255
# Longest member name quoted in an error message, so a 300-character name stays readable.
_MAX_SHOWN_NAME = 80
# Folders that archivers add beside the real content and that never hold a package.
_IGNORED_TOP_LEVEL = frozenset({"__MACOSX"})
_ZIP_METHODS = frozenset(
    {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
)
_ZIP_ENCRYPTED_FLAG = 0x1
# Exceptions that reading a damaged archive can raise from zipfile, tarfile, gzip and zlib.
_READ_ERRORS: tuple[type[BaseException], ...] = (
    zipfile.BadZipFile,
    tarfile.TarError,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,
    RuntimeError,
)

_ArchiveFormat = Literal["zip", "tar.gz"]


# --------------------------------------------------------------------------------------------
# Limits


@dataclass(frozen=True)
class ArchiveLimits:
    """Caps on what a package may contain; a package over any of them is rejected whole."""

    #: Size of the archive file itself.
    max_archive_bytes: int = 20 * _MIB
    #: Sum of all unpacked file sizes (declared and actually written).
    max_total_bytes: int = 100 * _MIB
    #: Size of any one unpacked file.
    max_file_bytes: int = 20 * _MIB
    #: Files and folders together.
    max_members: int = 2000
    #: Largest uncompressed/compressed size ratio of one zip member (zip-bomb guard).
    max_ratio: int = 100
    #: Zip members smaller than this are exempt from ``max_ratio``: a small, repetitive text
    #: file legitimately compresses more than 100:1 and cannot be a bomb on its own (the
    #: per-file and total caps still apply).
    ratio_check_min_bytes: int = 1 * _MIB
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


# --------------------------------------------------------------------------------------------
# Manifest

_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_CALLABLE_REF = re.compile(
    rf"(?P<module>{_IDENTIFIER}(?:\.{_IDENTIFIER})*):(?P<function>{_IDENTIFIER})"
)
# Docker's rule for container names, so the name is safe wherever it ends up (labels, paths).
_AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_MAX_AGENT_NAME = 64
_MAX_CALLABLE_REF = 200


def _check_callable_ref(value: str) -> str:
    """Return ``value`` if it is ``module:function`` with importable names, else raise."""
    if len(value) > _MAX_CALLABLE_REF:
        raise ValueError(f"is longer than {_MAX_CALLABLE_REF} characters")
    match = _CALLABLE_REF.fullmatch(value)
    if match is None:
        raise ValueError(
            f"{value!r} must look like 'module:function' (e.g. 'agent:answer'), "
            "with a dotted module path and a Python identifier"
        )
    names = [*match["module"].split("."), match["function"]]
    reserved = [name for name in names if keyword.iskeyword(name)]
    if reserved:
        raise ValueError(f"{value!r} uses the Python keyword {reserved[0]!r} as a name")
    top_level = names[0]
    # The runner has imported parts of the standard library before it loads the agent, so a
    # module of the same name would silently resolve to the stdlib one (or shadow it).
    if top_level in sys.stdlib_module_names:
        raise ValueError(
            f"module {top_level!r} has the name of a Python standard-library module; rename it"
        )
    return value


class AgentManifest(BaseModel):
    """The validated contents of ``agent.toml``."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    #: 1 to 64 characters from ``[A-Za-z0-9._-]``, starting with a letter or digit.
    name: str
    #: ``module:function`` called with each question, e.g. ``agent:answer``.
    entrypoint: str
    #: Optional ``module:function`` called once before the first question.
    setup: str | None = None

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not 1 <= len(value) <= _MAX_AGENT_NAME:
            raise ValueError(f"must be 1 to {_MAX_AGENT_NAME} characters long")
        if _AGENT_NAME.fullmatch(value) is None:
            raise ValueError(
                f"{value!r} may only use letters, digits, '.', '_' and '-', "
                "and must start with a letter or digit"
            )
        return value

    @field_validator("entrypoint")
    @classmethod
    def _valid_entrypoint(cls, value: str) -> str:
        return _check_callable_ref(value)

    @field_validator("setup")
    @classmethod
    def _valid_setup(cls, value: str | None) -> str | None:
        return None if value is None else _check_callable_ref(value)


def parse_manifest(agent_dir: Path) -> AgentManifest:
    """Read and validate ``agent_dir/agent.toml``, including that its modules exist.

    Raises :class:`PackageError` naming the problem: a missing or unreadable file, a TOML
    syntax error (with its line), an unknown, missing or invalid field, or an ``entrypoint`` /
    ``setup`` module with no ``.py`` file (or package ``__init__.py``) in ``agent_dir``.
    """
    path = agent_dir / MANIFEST_NAME
    if path.is_symlink():
        raise _error(f"{MANIFEST_NAME} must be a regular file, not a symlink")
    if not path.is_file():
        raise _error(
            f"{MANIFEST_NAME} not found at the package root{_nested_manifest_hint(agent_dir)}"
        )
    if path.stat().st_size > _MAX_MANIFEST_BYTES:
        raise _error(f"{MANIFEST_NAME} is larger than {_MAX_MANIFEST_BYTES} bytes")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _error(f"{MANIFEST_NAME} is not UTF-8 text (byte {exc.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _error(f"{MANIFEST_NAME} is not valid TOML: {exc}") from None
    try:
        manifest = AgentManifest.model_validate(data)
    except ValidationError as exc:
        raise _error(f"{MANIFEST_NAME}: {_describe_validation_error(exc)}") from None
    for field_name, ref in (("entrypoint", manifest.entrypoint), ("setup", manifest.setup)):
        if ref is not None:
            _require_module_file(agent_dir, field_name, ref)
    return manifest


def _describe_validation_error(exc: ValidationError) -> str:
    """Every problem pydantic found, one clause each, naming the field."""
    allowed = ", ".join(AgentManifest.model_fields)
    problems: list[str] = []
    for problem in exc.errors(include_url=False):
        field_name = ".".join(str(part) for part in problem["loc"]) or "(top level)"
        if problem["type"] == "extra_forbidden":
            problems.append(f"unknown field {field_name!r} (allowed: {allowed})")
        elif problem["type"] == "missing":
            problems.append(f"missing required field {field_name!r}")
        else:
            reason = str(problem["msg"]).removeprefix("Value error, ")
            problems.append(f"invalid field {field_name!r}: {reason}")
    return "; ".join(problems)


def _require_module_file(agent_dir: Path, field_name: str, ref: str) -> None:
    """Raise unless the module of ``ref`` is a ``.py`` file or package inside ``agent_dir``."""
    module = ref.partition(":")[0]
    parts = module.split(".")
    candidates = [
        Path(*parts[:-1], parts[-1] + ".py"),
        Path(*parts, "__init__.py"),
    ]
    for candidate in candidates:
        full = agent_dir / candidate
        if full.is_file() and not full.is_symlink():
            return
    expected = " or ".join(candidate.as_posix() for candidate in candidates)
    raise _error(
        f"{MANIFEST_NAME}: {field_name} module {module!r} not found in the package "
        f"(expected {expected})"
    )


def _nested_manifest_hint(agent_dir: Path) -> str:
    """Point at an ``agent.toml`` one or two folders down, the usual packaging slip."""
    for pattern in (f"*/{MANIFEST_NAME}", f"*/*/{MANIFEST_NAME}"):
        found = sorted(agent_dir.glob(pattern))
        if found:
            where = found[0].relative_to(agent_dir).as_posix()
            return f" (there is one at {where!r}: put agent.toml at the top of the package)"
    return ""


# --------------------------------------------------------------------------------------------
# Packages


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
        raise _error(f"package not found: {source}")
    dest = workdir / PACKAGE_DIRNAME
    dest_existed = dest.is_dir()
    if source.is_dir():
        digest = _copy_folder(source, dest, limits)
        root = dest
    elif source.is_file():
        root = extract_archive(source, dest, limits=limits)
        digest = sha256_file(source)
    else:
        raise _error(f"package is neither a folder nor an archive file: {source}")
    try:
        manifest = parse_manifest(root)
    except PackageError:
        _discard(dest, keep_folder=dest_existed)
        raise
    return AgentPackage(root=root, manifest=manifest, sha256=digest, source=source)


def extract_archive(archive: Path, dest: Path, *, limits: ArchiveLimits = DEFAULT_LIMITS) -> Path:
    """Safely unpack a ``.zip`` or ``.tar.gz`` into ``dest`` and return the package root.

    The format is recognised by content, not by name. ``dest`` must be absent or an empty
    folder; it is created only once the whole archive has passed every check. The package root
    is ``dest``, or its single top-level folder when that folder holds ``agent.toml`` (an
    archive made by zipping a folder).

    Raises :class:`PackageError` for a bad archive (``dest`` is then absent, or empty if it
    existed) and :class:`FileExistsError` if ``dest`` already has content.
    """
    _require_empty_destination(dest)
    archive_format = _sniff_format(archive, limits)
    if archive_format == "zip":
        entries = _extract_zip(archive, dest, limits)
    else:
        entries = _extract_tar_gz(archive, dest, limits)
    return dest.joinpath(*_package_root(entries))


def _sniff_format(archive: Path, limits: ArchiveLimits) -> _ArchiveFormat:
    """Tell zip from gzip by magic bytes; refuse anything else and anything too big."""
    if not archive.is_file():
        raise _error(f"archive not found: {archive}")
    size = archive.stat().st_size
    if size > limits.max_archive_bytes:
        raise _error(
            f"archive is too large ({_format_bytes(size)}; limit "
            f"{_format_bytes(limits.max_archive_bytes)})"
        )
    with archive.open("rb") as handle:
        magic = handle.read(4)
    if magic[:2] == b"\x1f\x8b":
        return "tar.gz"
    # Local file header, or the end-of-central-directory record of an empty zip.
    if magic in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    raise _error(f"{archive.name!r} is not a .zip or .tar.gz archive")


def _require_empty_destination(dest: Path) -> None:
    """Refuse to unpack over anything: ``dest`` must be absent or an empty folder."""
    if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
        raise FileExistsError(f"destination exists and is not an empty folder: {dest}")


# --------------------------------------------------------------------------------------------
# Member checks shared by zip, tar and folders


class _Kind(enum.Enum):
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
    _Kind.SYMLINK: "symlinks are not allowed",
    _Kind.HARDLINK: "hardlinks are not allowed",
    _Kind.DEVICE: "device files are not allowed",
    _Kind.FIFO: "fifos (named pipes) are not allowed",
    _Kind.SOCKET: "sockets are not allowed",
    _Kind.SPARSE: "sparse files are not allowed",
    _Kind.OTHER: "special members (neither file nor folder) are not allowed",
}


@dataclass(frozen=True)
class _Entry:
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
class _Scope:
    """How messages name the whole (``archive``) and one of its members (``archive member``)."""

    whole: str
    member: str


_ARCHIVE = _Scope("archive", "archive member")
_FOLDER = _Scope("package folder", "package folder entry")


class _EntryChecker:
    """Checks members one at a time against the limits and against each other."""

    def __init__(self, limits: ArchiveLimits, scope: _Scope) -> None:
        self._limits = limits
        self._scope = scope
        self._members = 0
        self._total_bytes = 0
        self._files: set[tuple[str, ...]] = set()
        self._dirs: set[tuple[str, ...]] = set()

    def check(
        self, name: str, kind: _Kind, size: int, compressed_size: int | None = None
    ) -> _Entry | None:
        """Return the member as an entry, ``None`` for the root folder itself, or raise."""
        limits = self._limits
        self._members += 1
        if self._members > limits.max_members:
            raise _error(
                f"{self._scope.whole} has too many members (more than {limits.max_members})"
            )
        parts = self._split_path(name)
        if kind in _REFUSED_KINDS:
            raise self.reject(name, _REFUSED_KINDS[kind])
        if not parts:
            if kind is _Kind.DIR:
                return None  # "./" or "." names the destination itself
            raise self.reject(name, "a file needs a name")
        if kind is _Kind.DIR:
            self._add_dir(name, parts)
            return _Entry(parts, is_dir=True, size=0)
        self._check_file_size(name, size, compressed_size)
        self._add_file(name, parts)
        return _Entry(parts, is_dir=False, size=size)

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
                f"file too large ({_format_bytes(size)}; limit "
                f"{_format_bytes(limits.max_file_bytes)})",
            )
        self._total_bytes += size
        if self._total_bytes > limits.max_total_bytes:
            raise _total_size_error(self._scope, limits)

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
        return _error(f"{self._scope.member} {_show(name)}: {reason}")


def _total_size_error(scope: _Scope, limits: ArchiveLimits) -> PackageError:
    return _error(
        f"{scope.whole} unpacks to more than the total size limit "
        f"({_format_bytes(limits.max_total_bytes)})"
    )


def _package_root(entries: list[_Entry]) -> tuple[str, ...]:
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


class _ByteBudget:
    """Counts bytes as they are really read, because declared sizes can lie."""

    def __init__(self, limits: ArchiveLimits, scope: _Scope) -> None:
        self._limits = limits
        self._scope = scope
        self._total_bytes = 0

    def pump(
        self,
        read: Callable[[int], bytes],
        entry: _Entry,
        sink: Callable[[bytes], object] | None = None,
    ) -> None:
        """Move one file's bytes from ``read`` to ``sink`` (or nowhere), enforcing the caps."""
        limits = self._limits
        file_bytes = 0
        while chunk := read(_CHUNK_BYTES):
            file_bytes += len(chunk)
            self._total_bytes += len(chunk)
            if file_bytes > entry.size:
                raise self._reject(entry, "holds more data than its header declares")
            if file_bytes > limits.max_file_bytes:
                raise self._reject(entry, "file too large")
            if self._total_bytes > limits.max_total_bytes:
                raise _total_size_error(self._scope, limits)
            if sink is not None:
                sink(chunk)
        if file_bytes != entry.size:
            raise self._reject(entry, "holds less data than its header declares")

    def _reject(self, entry: _Entry, reason: str) -> PackageError:
        return _error(f"{self._scope.member} {_show(entry.relpath)}: {reason}")


# --------------------------------------------------------------------------------------------
# Writing the tree


class _TreeWriter:
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
                    raise _error(f"cannot create folder {_show(path.name)}: path exists") from None
                continue
            os.chmod(path, 0o755)  # mkdir's mode is filtered by the umask

    def open_file(self, parts: tuple[str, ...]) -> IO[bytes]:
        self.make_dir(parts[:-1])
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        descriptor = os.open(self._root.joinpath(*parts), flags, 0o644)
        os.fchmod(descriptor, 0o644)  # never setuid, never executable, whatever was declared
        return os.fdopen(descriptor, "wb")


@contextmanager
def _populating(dest: Path) -> Iterator[_TreeWriter]:
    """Create ``dest`` and yield a writer into it; on any failure put ``dest`` back as found."""
    existed = dest.is_dir()
    if not existed:
        dest.mkdir(parents=True)
    os.chmod(dest, 0o755)
    try:
        yield _TreeWriter(dest)
    except BaseException:
        _discard(dest, keep_folder=existed)
        raise


def _discard(dest: Path, *, keep_folder: bool = False) -> None:
    """Remove what was unpacked into ``dest`` (and ``dest`` itself unless ``keep_folder``)."""
    if not keep_folder:
        shutil.rmtree(dest, ignore_errors=True)
        return
    for child in dest.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------
# Zip


def _zip_kind(info: zipfile.ZipInfo) -> _Kind:
    """A zip member's type: the Unix mode in the upper 16 bits of external_attr, if any."""
    mode = info.external_attr >> 16
    if stat.S_IFMT(mode) == 0 or stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        # No Unix type recorded (e.g. Windows tools), or file/folder: zipfile itself decides
        # by the trailing slash, so this must too.
        return _Kind.DIR if info.is_dir() else _Kind.FILE
    return _unix_kind(mode)


def _extract_zip(archive: Path, dest: Path, limits: ArchiveLimits) -> list[_Entry]:
    try:
        zip_file = zipfile.ZipFile(archive)
    except _READ_ERRORS as exc:
        raise _corrupt("zip", exc) from None
    with zip_file:
        infos = zip_file.infolist()
        if len(infos) > limits.max_members:
            # Fail before looking at 100 000 names one by one.
            raise _error(f"archive has too many members ({len(infos)}; limit {limits.max_members})")
        checker = _EntryChecker(limits, _ARCHIVE)
        members: list[tuple[_Entry, zipfile.ZipInfo]] = []
        for info in infos:
            entry = checker.check(
                info.filename, _zip_kind(info), info.file_size, info.compress_size
            )
            if entry is None:
                continue
            if not entry.is_dir:
                if info.flag_bits & _ZIP_ENCRYPTED_FLAG:
                    raise checker.reject(info.filename, "encrypted members are not supported")
                if info.compress_type not in _ZIP_METHODS:
                    raise checker.reject(
                        info.filename, f"unsupported compression method {info.compress_type}"
                    )
            members.append((entry, info))
        if not members:
            raise _error("archive is empty")

        # Decompress everything once into nothing: catches bad CRCs, truncation and lying sizes
        # before a byte is written.
        read_through = _ByteBudget(limits, _ARCHIVE)
        for entry, info in members:
            if not entry.is_dir:
                with _open_zip_member(zip_file, info) as source:
                    read_through.pump(_guarded_reader(source, "zip"), entry)

        with _populating(dest) as writer:
            written = _ByteBudget(limits, _ARCHIVE)
            for entry, info in members:
                if entry.is_dir:
                    writer.make_dir(entry.parts)
                    continue
                with (
                    _open_zip_member(zip_file, info) as source,
                    writer.open_file(entry.parts) as out,
                ):
                    written.pump(_guarded_reader(source, "zip"), entry, out.write)
    return [entry for entry, _ in members]


def _open_zip_member(zip_file: zipfile.ZipFile, info: zipfile.ZipInfo) -> IO[bytes]:
    try:
        return zip_file.open(info)
    except _READ_ERRORS as exc:
        raise _corrupt("zip", exc) from None


# --------------------------------------------------------------------------------------------
# Tar


def _tar_kind(member: tarfile.TarInfo) -> _Kind:
    if member.issym():
        return _Kind.SYMLINK
    if member.islnk():
        return _Kind.HARDLINK
    if member.ischr() or member.isblk():
        return _Kind.DEVICE
    if member.isfifo():
        return _Kind.FIFO
    if member.isdir():
        return _Kind.DIR
    if member.issparse():
        return _Kind.SPARSE
    if member.isreg():
        return _Kind.FILE
    return _Kind.OTHER


class _Readable(Protocol):
    """The part of a binary file ``_CappedStream`` needs (``GzipFile`` is not an ``IO``)."""

    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


class _CappedStream:
    """A read-only stream that fails once more than ``cap`` bytes have been read from it.

    The gzip layer of a .tar.gz can expand a small upload into gigabytes of tar padding or
    headers that no member size accounts for; this bounds the decompression itself.
    """

    def __init__(self, inner: _Readable, cap: int) -> None:
        self._inner = inner
        self._cap = cap
        self._read = 0

    def read(self, size: int = -1, /) -> bytes:
        # Never ask for more than one byte past the cap, even for read(-1).
        allowed = self._cap + 1 - self._read
        data = self._inner.read(allowed if size < 0 else min(size, allowed))
        self._read += len(data)
        if self._read > self._cap:
            raise _error(
                f"archive decompresses to more than {_format_bytes(self._cap)} "
                "(total size limit plus tar headers)"
            )
        return data

    def write(self, data: bytes, /) -> int:
        raise io.UnsupportedOperation("read-only stream")

    def tell(self) -> int:
        return self._read

    def seek(self, position: int, /) -> int:
        raise io.UnsupportedOperation("stream is not seekable")

    def close(self) -> None:
        self._inner.close()


def _tar_stream_cap(limits: ArchiveLimits) -> int:
    # Each member costs at most a header block, a pax or long-name header and its data block,
    # and up to a block of padding; the archive ends with two zero blocks in a 10 KiB record.
    per_member_overhead = 4 * 1024
    return limits.max_total_bytes + (limits.max_members + 2) * per_member_overhead + 10 * 1024


@contextmanager
def _open_tar_stream(
    archive: Path, limits: ArchiveLimits
) -> Iterator[Iterator[tuple[tarfile.TarInfo, tarfile.TarFile]]]:
    """Open ``archive`` as a sequential tar.gz and yield an iterator over its members.

    Streaming ("r|") reads every byte exactly once and in order, so the decompression cap holds
    and nothing seeks back over data that was never checked.
    """
    capped = _CappedStream(gzip.GzipFile(archive, "rb"), _tar_stream_cap(limits))
    try:
        try:
            # Not a `with`: an error while opening is a corrupt archive, one in the body is not.
            tar = tarfile.open(fileobj=capped, mode="r|")  # noqa: SIM115
        except _READ_ERRORS as exc:
            raise _corrupt("tar.gz", exc) from None
        with tar:
            yield _tar_members(tar)
    finally:
        capped.close()


def _tar_members(tar: tarfile.TarFile) -> Iterator[tuple[tarfile.TarInfo, tarfile.TarFile]]:
    while True:
        try:
            member = tar.next()
        except _READ_ERRORS as exc:
            raise _corrupt("tar.gz", exc) from None
        if member is None:
            return
        yield member, tar


@dataclass(frozen=True)
class _TarMember:
    """A tar member as the checking pass saw it; the writing pass must see the same header."""

    header: tuple[str, bytes, int]
    entry: _Entry | None


def _tar_header(member: tarfile.TarInfo) -> tuple[str, bytes, int]:
    return (member.name, member.type, member.size)


def _extract_tar_gz(archive: Path, dest: Path, limits: ArchiveLimits) -> list[_Entry]:
    checker = _EntryChecker(limits, _ARCHIVE)
    read_through = _ByteBudget(limits, _ARCHIVE)
    seen: list[_TarMember] = []
    with _open_tar_stream(archive, limits) as members:
        for member, tar in members:
            entry = checker.check(member.name, _tar_kind(member), member.size)
            _apply_data_filter(member, dest, checker)
            if entry is not None and not entry.is_dir:
                read_through.pump(_guarded_reader(_tar_file(tar, member), "tar.gz"), entry)
            seen.append(_TarMember(_tar_header(member), entry))
    entries = [item.entry for item in seen if item.entry is not None]
    if not entries:
        raise _error("archive is empty")

    # A stream cannot be rewound: read it a second time, checking it still says the same.
    with _populating(dest) as writer, _open_tar_stream(archive, limits) as members:
        written = _ByteBudget(limits, _ARCHIVE)
        checked = iter(seen)
        for member, tar in members:
            expected = next(checked, None)
            if expected is None or expected.header != _tar_header(member):
                raise _error("archive changed while it was being unpacked")
            entry = expected.entry
            if entry is None:
                continue
            if entry.is_dir:
                writer.make_dir(entry.parts)
                continue
            with writer.open_file(entry.parts) as out:
                written.pump(_guarded_reader(_tar_file(tar, member), "tar.gz"), entry, out.write)
        if next(checked, None) is not None:
            raise _error("archive changed while it was being unpacked")
    return entries


def _tar_file(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    try:
        source = tar.extractfile(member)
    except _READ_ERRORS as exc:
        raise _corrupt("tar.gz", exc) from None
    if source is None:  # only for non-files, which were rejected before
        raise _error(f"archive member {_show(member.name)}: not a regular file")
    return source


def _apply_data_filter(member: tarfile.TarInfo, dest: Path, checker: _EntryChecker) -> None:
    """Run tarfile's own "data" filter too, as a second opinion on our checks."""
    try:
        tarfile.data_filter(member, str(dest))
    except tarfile.FilterError as exc:
        # The filter's message names server paths; the exception type says enough.
        raise checker.reject(
            member.name, f"refused by tarfile's data filter ({type(exc).__name__})"
        ) from None


# --------------------------------------------------------------------------------------------
# Folders


def _unix_kind(mode: int) -> _Kind:
    if stat.S_ISREG(mode):
        return _Kind.FILE
    if stat.S_ISDIR(mode):
        return _Kind.DIR
    if stat.S_ISLNK(mode):
        return _Kind.SYMLINK
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return _Kind.DEVICE
    if stat.S_ISFIFO(mode):
        return _Kind.FIFO
    if stat.S_ISSOCK(mode):
        return _Kind.SOCKET
    return _Kind.OTHER


def _scan_folder(source: Path, limits: ArchiveLimits) -> list[_Entry]:
    """Check every entry under ``source`` without following symlinks; return them sorted."""
    checker = _EntryChecker(limits, _FOLDER)
    entries: list[_Entry] = []
    pending: list[tuple[str, ...]] = [()]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(source.joinpath(*folder)) as listing:
                # One more than the cap is enough for the checker to refuse a huge folder.
                children = sorted(
                    itertools.islice(listing, limits.max_members + 1), key=lambda child: child.name
                )
        except OSError as exc:
            raise _error(
                f"cannot read package folder {_show('/'.join(folder) or '.')}: {exc.strerror}"
            ) from None
        for child in children:
            parts = (*folder, child.name)
            status = child.stat(follow_symlinks=False)
            kind = _unix_kind(status.st_mode)
            size = status.st_size if kind is _Kind.FILE else 0
            entry = checker.check("/".join(parts), kind, size)
            if entry is None:
                continue
            entries.append(entry)
            if entry.is_dir:
                pending.append(entry.parts)
    return sorted(entries, key=lambda entry: entry.parts)


def _copy_folder(source: Path, dest: Path, limits: ArchiveLimits) -> str:
    """Copy a checked folder into ``dest`` and return its tree hash.

    The hash covers, in sorted path order, each entry's kind and path and each file's content
    digest, so it depends on nothing but what the sandbox will see.
    """
    _require_empty_destination(dest)
    entries = _scan_folder(source, limits)
    tree_hash = hashlib.sha256()
    with _populating(dest) as writer:
        budget = _ByteBudget(limits, _FOLDER)
        for entry in entries:
            path_bytes = entry.relpath.encode("utf-8")
            if entry.is_dir:
                writer.make_dir(entry.parts)
                tree_hash.update(b"D\0" + path_bytes + b"\0")
                continue
            content_hash = hashlib.sha256()
            with _open_folder_file(source, entry) as src, writer.open_file(entry.parts) as out:
                budget.pump(_guarded_reader(src, "folder"), entry, _tee(out, content_hash))
            tree_hash.update(b"F\0" + path_bytes + b"\0" + content_hash.digest())
    return tree_hash.hexdigest()


def _tee(out: IO[bytes], digest: hashlib._Hash) -> Callable[[bytes], None]:
    """A sink that writes each chunk to ``out`` and feeds it to ``digest``."""

    def sink(chunk: bytes) -> None:
        digest.update(chunk)
        out.write(chunk)

    return sink


def _open_folder_file(source: Path, entry: _Entry) -> IO[bytes]:
    """Open a file of the folder, refusing it if it became a symlink since the scan."""
    try:
        descriptor = os.open(
            source.joinpath(*entry.parts), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        )
    except OSError as exc:
        raise _error(
            f"package file {_show(entry.relpath)}: cannot read it ({exc.strerror})"
        ) from None
    return os.fdopen(descriptor, "rb")


# --------------------------------------------------------------------------------------------
# Small helpers


def _guarded_reader(source: IO[bytes], archive_format: str) -> Callable[[int], bytes]:
    """``source.read`` that turns any decompression or format error into a PackageError."""

    def read(size: int) -> bytes:
        try:
            return source.read(size)
        except _READ_ERRORS as exc:
            raise _corrupt(archive_format, exc) from None

    return read


def _corrupt(archive_format: str, exc: BaseException) -> PackageError:
    if archive_format == "folder":
        return _error(f"cannot read a package file: {_short(exc)}")
    return _error(f"corrupt or unreadable {archive_format} archive: {_short(exc)}")


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _show(name: str) -> str:
    """Quote a member name for a message: escaped, and shortened if very long."""
    if len(name) > _MAX_SHOWN_NAME:
        name = name[: _MAX_SHOWN_NAME - 3] + "..."
    return repr(name)


def _format_bytes(size: int) -> str:
    if size >= _MIB:
        return f"{size / _MIB:.1f} MiB"
    return f"{size} bytes"


def _error(message: str) -> PackageError:
    """A PackageError whose message is guaranteed to be a single line."""
    return PackageError(" ".join(message.split()))
