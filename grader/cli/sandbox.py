"""``grader sandbox …``: build the Docker sandbox image and diagnose the sandboxes.

Added to the main CLI as ``grader sandbox``; ``scripts/build-base-image.sh`` runs
``python -m grader sandbox build``.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict

import click
import docker.errors

from grader.exceptions import GraderError
from grader.sandbox.doctor import DoctorCheck, doctor
from grader.sandbox.images import SANDBOX_IMAGE, build_sandbox_image, docker_client

from .helpers import EXIT_CHECK_FAILED, EXIT_SANDBOX, fail


@click.group()
def sandbox() -> None:
    """Build and check the grading sandboxes (Docker image, bubblewrap)."""


@sandbox.command()
@click.option(
    "--base",
    "base_image",
    metavar="IMAGE",
    default=None,
    help="Base image with Python 3.11 (e.g. python:3.11-slim). "
    "Default: an offline Debian base made with debootstrap, cached by recipe.",
)
@click.option("--force", is_flag=True, help="Rebuild even if an identical image exists.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the image id.")
def build(base_image: str | None, force: bool, quiet: bool) -> None:
    """Build the sandbox image grader-sandbox:latest and print its id."""

    def log(message: str) -> None:
        if not quiet:
            click.echo(f"  {message}", err=True)

    started = time.monotonic()
    try:
        client = docker_client(timeout=120)
        image_id = build_sandbox_image(client, base_image=base_image, force=force, log=log)
    except docker.errors.DockerException as exc:
        fail(f"Docker engine not reachable ({exc}); run scripts/docker-engine.sh", EXIT_SANDBOX)
    except GraderError as exc:
        fail(str(exc), EXIT_SANDBOX)
    elapsed = time.monotonic() - started
    if quiet:
        click.echo(image_id)
    else:
        click.echo(f"{SANDBOX_IMAGE} {image_id} (ready in {elapsed:.1f} s)")


@sandbox.command(name="doctor")
@click.option("--image", default=SANDBOX_IMAGE, show_default=True, help="Sandbox image to check.")
@click.option("--no-smoke", is_flag=True, help="Skip the hardened smoke run (a container).")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as one JSON object.")
def doctor_command(image: str, no_smoke: bool, as_json: bool) -> None:
    """Check the Docker engine, the sandbox image and bubblewrap.

    Exit status 1 when the Docker sandbox cannot be used (a required check failed).
    """
    checks = doctor(image, smoke=not no_smoke)
    usable = all(check.ok for check in checks if check.required)
    if as_json:
        click.echo(json.dumps({"docker_usable": usable, "checks": [asdict(c) for c in checks]}))
    else:
        _print_table(checks)
        click.echo(
            "docker sandbox: usable" if usable else "docker sandbox: NOT usable (see fixes above)"
        )
    if not usable:
        sys.exit(EXIT_CHECK_FAILED)


def _print_table(checks: list[DoctorCheck]) -> None:
    # rich is imported here: only this command needs it.
    from rich.console import Console
    from rich.table import Table

    table = Table("check", "status", "detail", "fix")
    for check in checks:
        if check.ok:
            status = "[green]ok[/]"
        else:
            # A failed optional check (bubblewrap, freshness) is only a warning for Docker.
            status = "[red]FAIL[/]" if check.required else "[yellow]warn[/]"
        table.add_row(check.name, status, check.detail, check.fix)
    Console().print(table)
