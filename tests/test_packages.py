"""Agent packages: hostile archives are refused whole, good ones unpack to a clean copy."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import struct
import tarfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

import pytest

from grader.exceptions import PackageError
from grader.packages import (
    DEFAULT_LIMITS,
    PACKAGE_DIRNAME,
    AgentManifest,
    ArchiveLimits,
    entries,
    extract_archive,
    parse_manifest,
    prepare_package,
    sha256_file,
)

MANIFEST = b'name = "demo-agent"\nentrypoint = "agent:answer"\n'
AGENT_PY = b"def answer(question):\n    return {'answer': 'no', 'citations': []}\n"
VALID = {"agent.toml": MANIFEST, "agent.py": AGENT_PY}


# ---------------------------------------------------------------------------------------------
# Archive builders


def write_zip(
    path: Path, members: dict[str, bytes], *, compression: int = zipfile.ZIP_DEFLATED
) -> Path:
    """Write a zip holding ``members`` (name -> bytes) exactly as named."""
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def patch_zip_headers(
    source: Path,
    target: Path,
    *,
    local_offset: int,
    central_offset: int,
    fmt: str,
    change: Callable[[int], int],
) -> Path:
    """Copy a zip, rewriting one field of every local and central header with ``change``."""
    raw = bytearray(source.read_bytes())
    for signature, offset in ((b"PK\x03\x04", local_offset), (b"PK\x01\x02", central_offset)):
        start = raw.find(signature)
        while start >= 0:
            (value,) = struct.unpack_from(fmt, raw, start + offset)
            struct.pack_into(fmt, raw, start + offset, change(value))
            start = raw.find(signature, start + 4)
    target.write_bytes(bytes(raw))
    return target


def file_info(name: str, data: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    """A regular tar member named exactly ``name``."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    return info, data


