"""Copies of the agent, corpus and runner under a neutral path, made for one sandboxed run.

Why copies: a bind mount shows its source's path in ``/proc/self/mountinfo`` inside the
sandbox (the "root" field), so mounting the grader's own folders would tell the agent where
the grader keeps submissions, case sets and its code. Each run's copies live in
``/run/grader-sandbox/<random>/`` (a root grader) or ``$TMPDIR/grader-sandbox-<uid>/<random>/``
(anyone else), so the only host path an agent can see names nothing but a random token.

The copies are normalised: directories 0755, files 0644 (0755 when the source was
executable), no set-uid, set-gid or sticky bits, symbolic links copied as links (never
followed, so a link in a package cannot make the grader copy a host file), and anything that
is not a file, folder or link skipped. Only the run folder itself restricts access: 0700, or
0750 with the sandbox user's group when bubblewrap runs as that user. The folder is removed when
the run ends.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.exceptions import SandboxFailure

from .base import RUNNER_PATH, LaunchSpec

PRIVILEGED_ROOT = Path("/run/grader-sandbox")


def staging_root() -> Path:
    """The folder holding every run's copies; created 0711 and owned by the grader."""
    uid = os.geteuid()
    root = PRIVILEGED_ROOT if uid == 0 else Path(tempfile.gettempdir()) / f"grader-sandbox-{uid}"
    try:
        root.mkdir(mode=0o711, parents=True, exist_ok=True)
        info = os.lstat(root)
        # In a shared /tmp someone else could have made the folder (or a link) first.
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
            raise SandboxFailure(f"staging folder {root} is not a folder owned by uid {uid}")
        os.chmod(root, 0o711)
    except OSError as exc:
        raise SandboxFailure(f"cannot create the staging folder {root}: {exc.strerror}") from None
    return root


@dataclass(frozen=True)
class StagedRun:
    """One run's copies: ``agent/``, ``corpus/`` and ``runner.py`` under ``root``."""

    root: Path

    @property
    def agent(self) -> Path:
        return self.root / "agent"

    @property
    def corpus(self) -> Path:
        return self.root / "corpus"

    @property
    def runner(self) -> Path:
        return self.root / "runner.py"

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def stage(spec: LaunchSpec, *, group: int | None = None, runner: Path = RUNNER_PATH) -> StagedRun:
    """Copy the run's agent, corpus and runner; ``group`` may read them (else only the owner)."""
    # The grader's pid in the name lets sweep_staged() find copies of graders that died.
    run = StagedRun(staging_root() / f"{os.getpid()}-{secrets.token_hex(8)}")
    try:
        run.root.mkdir(mode=0o700)
        for source, target, what in (
            (spec.agent_dir, run.agent, "agent"),
            (spec.corpus_dir, run.corpus, "corpus"),
        ):
            if not source.is_dir():
                raise SandboxFailure(f"{what} folder {source} does not exist")
            _copy_tree(source, target)
        shutil.copyfile(runner, run.runner)
        os.chmod(run.runner, 0o644)
        if group is not None:
            os.chown(run.root, -1, group)
            os.chmod(run.root, 0o750)
    except OSError as exc:
        run.remove()
        where = exc.filename or "?"
        raise SandboxFailure(f"cannot stage the run's files ({where}: {exc.strerror})") from None
    except SandboxFailure:
        run.remove()
        raise
    return run


def sweep_staged() -> int:
    """Remove the staged copies of graders that are no longer running; return how many."""
    removed = 0
    try:
        entries = list(staging_root().iterdir())
    except SandboxFailure:
        return 0
    for entry in entries:
        owner = entry.name.partition("-")[0]
        if not owner.isdigit() or int(owner) == os.getpid():
            continue
        if not pid_alive(int(owner)):
            StagedRun(entry).remove()
            removed += 1
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (the owner of staged copies or run cgroups)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, as someone else
        return True
    return True


def _copy_tree(source: Path, target: Path) -> None:
    def special(folder: str, names: list[str]) -> set[str]:
        skipped = set()
        for name in names:
            mode = os.lstat(os.path.join(folder, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                skipped.add(name)
        return skipped

    shutil.copytree(
        source, target, symlinks=True, ignore=special, copy_function=_copy_file, dirs_exist_ok=False
    )
    # copytree copies folder modes; reset them so nothing set-gid or unreadable comes along.
    for folder, dirs, _files in os.walk(target):
        for name in dirs:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755)
    os.chmod(target, 0o755)


def _copy_file(source: str, target: str) -> None:
    shutil.copyfile(source, target, follow_symlinks=False)
    executable = os.lstat(source).st_mode & 0o111
    os.chmod(target, 0o755 if executable else 0o644)


def private_folder() -> Path:
    """A new empty folder beside the staged copies (e.g. for a run's model-gateway socket).

    Mode 0711: a sandboxed agent (any uid) may reach a socket inside by its name, nobody may
    list it; its random name is all the sandbox sees of the host. The caller removes it;
    :func:`sweep_staged` removes it if the grader dies first.
    """
    folder = staging_root() / f"{os.getpid()}-{secrets.token_hex(8)}"
    try:
        folder.mkdir(mode=0o711)
        os.chmod(folder, 0o711)
    except OSError as exc:
        raise SandboxFailure(f"cannot create a run folder ({exc.strerror})") from None
    return folder
