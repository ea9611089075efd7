"""Sandbox containers whose grader is gone: how they are labelled, found and removed.

Every sandbox container carries ``grader.role=sandbox``, the run's label and an owner token
(``host:pid:start time`` of the grader that made it). :func:`remove_orphans` removes the ones
whose owner provably died, that stopped, or that outlived any legitimate run.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import docker
import docker.errors

ROLE_LABEL = "grader.role"
SUBMISSION_LABEL = "grader.submission"
OWNER_LABEL = "grader.owner"
#: A sandbox container still running after this long is removed by :func:`remove_orphans`
#: whoever owns it: no legitimate run comes near it (the run deadline is minutes), and it is
#: the only way to reclaim containers whose owner lived on another host or in a container.
ORPHAN_MAX_AGE_S = 2 * 3600.0
#: A stopped container is left this long to its owner, which may still be reading its exit
#: state (out of memory?) before removing it itself.
STOPPED_GRACE_S = 60.0


def remove_orphans(
    client: docker.DockerClient, *, max_age_s: float | None = ORPHAN_MAX_AGE_S
) -> int:
    """Remove sandbox containers nobody is using any more; return how many were removed.

    A container labelled ``grader.role=sandbox`` is an orphan when the grader process that
    created it (on this host) has died, when it stopped more than a grace period after it was
    created, or when it has existed longer than ``max_age_s``. A container another worker has
    just created and not yet started is *not* an orphan: several workers share one engine, and
    sweeping each other's fresh containers made both first runs fail.
    """
    removed = 0
    containers: Iterable[dict[str, Any]] = client.api.containers(
        all=True, filters={"label": f"{ROLE_LABEL}=sandbox"}
    )
    now = time.time()
    for entry in containers:
        labels = entry.get("Labels") or {}
        age = now - float(entry.get("Created", now))
        in_use = entry.get("State") in ("created", "running") or age < STOPPED_GRACE_S
        too_old = max_age_s is not None and age > max_age_s
        if in_use and not too_old and _owner_alive(labels.get(OWNER_LABEL, "")):
            continue
        if force_remove(client, str(entry["Id"])) is None:
            removed += 1
    return removed


def owner_token() -> str:
    """``host:pid:starttime`` of this process; the start time guards against pid reuse."""
    return f"{socket.gethostname()}:{os.getpid()}:{_process_start(os.getpid())}"


def _owner_alive(token: str) -> bool:
    """False only when the owner provably died: same host, and its pid is gone or reused."""
    host, _, rest = token.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return True  # another host's (or an unlabelled) container: cannot tell, keep it
    return _process_start(int(pid_text)) == start


def _process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot, or "" if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # Field 22; the command name (field 2) may contain spaces, so split after its ")".
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else ""


def force_remove(client: docker.DockerClient, container_id: str) -> str | None:
    """Remove a container (killing it if needed); None on success or if already gone."""
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        return None
    except docker.errors.APIError as exc:
        if exc.status_code == 409 and "in progress" in str(exc):
            return None  # another caller is removing it right now
        return one_line(exc)
    except docker.errors.DockerException as exc:
        return one_line(exc)
    return None


def one_line(value: object) -> str:
    return " ".join(str(value).split())[:300]