def special_info(name: str, member_type: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    """A non-regular tar member (link, device, fifo, folder) named exactly ``name``."""
    info = tarfile.TarInfo(name)
    info.type = member_type
    info.linkname = linkname
    return info, None


def write_tgz(path: Path, members: Iterable[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    """Write a .tar.gz from prepared members, so names and types are exactly as given."""
    with tarfile.open(path, "w:gz") as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def write_tgz_files(path: Path, members: dict[str, bytes]) -> Path:
    """Write a .tar.gz holding regular files ``members`` (name -> bytes)."""
    return write_tgz(path, (file_info(name, data) for name, data in members.items()))


def tree(root: Path) -> set[str]:
    """Every path under ``root`` (files, folders, links), relative, without following links."""
    found: set[str] = set()
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(folder, name), root))
    return found


def expect_rejection(
    tmp_path: Path,
    archive: Path,
    *fragments: str,
    limits: ArchiveLimits = DEFAULT_LIMITS,
) -> str:
    """Unpack ``archive`` expecting refusal; check the message and that nothing was written."""
    dest = tmp_path / "out" / "dest"
    before = tree(tmp_path)
    with pytest.raises(PackageError) as caught:
        extract_archive(archive, dest, limits=limits)
    message = str(caught.value)
    assert "\n" not in message and "\r" not in message, message
    for fragment in fragments:
        assert fragment.lower() in message.lower(), message
    assert not dest.exists(), "a refused archive left its destination behind"
    assert tree(tmp_path) == before, "a refused archive wrote something"
    return message


# ---------------------------------------------------------------------------------------------
# Valid archives and folders


def test_zip_with_single_top_folder_is_hoisted(tmp_path: Path) -> None:
    """A zip of a folder (one top-level directory holding agent.toml) unpacks with that folder
    as the package root."""
    members = {f"my-agent/{name}": data for name, data in VALID.items()}
    members["my-agent/data/notes.txt"] = b"hello"
    archive = write_zip(tmp_path / "upload.zip", members)

    root = extract_archive(archive, tmp_path / "dest")

    assert root == tmp_path / "dest" / "my-agent"
    assert (root / "agent.toml").read_bytes() == MANIFEST
    assert (root / "data" / "notes.txt").read_bytes() == b"hello"
    assert parse_manifest(root).entrypoint == "agent:answer"


def test_tar_gz_with_single_top_folder_is_hoisted(tmp_path: Path) -> None:
    """A .tar.gz of a folder, with explicit folder entries and './' prefixes, unpacks with the
    folder as the package root."""
    members = [
        special_info("./", tarfile.DIRTYPE),
        special_info("./my-agent", tarfile.DIRTYPE),
        *(file_info(f"./my-agent/{name}", data) for name, data in VALID.items()),
    ]
    archive = write_tgz(tmp_path / "upload.tar.gz", members)

    root = extract_archive(archive, tmp_path / "dest")

    assert root == tmp_path / "dest" / "my-agent"
    assert (root / "agent.py").read_bytes() == AGENT_PY


def test_flat_archive_root_is_the_destination(tmp_path: Path) -> None:
    """An archive with agent.toml at its top level unpacks with the destination as root."""
    archive = write_zip(tmp_path / "flat.zip", {**VALID, "lib/util.py": b"X = 1\n"})
    assert extract_archive(archive, tmp_path / "dest") == tmp_path / "dest"


def test_single_folder_without_manifest_is_not_hoisted(tmp_path: Path) -> None:
    """A lone top-level folder that holds no agent.toml is not taken for the package root."""
    archive = write_zip(tmp_path / "lib.zip", {"lib/agent.py": AGENT_PY})
    assert extract_archive(archive, tmp_path / "dest") == tmp_path / "dest"


def test_macos_metadata_folder_does_not_prevent_hoisting(tmp_path: Path) -> None:
    """The __MACOSX folder macOS adds beside a zipped folder is ignored when finding the root."""
    members = {f"my-agent/{name}": data for name, data in VALID.items()}
    members["__MACOSX/my-agent/._agent.py"] = b"\0\5\26\7"
    archive = write_zip(tmp_path / "mac.zip", members)
    assert extract_archive(archive, tmp_path / "dest") == tmp_path / "dest" / "my-agent"


def test_format_is_detected_by_content_not_name(tmp_path: Path) -> None:
    """A .tar.gz uploaded under a misleading name is still recognised and unpacked."""
    archive = write_tgz_files(tmp_path / "upload.zip", VALID)
    root = extract_archive(archive, tmp_path / "dest")
    assert (root / "agent.toml").read_bytes() == MANIFEST


def test_permissions_are_sanitised(tmp_path: Path) -> None:
    """Setuid, executable and private modes in an archive become 0644 files and 0755 folders."""
    tar_members = [
        special_info("secret", tarfile.DIRTYPE),
        file_info("secret/run.sh", b"#!/bin/sh\n", mode=0o4777),
        file_info("agent.toml", MANIFEST, mode=0o600),
        file_info("agent.py", AGENT_PY),
    ]
    tar_members[0][0].mode = 0o700
    tar_root = extract_archive(write_tgz(tmp_path / "a.tgz", tar_members), tmp_path / "t")

    zip_path = tmp_path / "a.zip"
    with zipfile.ZipFile(zip_path, "w") as archive:
        info = zipfile.ZipInfo("bin/tool")
        info.external_attr = (stat.S_IFREG | 0o6755) << 16
        archive.writestr(info, b"x")
        archive.writestr("agent.toml", MANIFEST)
    zip_root = extract_archive(zip_path, tmp_path / "z")

    for root in (tar_root, zip_root):
        for path in [root, *root.rglob("*")]:
            mode = stat.S_IMODE(path.lstat().st_mode)
            assert mode == (0o755 if path.is_dir() else 0o644), (path, oct(mode))


def test_valid_folder_is_copied_with_a_deterministic_hash(tmp_path: Path) -> None:
    """A folder is copied into workdir/package (clean modes, same bytes) and hashed the same way
    every time, and the hash changes when content or a name does."""
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "agent.toml").write_bytes(MANIFEST)
    (source / "agent.py").write_bytes(AGENT_PY)
    (source / "pkg" / "helpers.py").write_bytes(b"Y = 2\n")
    (source / ".hidden").write_bytes(b"kept")
    (source / "agent.py").chmod(0o755)

    first = prepare_package(source, tmp_path / "w1")
    second = prepare_package(source, tmp_path / "w2")

    assert first.root == tmp_path / "w1" / PACKAGE_DIRNAME
    assert first.source == source
    assert first.manifest == AgentManifest(name="demo-agent", entrypoint="agent:answer")
    assert tree(first.root) == tree(source)
    assert (first.root / "pkg" / "helpers.py").read_bytes() == b"Y = 2\n"
    assert stat.S_IMODE((first.root / "agent.py").stat().st_mode) == 0o644
    assert first.sha256 == second.sha256
    assert len(first.sha256) == 64

    (source / "pkg" / "helpers.py").write_bytes(b"Y = 3\n")
    changed_content = prepare_package(source, tmp_path / "w3").sha256
    (source / "pkg" / "helpers.py").rename(source / "pkg" / "helper.py")
    changed_name = prepare_package(source, tmp_path / "w4").sha256
    assert len({first.sha256, changed_content, changed_name}) == 3


