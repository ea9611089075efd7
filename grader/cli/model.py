"""``grader model …``: the course model server (DESIGN §4a)."""

from __future__ import annotations

import click

from .helpers import fail, note


@click.group()
def model() -> None:
    """The course model: a small deterministic OpenAI-compatible server for demos and tests."""


@model.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8400, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--api-key",
    envvar="GRADER_COURSE_MODEL_KEY",
    default="",
    help="Require this bearer key (default: none; env GRADER_COURSE_MODEL_KEY).",
)
@click.option(
    "--delay-ms",
    default=0.0,
    type=click.FloatRange(0, 600_000),
    help="Answer every call this much later (to simulate a slow model).",
)
def serve(host: str, port: int, api_key: str, delay_ms: float) -> None:
    """Serve /v1/chat/completions, /v1/embeddings and /v1/models until interrupted.

    It answers extractively from the context in the prompt and embeds with hashed bags of
    words: deterministic, and no language model at all (README, "Model gateway").
    """
    from grader.gateway.course_model import CourseModelServer

    try:
        server = CourseModelServer(host, port, api_key=api_key, delay_s=delay_ms / 1000)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror}")
    note(f"grader: course model serving {server.url} (Ctrl-C stops it)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
