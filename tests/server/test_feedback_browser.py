"""The student's "feedback used" view in real headless Chromium against `grader serve` and a
`grader worker` process, on a case set with the ladder release (README, "Feedback and
disclosure"), with screenshots."""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from grader.settings import Settings
from tests.conftest import write_case_set
from tests.server.conftest import CASES, DOCUMENTS, Account, Proc, honest_agent, make_zip
from tests.server.test_pages_browser import png_facts

#: Where screenshots are copied for a human to look at (GRADER_SCREENSHOTS overrides).
SCREENSHOTS = Path(os.environ.get("GRADER_SCREENSHOTS", "/tmp/grader-feedback-screenshots"))

POLICY = """
case_timeout_seconds = 3
setup_timeout_seconds = 5
run_timeout_seconds = 10
memory_limit_mb = 256
pids_limit = 48
max_submissions_per_day = 10
feedback = "ladder"
feedback_budget_bits = 300
feedback_time_quantum_seconds = 0
"""


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    yield tab
    context.close()


def shoot(page: Page, tmp_path: Path, name: str, request: pytest.FixtureRequest) -> bytes:
    path = tmp_path / f"{name}.png"
    data = page.screenshot(path=str(path), full_page=True)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    backend = "postgresql" if "postgresql" in request.node.name else "sqlite"
    shutil.copyfile(path, SCREENSHOTS / f"{name}-{backend}.png")
    return data


def test_student_sees_feedback_used_and_a_withheld_result_in_chromium(
    page: Page,
    student: Account,
    make_settings: Callable[..., Settings],
    live_server: Callable[..., str],
    processes: Callable[..., Proc],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Two uploads of the same agent: the first result is shown in full, the second only as
    the decision with "no improvement over your best"; both pages and the list show the bits
    used against the 300-bit budget; screenshots of both are saved and non-trivial."""
    root = write_case_set(
        tmp_path / "cases", CASES, policy=textwrap.dedent(POLICY), documents=DOCUMENTS
    )
    settings = make_settings(cases_dir=root)
    base = live_server(settings)
    processes("worker", ["worker", "--name", "feedback-worker"], settings)
    page.goto(f"{base}/login")
    page.fill("#token", student.token)
    page.click("button[type=submit]")
    expect(page.locator("#feedback-used")).to_contain_text("0 bits")
    expect(page.locator("#feedback-budget")).to_have_text("300")

    for name in ("first", "second"):
        archive = tmp_path / f"{name}.zip"
        archive.write_bytes(make_zip(honest_agent(name=name, salt=name)))
        page.goto(f"{base}/submissions")
        page.set_input_files("#package", str(archive))
        page.click("form.upload button[type=submit]")
        expect(page.locator("#decision")).to_have_text("Awarded", timeout=45_000)

    # The second result: decision only, the reason, and the feedback used so far.
    expect(page.locator("#withheld")).to_contain_text("no improvement over your best")
    expect(page.locator("table.gates")).to_have_count(0)
    expect(page.locator(".overall")).to_have_count(0)
    bits = float(page.locator("#feedback-bits").inner_text())
    # Released: 1 + 42.02 + 4.00; withheld: 1 + 1.58 + 4.00 (16 whole seconds of timing).
    assert bits == pytest.approx(53.6, abs=0.6)
    expect(page.locator("#feedback-meter")).to_have_attribute("max", re.compile(r"^300(\.0)?$"))
    data = shoot(page, tmp_path, "feedback-withheld", request)
    width, height, distinct_rows = png_facts(data)
    assert width == 1100 and height >= 600 and distinct_rows > 50

    page.goto(f"{base}/submissions")
    expect(page.locator("#feedback-used")).to_contain_text(f"{bits:.0f}")
    page.locator("tbody a").last.click()  # the first upload: shown in full
    expect(page.locator(".overall")).to_contain_text("3 / 3")
    expect(page.locator("#withheld")).to_have_count(0)
    shoot(page, tmp_path, "feedback-released", request)