def test_prepare_package_from_archive(tmp_path: Path) -> None:
    """An archive is unpacked into workdir/package, hoisted, and hashed by its bytes."""
    members = {f"my-agent/{name}": data for name, data in VALID.items()}
    archive = write_zip(tmp_path / "upload.zip", members)

    package = prepare_package(archive, tmp_path / "work")

    assert package.root == tmp_path / "work" / PACKAGE_DIRNAME / "my-agent"
    assert package.sha256 == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert package.sha256 == sha256_file(archive)
    assert package.manifest.name == "demo-agent"
    assert package.source == archive


def test_default_limits_match_the_design() -> None:
    """The default caps are the documented ones, and a non-positive cap is refused."""
    limits = ArchiveLimits()
    assert limits.max_archive_bytes == 20 * 1024 * 1024
    assert limits.max_total_bytes == 100 * 1024 * 1024
    assert limits.max_file_bytes == 20 * 1024 * 1024
    assert limits.max_members == 2000
    assert limits.max_ratio == 100
    assert limits.max_path_length == 255
    assert limits.max_depth == 20
    with pytest.raises(ValueError, match="max_members"):
        ArchiveLimits(max_members=0)


# ---------------------------------------------------------------------------------------------
# Path escapes


SLIP_NAMES = [
    ("../evil.txt", "'..'"),
    ("agent/../../evil.txt", "'..'"),
    ("{absolute}", "absolute path"),
    ("C:/evil.txt", "drive letter"),
    ("..\\evil.txt", "backslash"),
    ("ok/\x1b[2Jevil.txt", "control character"),
]


@pytest.mark.parametrize(("name", "reason"), SLIP_NAMES)
@pytest.mark.parametrize("archive_format", ["zip", "tar.gz"])
def test_path_escapes_are_refused(
    tmp_path: Path, archive_format: str, name: str, reason: str
) -> None:
    """Members named to land outside the destination (.., absolute, drive letter, backslash,
    control characters) are refused in zip and tar before anything is written."""
    name = name.replace("{absolute}", str(tmp_path / "absolute-evil.txt"))
    members = {**VALID, name: b"pwned"}
    if archive_format == "zip":
        archive = write_zip(tmp_path / "slip.zip", members)
    else:
        archive = write_tgz_files(tmp_path / "slip.tgz", members)
    expect_rejection(tmp_path, archive, reason)
    assert not (tmp_path / "absolute-evil.txt").exists()
    assert not (tmp_path / "out" / "evil.txt").exists()


# ---------------------------------------------------------------------------------------------
# Links and special members


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (special_info("passwd", tarfile.SYMTYPE, "/etc/passwd"), "symlink"),
        (special_info("inside", tarfile.SYMTYPE, "agent.py"), "symlink"),
        (special_info("up", tarfile.SYMTYPE, "../.."), "symlink"),
        (special_info("shadow", tarfile.LNKTYPE, "/etc/shadow"), "hardlink"),
        (special_info("again.py", tarfile.LNKTYPE, "agent.py"), "hardlink"),
        (special_info("null", tarfile.CHRTYPE), "device"),
        (special_info("disk", tarfile.BLKTYPE), "device"),
        (special_info("pipe", tarfile.FIFOTYPE), "fifo"),
    ],
    ids=[
        "symlink-out",
        "symlink-in",
        "symlink-up",
        "hardlink-out",
        "hardlink-in",
        "chr",
        "blk",
        "fifo",
    ],
)
def test_tar_links_and_special_files_are_refused(
    tmp_path: Path, member: tuple[tarfile.TarInfo, None], reason: str
) -> None:
    """Symlinks and hardlinks (wherever they point), devices and fifos in a tar are refused."""
    archive = write_tgz(
        tmp_path / "links.tgz", [*(file_info(n, d) for n, d in VALID.items()), member]
    )
    expect_rejection(tmp_path, archive, reason)


