"""The student pages in real headless Chromium (Playwright) against `grader serve` (gunicorn)
and a `grader worker` process: log in, upload, watch the status change, read the feedback."""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from grader.settings import Settings
from tests.server.conftest import Account, Proc, honest_agent, make_zip


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    yield tab
    context.close()


def png_facts(data: bytes) -> tuple[int, int, int]:
    """Width, height and the number of distinct scanline payloads of a PNG (stdlib only)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    idat = b""
    offset = 8
    while offset < len(data):
        length = struct.unpack(">I", data[offset : offset + 4])[0]
        kind = data[offset + 4 : offset + 8]
        if kind == b"IDAT":
            idat += data[offset + 8 : offset + 8 + length]
        offset += 12 + length
    raw = zlib.decompress(idat)
    stride = len(raw) // height
    rows = {raw[i * stride + 1 : (i + 1) * stride] for i in range(height)}
    return width, height, len(rows)


def test_student_logs_in_uploads_and_reads_feedback_in_chromium(
    page: Page,
    student: Account,
    settings: Settings,
    live_server: Callable[..., str],
    processes: Callable[..., Proc],
    tmp_path: Path,
) -> None:
    """Login form → upload → live status reaches graded without a manual reload → feedback
    page with decision and per-gate counts; a screenshot of it is saved and non-trivial."""
    base = live_server()
    page.goto(f"{base}/submissions")
    expect(page).to_have_url(re.compile(r"/login\?next=(/|%2F)submissions$"))
    page.fill("#token", "grd_wrong")
    page.click("button[type=submit]")
    expect(page.locator(".flash-error")).to_contain_text("not valid")
    page.fill("#token", student.token)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{base}/submissions")
    expect(page.locator("h1")).to_contain_text("Submit an agent")

    archive = tmp_path / "my-agent.zip"
    archive.write_bytes(make_zip(honest_agent(delay=0.3, name="my-agent")))
    page.set_input_files("#package", str(archive))
    page.click("form.upload button[type=submit]")
    expect(page.locator(".flash-ok")).to_contain_text("queued for grading")
    expect(page.locator("#status")).to_have_text("queued")

    # No worker yet: the list shows it queued; start one and watch the status change live.
    page.goto(f"{base}/submissions")
    status = page.locator('[data-field="status"]').first
    expect(status).to_have_text("queued")
    processes("worker", ["worker", "--name", "browser-worker"], settings)
    expect(status).to_have_text("graded", timeout=45_000)
    expect(page.locator('[data-field="result"]').first).to_have_text("Awarded")

    page.click("tbody a")
    expect(page.locator("#status")).to_have_text("graded")
    expect(page.locator("#decision")).to_have_text("Awarded")
    expect(page.locator(".overall")).to_contain_text("3 / 3")
    expect(page.locator("table.gates")).to_have_count(2)
    expect(page.locator("table.gates").first).to_contain_text("citation_recall")

    shot = tmp_path / "feedback.png"
    page.screenshot(path=str(shot), full_page=True)
    data = shot.read_bytes()
    width, height, distinct_rows = png_facts(data)
    assert width == 1100 and height >= 600
    assert len(data) > 20_000 and distinct_rows > 50


def test_feedback_page_updates_itself_when_grading_ends(
    page: Page,
    student: Account,
    settings: Settings,
    live_server: Callable[..., str],
    processes: Callable[..., Proc],
    tmp_path: Path,
) -> None:
    """An open feedback page polls the API and re-renders with results once graded."""
    base = live_server()
    page.goto(f"{base}/login")
    page.fill("#token", student.token)
    page.click("button[type=submit]")
    archive = tmp_path / "agent.zip"
    archive.write_bytes(make_zip(honest_agent(delay=0.5)))
    page.set_input_files("#package", str(archive))
    page.click("form.upload button[type=submit]")
    expect(page.locator("#status")).to_have_text("queued")
    processes("worker", ["worker", "--name", "page-worker"], settings)
    expect(page.locator("#decision")).to_have_text("Awarded", timeout=45_000)
    expect(page.locator("#status")).to_have_text("graded")
