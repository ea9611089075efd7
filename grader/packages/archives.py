"""Unpacking ``.zip`` and ``.tar.gz`` archives: headers checked, bytes counted, then written."""

from __future__ import annotations

import gzip
import io
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal, Protocol

from .entries import (
    ARCHIVE_SCOPE,
    ByteBudget,
    Entry,
    EntryChecker,
    MemberKind,
    package_root,
    populating,
    require_empty_destination,
    unix_kind,
)
from .limits import (
    DEFAULT_LIMITS,
    READ_ERRORS,
    ArchiveLimits,
    corrupt_error,
    format_bytes,
    guarded_reader,
    package_error,
    show_name,
)

_ZIP_METHODS = frozenset(
    {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
)
_ZIP_ENCRYPTED_FLAG = 0x1

_ArchiveFormat = Literal["zip", "tar.gz"]


def extract_archive(archive: Path, dest: Path, *, limits: ArchiveLimits = DEFAULT_LIMITS) -> Path:
    """Safely unpack a ``.zip`` or ``.tar.gz`` into ``dest`` and return the package root.

    The format is recognised by content, not by name. ``dest`` must be absent or an empty
    folder; it is created only once the whole archive has passed every check. The package root
    is ``dest``, or its single top-level folder when that folder holds ``agent.toml`` (an
    archive made by zipping a folder).

    Raises :class:`PackageError` for a bad archive (``dest`` is then absent, or empty if it
    existed) and :class:`FileExistsError` if ``dest`` already has content.
    """
    require_empty_destination(dest)
    archive_format = _sniff_format(archive, limits)
    if archive_format == "zip":
        entries = _extract_zip(archive, dest, limits)
    else:
        entries = _extract_tar_gz(archive, dest, limits)
    return dest.joinpath(*package_root(entries))


def _sniff_format(archive: Path, limits: ArchiveLimits) -> _ArchiveFormat:
    """Tell zip from gzip by magic bytes; refuse anything else and anything too big."""
    if not archive.is_file():
        raise package_error(f"archive not found: {archive}")
    size = archive.stat().st_size
    if size > limits.max_archive_bytes:
        raise package_error(
            f"archive is too large ({format_bytes(size)}; limit "
            f"{format_bytes(limits.max_archive_bytes)})"
        )
    with archive.open("rb") as handle:
        magic = handle.read(4)
    if magic[:2] == b"\x1f\x8b":
        return "tar.gz"
    # Local file header, or the end-of-central-directory record of an empty zip.
    if magic in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    raise package_error(f"{archive.name!r} is not a .zip or .tar.gz archive")


# Zip


def _zip_kind(info: zipfile.ZipInfo) -> MemberKind:
    """A zip member's type: the Unix mode in the upper 16 bits of external_attr, if any."""
    mode = info.external_attr >> 16
    if stat.S_IFMT(mode) == 0 or stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        # No Unix type recorded (e.g. Windows tools), or file/folder: zipfile itself decides
        # by the trailing slash, so this must too.
        return MemberKind.DIR if info.is_dir() else MemberKind.FILE
    return unix_kind(mode)


def _extract_zip(archive: Path, dest: Path, limits: ArchiveLimits) -> list[Entry]:
    try:
        zip_file = zipfile.ZipFile(archive)
    except READ_ERRORS as exc:
        raise corrupt_error("zip", exc) from None
    with zip_file:
        infos = zip_file.infolist()
        if len(infos) > limits.max_members:
            # Fail before looking at 100 000 names one by one.
            raise package_error(
                f"archive has too many members ({len(infos)}; limit {limits.max_members})"
            )
        checker = EntryChecker(limits, ARCHIVE_SCOPE)
        members: list[tuple[Entry, zipfile.ZipInfo]] = []
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
            raise package_error("archive is empty")

        # Decompress everything once into nothing: catches bad CRCs, truncation and lying sizes
        # before a byte is written.
        read_through = ByteBudget(limits, ARCHIVE_SCOPE)
        for entry, info in members:
            if not entry.is_dir:
                with _open_zip_member(zip_file, info) as source:
                    read_through.pump(guarded_reader(source, "zip"), entry)

        with populating(dest) as writer:
            written = ByteBudget(limits, ARCHIVE_SCOPE)
            for entry, info in members:
                if entry.is_dir:
                    writer.make_dir(entry.parts)
                    continue
                with (
                    _open_zip_member(zip_file, info) as source,
                    writer.open_file(entry.parts) as out,
                ):
                    written.pump(guarded_reader(source, "zip"), entry, out.write)
    return [entry for entry, _ in members]


def _open_zip_member(zip_file: zipfile.ZipFile, info: zipfile.ZipInfo) -> IO[bytes]:
    try:
        return zip_file.open(info)
    except READ_ERRORS as exc:
        raise corrupt_error("zip", exc) from None


# Tar


def _tar_kind(member: tarfile.TarInfo) -> MemberKind:
    if member.issym():
        return MemberKind.SYMLINK
    if member.islnk():
        return MemberKind.HARDLINK
    if member.ischr() or member.isblk():
        return MemberKind.DEVICE
    if member.isfifo():
        return MemberKind.FIFO
    if member.isdir():
        return MemberKind.DIR
    if member.issparse():
        return MemberKind.SPARSE
    if member.isreg():
        return MemberKind.FILE
    return MemberKind.OTHER


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
            raise package_error(
                f"archive decompresses to more than {format_bytes(self._cap)} "
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
        except READ_ERRORS as exc:
            raise corrupt_error("tar.gz", exc) from None
        with tar:
            yield _tar_members(tar)
    finally:
        capped.close()


def _tar_members(tar: tarfile.TarFile) -> Iterator[tuple[tarfile.TarInfo, tarfile.TarFile]]:
    while True:
        try:
            member = tar.next()
        except READ_ERRORS as exc:
            raise corrupt_error("tar.gz", exc) from None
        if member is None:
            return
        yield member, tar


@dataclass(frozen=True)
class _TarMember:
    """A tar member as the checking pass saw it; the writing pass must see the same header."""

    header: tuple[str, bytes, int]
    entry: Entry | None


def _tar_header(member: tarfile.TarInfo) -> tuple[str, bytes, int]:
    return (member.name, member.type, member.size)


def _extract_tar_gz(archive: Path, dest: Path, limits: ArchiveLimits) -> list[Entry]:
    checker = EntryChecker(limits, ARCHIVE_SCOPE)
    read_through = ByteBudget(limits, ARCHIVE_SCOPE)
    seen: list[_TarMember] = []
    with _open_tar_stream(archive, limits) as members:
        for member, tar in members:
            entry = checker.check(member.name, _tar_kind(member), member.size)
            _apply_data_filter(member, dest, checker)
            if entry is not None and not entry.is_dir:
                read_through.pump(guarded_reader(_tar_file(tar, member), "tar.gz"), entry)
            seen.append(_TarMember(_tar_header(member), entry))
    entries = [item.entry for item in seen if item.entry is not None]
    if not entries:
        raise package_error("archive is empty")

    # A stream cannot be rewound: read it a second time, checking it still says the same.
    with populating(dest) as writer, _open_tar_stream(archive, limits) as members:
        written = ByteBudget(limits, ARCHIVE_SCOPE)
        checked = iter(seen)
        for member, tar in members:
            expected = next(checked, None)
            if expected is None or expected.header != _tar_header(member):
                raise package_error("archive changed while it was being unpacked")
            entry = expected.entry
            if entry is None:
                continue
            if entry.is_dir:
                writer.make_dir(entry.parts)
                continue
            with writer.open_file(entry.parts) as out:
                written.pump(guarded_reader(_tar_file(tar, member), "tar.gz"), entry, out.write)
        if next(checked, None) is not None:
            raise package_error("archive changed while it was being unpacked")
    return entries


def _tar_file(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    try:
        source = tar.extractfile(member)
    except READ_ERRORS as exc:
        raise corrupt_error("tar.gz", exc) from None
    if source is None:  # only for non-files, which were rejected before
        raise package_error(f"archive member {show_name(member.name)}: not a regular file")
    return source


def _apply_data_filter(member: tarfile.TarInfo, dest: Path, checker: EntryChecker) -> None:
    """Run tarfile's own "data" filter too, as a second opinion on our checks."""
    try:
        tarfile.data_filter(member, str(dest))
    except tarfile.FilterError as exc:
        # The filter's message names server paths; the exception type says enough.
        raise checker.reject(
            member.name, f"refused by tarfile's data filter ({type(exc).__name__})"
        ) from None