def test_zip_symlink_is_refused(tmp_path: Path) -> None:
    """A zip member whose Unix mode (external_attr's upper bits) says symlink is refused."""
    archive = tmp_path / "link.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for name, data in VALID.items():
            handle.writestr(name, data)
        link = zipfile.ZipInfo("passwd")
        link.create_system = 3
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        handle.writestr(link, "/etc/passwd")
    expect_rejection(tmp_path, archive, "symlink", "'passwd'")


def test_zip_device_mode_is_refused(tmp_path: Path) -> None:
    """A zip member whose Unix mode says character device is refused."""
    archive = tmp_path / "dev.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        device = zipfile.ZipInfo("null")
        device.external_attr = (stat.S_IFCHR | 0o666) << 16
        handle.writestr(device, b"")
    expect_rejection(tmp_path, archive, "device")


# ---------------------------------------------------------------------------------------------
# Bombs and caps


def test_zip_bomb_is_refused_by_compression_ratio(tmp_path: Path) -> None:
    """A 50 MB member that compresses to a few KB (ratio ~1000:1) is refused from its header."""
    archive = write_zip(tmp_path / "bomb.zip", {**VALID, "data.bin": bytes(50_000_000)})
    assert archive.stat().st_size < 1_000_000
    expect_rejection(tmp_path, archive, "compression ratio", "'data.bin'")


def test_many_small_compressible_members_hit_the_total_size_cap(tmp_path: Path) -> None:
    """120 members of 1 MB zeros, each under the ratio check's floor, exceed the 100 MiB total."""
    chunk = bytes(1_000_000)
    members = {**VALID, **{f"blob{i:03}.bin": chunk for i in range(120)}}
    archive = write_zip(tmp_path / "wide-bomb.zip", members)
    expect_rejection(tmp_path, archive, "total size limit")


@pytest.mark.parametrize("archive_format", ["zip", "tar.gz"])
def test_total_declared_size_cap(tmp_path: Path, archive_format: str) -> None:
    """Files each under the per-file cap but together over the total cap are refused."""
    limits = ArchiveLimits(max_total_bytes=1000, max_file_bytes=800)
    members = {"a.bin": os.urandom(600), "b.bin": os.urandom(600)}
    if archive_format == "zip":
        archive = write_zip(tmp_path / "big.zip", members)
    else:
        archive = write_tgz_files(tmp_path / "big.tgz", members)
    expect_rejection(tmp_path, archive, "total size limit", limits=limits)


@pytest.mark.parametrize("archive_format", ["zip", "tar.gz"])
def test_per_file_size_cap(tmp_path: Path, archive_format: str) -> None:
    """A single file over the per-file cap is refused, naming the file."""
    limits = ArchiveLimits(max_file_bytes=1000)
    members = {**VALID, "model.bin": os.urandom(1500)}
    if archive_format == "zip":
        archive = write_zip(tmp_path / "big.zip", members)
    else:
        archive = write_tgz_files(tmp_path / "big.tgz", members)
    expect_rejection(tmp_path, archive, "file too large", "'model.bin'", limits=limits)


def test_tar_gz_bomb_is_refused_from_its_header(tmp_path: Path) -> None:
    """A .tar.gz holding a 50 MB member of zeros is refused by the per-file cap, from its header."""
    archive = write_tgz(tmp_path / "bomb.tgz", [file_info("data.bin", bytes(50_000_000))])
    assert archive.stat().st_size < 1_000_000
    expect_rejection(tmp_path, archive, "file too large", "'data.bin'")


def test_tar_gz_header_bloat_hits_the_decompression_cap(tmp_path: Path) -> None:
    """Tar headers that expand far beyond what the members' sizes account for (a huge pax
    record) are stopped by the cap on decompressed bytes."""
    info, data = file_info("agent.toml", MANIFEST)
    info.pax_headers = {"comment": "x" * 200_000}
    archive = tmp_path / "bloat.tgz"
    with tarfile.open(archive, "w:gz", format=tarfile.PAX_FORMAT) as handle:
        handle.addfile(info, io.BytesIO(data))
    limits = ArchiveLimits(max_total_bytes=1000, max_members=2)
    expect_rejection(tmp_path, archive, "decompresses to more than", limits=limits)


def test_archive_file_size_cap(tmp_path: Path) -> None:
    """An archive file larger than max_archive_bytes is refused before it is opened."""
    archive = write_zip(tmp_path / "big.zip", {**VALID, "x.bin": os.urandom(5000)})
    expect_rejection(
        tmp_path, archive, "archive is too large", limits=ArchiveLimits(max_archive_bytes=4000)
    )


