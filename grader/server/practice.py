"""The public practice set at ``/practice``: a page, the manifest and downloads (no login).

A thin layer over :mod:`grader.practice.site`: the folder served is ``Settings.practice_dir``
(``GRADER_PRACTICE_DIR``), holding one published set or several (the newest is served). Publish
into it with ``grader practice publish --out DIR [--replace]``; nothing needs restarting.
"""

from __future__ import annotations

import io
from pathlib import Path

from flask import Blueprint, abort, jsonify, render_template, send_file
from flask.typing import ResponseReturnValue

from grader.practice.site import (
    ARCHIVE_FORMATS,
    PracticeRelease,
    PracticeUnavailable,
    cached_download,
    find_release,
    page_data,
)

from .state import state

bp = Blueprint("practice", __name__)

#: Used while ``Settings`` has no ``practice_dir`` field (GRADER_PRACTICE_DIR).
DEFAULT_PRACTICE_DIR = Path("var/practice")
#: Downloads and the manifest may be cached briefly; a new publication changes the ETag.
_CACHE_SECONDS = 300


def practice_dir() -> Path:
    """The configured folder of published practice sets."""
    return Path(getattr(state().settings, "practice_dir", DEFAULT_PRACTICE_DIR))


def _release_or_404() -> PracticeRelease:
    try:
        return find_release(practice_dir())
    except PracticeUnavailable:
        abort(404)


@bp.get("/practice")
def page() -> ResponseReturnValue:
    """The practice set's page: version, counts, every question and the download links."""
    try:
        release = find_release(practice_dir())
    except PracticeUnavailable as exc:
        return render_template("error.html", status=404, message=f"{exc}."), 404
    return render_template("practice.html", practice=page_data(release), formats=ARCHIVE_FORMATS)


@bp.get("/practice/manifest.json")
def manifest() -> ResponseReturnValue:
    """The published manifest (version, counts, file hashes, leak-check figures)."""
    response = jsonify(_release_or_404().manifest)
    response.cache_control.public = True
    response.cache_control.max_age = _CACHE_SECONDS
    return response


@bp.get("/practice/download/<path:archive_format>")
def download(archive_format: str) -> ResponseReturnValue:
    """The published set as ``practice-set-<version>.tar.gz`` or ``.zip``."""
    if archive_format not in ARCHIVE_FORMATS:
        abort(404)
    archive = cached_download(_release_or_404(), archive_format)
    response = send_file(
        io.BytesIO(archive.data),
        mimetype=archive.media_type,
        as_attachment=True,
        download_name=archive.filename,
        etag=archive.sha256,
        max_age=_CACHE_SECONDS,
        conditional=True,
    )
    response.cache_control.public = True
    return response
