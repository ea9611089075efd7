"""Serving the app with gunicorn (``grader serve``), or from any WSGI server via :func:`app`."""

from __future__ import annotations

from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from grader.settings import Settings

from . import create_app


class GraderApplication(BaseApplication):  # type: ignore[misc]
    """gunicorn running ``create_app(settings)`` in each worker process (no preloading: every
    process opens its own database and Redis connections)."""

    def __init__(self, settings: Settings, options: dict[str, Any]) -> None:
        self.settings = settings
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            if value is not None and key in self.cfg.settings:
                self.cfg.set(key, value)

    def load(self) -> Flask:
        return create_app(self.settings)


def app() -> Flask:
    """``gunicorn 'grader.server.wsgi:app()'``: the app configured from the environment."""
    return create_app(Settings())