def test_hundred_thousand_tiny_files_hit_the_member_cap(tmp_path: Path) -> None:
    """A zip of 100 000 empty files is refused for having too many members."""
    archive = tmp_path / "many.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as handle:
        for index in range(100_000):
            handle.writestr(f"f{index}", b"")
    expect_rejection(tmp_path, archive, "too many members")


def test_tar_member_cap_stops_early(tmp_path: Path) -> None:
    """A tar with more members than allowed is refused for having too many members."""
    members = {f"f{index}.txt": b"" for index in range(11)}
    archive = write_tgz_files(tmp_path / "many.tgz", members)
    expect_rejection(tmp_path, archive, "too many members", limits=ArchiveLimits(max_members=10))


@pytest.mark.parametrize("archive_format", ["zip", "tar.gz"])
def test_very_deep_path_is_refused(tmp_path: Path, archive_format: str) -> None:
    """A file 50 folders deep is refused as too deep."""
    name = "d/" * 50 + "f.txt"
    members = {**VALID, name: b"deep"}
    if archive_format == "zip":
        archive = write_zip(tmp_path / "deep.zip", members)
    else:
        archive = write_tgz_files(tmp_path / "deep.tgz", members)
    expect_rejection(tmp_path, archive, "too deep")


@pytest.mark.parametrize("archive_format", ["zip", "tar.gz"])
def test_very_long_name_is_refused(tmp_path: Path, archive_format: str) -> None:
    """A 300-character member name is refused as too long, and the message stays short."""
    members = {**VALID, "n" * 300: b"long"}
    if archive_format == "zip":
        archive = write_zip(tmp_path / "long.zip", members)
    else:
        archive = write_tgz_files(tmp_path / "long.tgz", members)
    message = expect_rejection(tmp_path, archive, "too long")
    assert len(message) < 200


def test_duplicate_and_conflicting_members_are_refused(tmp_path: Path) -> None:
    """The same path twice, or a path that is both file and folder, is refused."""
    duplicate = tmp_path / "dup.zip"
    with zipfile.ZipFile(duplicate, "w") as handle, pytest.warns(UserWarning):
        handle.writestr("agent.py", b"first")
        handle.writestr("agent.py", b"second")
    expect_rejection(tmp_path, duplicate, "duplicate")
    conflict = write_zip(tmp_path / "conflict.zip", {"lib": b"file", "lib/x.py": b"file in it"})
    expect_rejection(tmp_path, conflict, "both a file and a folder")


def test_encrypted_zip_member_is_refused(tmp_path: Path) -> None:
    """A member flagged as encrypted is refused rather than failing mid-extraction."""
    plain = write_zip(tmp_path / "plain.zip", VALID)
    # zipfile cannot write encrypted members: set the "encrypted" flag bit in both headers.
    encrypted = patch_zip_headers(
        plain,
        tmp_path / "enc.zip",
        local_offset=6,
        central_offset=8,
        fmt="<H",
        change=lambda flags: flags | 0x1,
    )
    expect_rejection(tmp_path, encrypted, "encrypted")


# ---------------------------------------------------------------------------------------------
# Not archives, corrupt archives


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("agent.zip", b"this is just text, not an archive\n"),
        ("empty.tar.gz", b""),
        ("script.tgz", b"#!/bin/sh\nrm -rf /\n"),
    ],
)
def test_non_archive_is_refused(tmp_path: Path, name: str, content: bytes) -> None:
    """A file that is neither zip nor gzip is refused whatever its name says."""
    archive = tmp_path / name
    archive.write_bytes(content)
    expect_rejection(tmp_path, archive, "not a .zip or .tar.gz archive")


def test_uncompressed_tar_is_refused(tmp_path: Path) -> None:
    """A plain .tar (not gzipped) is not one of the accepted formats."""
    archive = tmp_path / "plain.tar"
    with tarfile.open(archive, "w") as handle:
        info, data = file_info("agent.toml", MANIFEST)
        handle.addfile(info, io.BytesIO(data))
    expect_rejection(tmp_path, archive, "not a .zip or .tar.gz archive")


def test_truncated_zip_is_refused(tmp_path: Path) -> None:
    """A zip cut in half (no central directory) is refused as corrupt."""
    whole = write_zip(tmp_path / "whole.zip", {**VALID, "data.bin": os.urandom(20_000)})
    cut = tmp_path / "cut.zip"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    expect_rejection(tmp_path, cut, "corrupt")


