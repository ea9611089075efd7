"""Copying a package folder (local runs) under the same rules as an archive, and hashing it."""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO

from .entries import (
    FOLDER_SCOPE,
    ByteBudget,
    Entry,
    EntryChecker,
    MemberKind,
    populating,
    require_empty_destination,
    unix_kind,
)
from .limits import (
    ArchiveLimits,
    guarded_reader,
    package_error,
    show_name,
)


def _scan_folder(source: Path, limits: ArchiveLimits) -> list[Entry]:
    """Check every entry under ``source`` without following symlinks; return them sorted."""
    checker = EntryChecker(limits, FOLDER_SCOPE)
    entries: list[Entry] = []
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
            raise package_error(
                f"cannot read package folder {show_name('/'.join(folder) or '.')}: {exc.strerror}"
            ) from None
        for child in children:
            parts = (*folder, child.name)
            status = child.stat(follow_symlinks=False)
            kind = unix_kind(status.st_mode)
            size = status.st_size if kind is MemberKind.FILE else 0
            entry = checker.check("/".join(parts), kind, size)
            if entry is None:
                continue
            entries.append(entry)
            if entry.is_dir:
                pending.append(entry.parts)
    return sorted(entries, key=lambda entry: entry.parts)


def copy_folder(source: Path, dest: Path, limits: ArchiveLimits) -> str:
    """Copy a checked folder into ``dest`` and return its tree hash.

    The hash covers, in sorted path order, each entry's kind and path and each file's content
    digest, so it depends on nothing but what the sandbox will see.
    """
    require_empty_destination(dest)
    entries = _scan_folder(source, limits)
    tree_hash = hashlib.sha256()
    with populating(dest) as writer:
        budget = ByteBudget(limits, FOLDER_SCOPE)
        for entry in entries:
            path_bytes = entry.relpath.encode("utf-8")
            if entry.is_dir:
                writer.make_dir(entry.parts)
                tree_hash.update(b"D\0" + path_bytes + b"\0")
                continue
            content_hash = hashlib.sha256()
            with _open_folder_file(source, entry) as src, writer.open_file(entry.parts) as out:
                budget.pump(guarded_reader(src, "folder"), entry, _tee(out, content_hash))
            tree_hash.update(b"F\0" + path_bytes + b"\0" + content_hash.digest())
    return tree_hash.hexdigest()


def _tee(out: IO[bytes], digest: hashlib._Hash) -> Callable[[bytes], None]:
    """A sink that writes each chunk to ``out`` and feeds it to ``digest``."""

    def sink(chunk: bytes) -> None:
        digest.update(chunk)
        out.write(chunk)

    return sink


def _open_folder_file(source: Path, entry: Entry) -> IO[bytes]:
    """Open a file of the folder, refusing it if it became a symlink since the scan."""
    try:
        descriptor = os.open(
            source.joinpath(*entry.parts), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        )
    except OSError as exc:
        raise package_error(
            f"package file {show_name(entry.relpath)}: cannot read it ({exc.strerror})"
        ) from None
    return os.fdopen(descriptor, "rb")