def test_zip_with_damaged_data_is_refused_before_writing(tmp_path: Path) -> None:
    """A zip whose member data was altered (CRC mismatch) is refused with nothing written,
    even though its headers are fine."""
    payload = os.urandom(20_000)
    whole = write_zip(
        tmp_path / "ok.zip", {**VALID, "data.bin": payload}, compression=zipfile.ZIP_STORED
    )
    raw = bytearray(whole.read_bytes())
    offset = bytes(raw).index(payload[:64])
    raw[offset + 100] ^= 0xFF
    damaged = tmp_path / "damaged.zip"
    damaged.write_bytes(bytes(raw))
    expect_rejection(tmp_path, damaged, "corrupt", "crc")


def test_zip_overstating_a_size_is_refused(tmp_path: Path) -> None:
    """A zip whose headers declare more bytes than the member really holds is refused: the
    bytes actually read are counted, not the declared size trusted."""
    honest = write_zip(tmp_path / "ok.zip", VALID)
    real_size = len(AGENT_PY)
    lying = patch_zip_headers(
        honest,
        tmp_path / "lying.zip",
        local_offset=22,
        central_offset=24,
        fmt="<I",
        change=lambda size: size + 500 if size == real_size else size,
    )
    expect_rejection(tmp_path, lying, "less data than its header declares", "'agent.py'")


def test_truncated_tar_gz_is_refused(tmp_path: Path) -> None:
    """A .tar.gz cut short is refused as corrupt."""
    whole = write_tgz_files(tmp_path / "whole.tgz", {**VALID, "data.bin": os.urandom(20_000)})
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size - 5000])
    expect_rejection(tmp_path, cut, "corrupt")


def test_gzip_that_is_not_a_tar_is_refused(tmp_path: Path) -> None:
    """A gzipped text file is refused as a corrupt .tar.gz."""
    archive = tmp_path / "notes.tar.gz"
    archive.write_bytes(gzip.compress(b"just some notes\n" * 100))
    expect_rejection(tmp_path, archive, "corrupt")


def test_empty_zip_is_refused(tmp_path: Path) -> None:
    """A zip with no members is refused as empty."""
    archive = write_zip(tmp_path / "empty.zip", {})
    expect_rejection(tmp_path, archive, "empty")


# ---------------------------------------------------------------------------------------------
# Destination handling


def test_existing_empty_destination_is_left_empty_on_refusal(tmp_path: Path) -> None:
    """When the destination folder already exists (empty), a refusal leaves it there, empty."""
    dest = tmp_path / "dest"
    dest.mkdir()
    archive = write_zip(tmp_path / "slip.zip", {**VALID, "../evil.txt": b"x"})
    with pytest.raises(PackageError, match=r"'\.\.'"):
        extract_archive(archive, dest)
    assert dest.is_dir() and not any(dest.iterdir())


def test_non_empty_destination_is_not_overwritten(tmp_path: Path) -> None:
    """Unpacking over a folder that already has content is a programming error, not a merge."""
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    archive = write_zip(tmp_path / "ok.zip", VALID)
    with pytest.raises(FileExistsError):
        extract_archive(archive, dest)
    assert tree(dest) == {"keep.txt"}


def test_failure_while_writing_removes_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If writing fails halfway (e.g. disk full), the half-written destination is removed."""
    original = entries.TreeWriter.open_file
    calls = 0

    def failing_open(self: entries.TreeWriter, parts: tuple[str, ...]) -> IO[bytes]:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise OSError(28, "No space left on device")
        return original(self, parts)

    monkeypatch.setattr(entries.TreeWriter, "open_file", failing_open)
    members = {**VALID, "lib/a.py": b"a", "lib/b.py": b"b"}
    for archive in (
        write_zip(tmp_path / "ok.zip", members),
        write_tgz_files(tmp_path / "ok.tgz", members),
    ):
        calls = 0
        with pytest.raises(OSError, match="No space"):
            extract_archive(archive, tmp_path / "dest")
        assert not (tmp_path / "dest").exists()


def test_byte_counter_refuses_more_data_than_declared() -> None:
    """The write-time counter refuses a member that yields more bytes than its header said,
    so a lying header cannot smuggle past the size caps."""
    entry = entries.Entry(("agent.py",), is_dir=False, size=10)
    budget = entries.ByteBudget(DEFAULT_LIMITS, entries.ARCHIVE_SCOPE)
    with pytest.raises(PackageError, match="more data than its header declares"):
        budget.pump(io.BytesIO(b"x" * 11).read, entry)


# ---------------------------------------------------------------------------------------------
# Folders


def test_missing_source_is_reported(tmp_path: Path) -> None:
    """A package path that does not exist is reported as such, with the path."""
    missing = tmp_path / "nope.zip"
    with pytest.raises(PackageError, match=r"package not found: .*nope\.zip"):
        prepare_package(missing, tmp_path / "work")


def make_folder(root: Path) -> Path:
    root.mkdir()
    for name, data in VALID.items():
        (root / name).write_bytes(data)
    return root


def expect_folder_rejection(
    tmp_path: Path, source: Path, *fragments: str, limits: ArchiveLimits = DEFAULT_LIMITS
) -> None:
    """Prepare ``source`` expecting refusal, a one-line message, and no package copy left."""
    with pytest.raises(PackageError) as caught:
        prepare_package(source, tmp_path / "work", limits=limits)
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment.lower() in message.lower(), message
    assert not (tmp_path / "work" / PACKAGE_DIRNAME).exists()


def test_folder_with_symlink_is_refused(tmp_path: Path) -> None:
    """A folder holding a symlink that points outside it is refused, naming the link."""
    source = make_folder(tmp_path / "src")
    (source / "creds").symlink_to("/etc/passwd")
    expect_folder_rejection(tmp_path, source, "symlink", "'creds'")


def test_folder_with_fifo_is_refused(tmp_path: Path) -> None:
    """A folder holding a named pipe is refused (reading it would hang the grader)."""
    source = make_folder(tmp_path / "src")
    os.mkfifo(source / "pipe")
    expect_folder_rejection(tmp_path, source, "fifo")


def test_folder_member_cap(tmp_path: Path) -> None:
    """A folder with more entries than allowed is refused for having too many members."""
    source = make_folder(tmp_path / "src")
    for index in range(10):
        (source / f"f{index}").write_bytes(b"")
    expect_folder_rejection(
        tmp_path, source, "too many members", limits=ArchiveLimits(max_members=5)
    )


def test_folder_size_cap(tmp_path: Path) -> None:
    """A folder whose files together exceed the total cap is refused."""
    source = make_folder(tmp_path / "src")
    (source / "big.bin").write_bytes(bytes(5000))
    expect_folder_rejection(
        tmp_path, source, "total size limit", limits=ArchiveLimits(max_total_bytes=4000)
    )


# ---------------------------------------------------------------------------------------------
# Manifest


def manifest_dir(
    tmp_path: Path, manifest: bytes | str, files: Iterable[str] = ("agent.py",)
) -> Path:
    """A package folder with ``agent.toml`` = ``manifest`` and empty module files ``files``."""
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "agent.toml").write_bytes(manifest.encode() if isinstance(manifest, str) else manifest)
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"")
    return root


def manifest_error(root: Path) -> str:
    with pytest.raises(PackageError) as caught:
        parse_manifest(root)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_missing_manifest_is_reported(tmp_path: Path) -> None:
    """An archive without agent.toml unpacks but cannot become a package; nothing is left."""
    archive = write_zip(tmp_path / "no-manifest.zip", {"agent.py": AGENT_PY})
    with pytest.raises(PackageError, match=r"^agent\.toml not found at the package root$"):
        prepare_package(archive, tmp_path / "work")
    assert not (tmp_path / "work" / PACKAGE_DIRNAME).exists()


def test_nested_manifest_gets_a_hint(tmp_path: Path) -> None:
    """An agent.toml buried two folders down is pointed at in the error."""
    archive = write_zip(tmp_path / "nested.zip", {"a/b/agent.toml": MANIFEST, "a/c.txt": b""})
    with pytest.raises(PackageError, match=r"there is one at 'a/b/agent\.toml'"):
        prepare_package(archive, tmp_path / "work")


@pytest.mark.parametrize(
    ("manifest", "fragments"),
    [
        ('name = "x"\nentrypoint = \n', ["not valid TOML", "line 2"]),
        ('name = "x"\nentrypoint = "agent:answer"\nversion = "1"\n', ["unknown field 'version'"]),
        ('name = "x"\n', ["missing required field 'entrypoint'"]),
        ('entrypoint = "agent:answer"\n', ["missing required field 'name'"]),
        ('name = 7\nentrypoint = "agent:answer"\n', ["'name'", "string"]),
        ('name = "my agent"\nentrypoint = "agent:answer"\n', ["'name'", "letters, digits"]),
        ('name = "-x"\nentrypoint = "agent:answer"\n', ["'name'", "start with a letter"]),
        (f'name = "{"a" * 65}"\nentrypoint = "agent:answer"\n', ["'name'", "64"]),
        ('name = ""\nentrypoint = "agent:answer"\n', ["'name'"]),
        ('name = "x"\nentrypoint = "agent"\n', ["'entrypoint'", "module:function"]),
        ('name = "x"\nentrypoint = "agent:"\n', ["'entrypoint'", "module:function"]),
        ('name = "x"\nentrypoint = ":answer"\n', ["'entrypoint'", "module:function"]),
        ('name = "x"\nentrypoint = "agent:an-swer"\n', ["'entrypoint'", "module:function"]),
        ('name = "x"\nentrypoint = "1agent:answer"\n', ["'entrypoint'", "module:function"]),
        ('name = "x"\nentrypoint = "agent.:answer"\n', ["'entrypoint'", "module:function"]),
        ('name = "x"\nentrypoint = "../agent:answer"\n', ["'entrypoint'", "module:function"]),
        ('name = "x"\nentrypoint = "agent:class"\n', ["'entrypoint'", "keyword"]),
        ('name = "x"\nentrypoint = "json:loads"\n', ["'entrypoint'", "standard-library"]),
        (
            'name = "x"\nentrypoint = "agent:answer"\nsetup = "agent"\n',
            ["'setup'", "module:function"],
        ),
        ('name = "x"\nentrypoint = ["agent:answer"]\n', ["'entrypoint'"]),
    ],
)
def test_malformed_manifest_names_the_problem(
    tmp_path: Path, manifest: str, fragments: list[str]
) -> None:
    """Bad TOML (with its line), unknown, missing or invalid fields are reported by name."""
    message = manifest_error(manifest_dir(tmp_path, manifest))
    assert message.startswith("agent.toml")
    for fragment in fragments:
        assert fragment in message, message


def test_entrypoint_module_must_exist(tmp_path: Path) -> None:
    """An entrypoint whose module has no file in the package is refused, saying what was looked for."""
    root = manifest_dir(tmp_path, 'name = "x"\nentrypoint = "solver:answer"\n')
    message = manifest_error(root)
    assert "entrypoint module 'solver' not found" in message
    assert "solver.py or solver/__init__.py" in message


def test_setup_module_must_exist(tmp_path: Path) -> None:
    """A setup hook whose module is missing is refused, naming the setup field."""
    root = manifest_dir(tmp_path, 'name = "x"\nentrypoint = "agent:answer"\nsetup = "boot:setup"\n')
    assert "setup module 'boot' not found" in manifest_error(root)


@pytest.mark.parametrize(
    ("entrypoint", "module_file"),
    [
        ("agent:answer", "agent.py"),
        ("agent:answer", "agent/__init__.py"),
        ("pkg.mod:answer", "pkg/mod.py"),
        ("pkg.mod:answer", "pkg/mod/__init__.py"),
    ],
)
def test_entrypoint_module_layouts(tmp_path: Path, entrypoint: str, module_file: str) -> None:
    """Modules are found as plain files or as packages, dotted paths included."""
    root = manifest_dir(
        tmp_path,
        f'name = "x"\nentrypoint = "{entrypoint}"\nsetup = "{entrypoint.replace("answer", "setup")}"\n',
        files=[module_file],
    )
    manifest = parse_manifest(root)
    assert manifest.entrypoint == entrypoint
    assert manifest.setup is not None


def test_manifest_not_utf8_or_symlinked(tmp_path: Path) -> None:
    """A manifest that is not UTF-8, or that is a symlink, is refused with a reason."""
    root = manifest_dir(tmp_path, b'name = "caf\xe9"\nentrypoint = "agent:answer"\n')
    assert "UTF-8" in manifest_error(root)
    (root / "agent.toml").unlink()
    (root / "agent.toml").symlink_to("/etc/hostname")
    assert "symlink" in manifest_error(root)


def test_manifest_model_is_frozen_and_strict() -> None:
    """The manifest model cannot be changed after validation and refuses unknown fields."""
    manifest = AgentManifest(name="a", entrypoint="agent:answer")
    with pytest.raises(ValueError):
        manifest.name = "b"
    with pytest.raises(ValueError, match="extra"):
        AgentManifest.model_validate({"name": "a", "entrypoint": "agent:answer", "x": 1})
