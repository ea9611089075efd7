"""The instructor console in real headless Chromium (Playwright, Debian's chromium) against the
app served over HTTP: roster and filters, a decision with its audit row and certificate, the
public verification page, submission detail, regrade and audit — with screenshots."""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from flask import Flask
from playwright.sync_api import Browser, Page, expect
from werkzeug.serving import make_server

from grader.audit.canaries import CANARIES
from tests.instructor.conftest import fixed_cases, rewrite_cases
from tests.server.conftest import Account

#: Where screenshots are copied for a human to look at (GRADER_SCREENSHOTS overrides).
SCREENSHOTS = Path(os.environ.get("GRADER_SCREENSHOTS", "/tmp/grader-instructor-screenshots"))


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    yield tab
    context.close()


@pytest.fixture
def base_url(app: Flask) -> Iterator[str]:
    """The test's app served by a threaded HTTP server on a free port."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=10)


def log_in(page: Page, base: str, account: Account, next_path: str = "/instructor/") -> None:
    page.goto(f"{base}{next_path}")
    expect(page).to_have_url(re.compile(r"/login\?next="))
    page.fill("#token", account.token)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{base}{next_path}")


def screenshot(page: Page, tmp_path: Path, name: str, request: pytest.FixtureRequest) -> Path:
    """A full-page PNG in tmp_path, copied to SCREENSHOTS (named after the database)."""
    path = tmp_path / f"{name}.png"
    data = page.screenshot(path=str(path), full_page=True)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    backend = request.node.callspec.params.get("database_url", "db")
    shutil.copyfile(path, SCREENSHOTS / f"{name}-{backend}.png")
    return path


def test_roster_decision_certificate_and_detail_in_chromium(
    page: Page,
    browser: Browser,
    base_url: str,
    instructor: Account,
    class_of: Callable[[], dict[str, Account]],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Roster with filters → alice's page → award with a reason → trail row and certificate →
    the public URL (no login) shows valid → revoke → it shows revoked; the submission detail
    lists every case with gates and slices. Screenshots of the roster and the detail."""
    class_of()
    log_in(page, base_url, instructor)
    rows = page.locator("#roster tbody tr")
    expect(rows).to_have_count(5)
    expect(page.locator('tr[data-student="carol"] .decision').first).to_have_text("Blocked")
    screenshot(page, tmp_path, "roster", request)

    page.click('a[data-filter="blocked"]')
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-student", "carol")
    page.click('a[data-filter="awarded"]')
    expect(page.locator("#roster tbody tr[data-student]")).to_have_count(2)
    page.click('a[data-filter="all"]')

    page.click('tr[data-student="alice"] >> text=alice')
    expect(page.locator("h1")).to_contain_text("alice")
    page.select_option("#action", "award")
    page.fill("#reason", "late medical certificate accepted")
    page.click("#decision-form button[type=submit]")
    expect(page.locator(".flash-ok")).to_contain_text("Recorded: award → Awarded.")
    trail = page.locator("#trail tbody tr")
    expect(trail).to_have_count(1)
    expect(trail.first).to_contain_text("late medical certificate accepted")
    expect(trail.first).to_contain_text("professor")
    expect(page.locator("#current-decision")).to_contain_text("Awarded")
    url = page.locator("#certificates a").first.get_attribute("href")
    assert url is not None and "/certificates/" in url

    public = browser.new_context().new_page()  # no cookies: anyone with the link
    public.goto(url)
    expect(public.locator("#cert-status")).to_have_text("valid")
    expect(public.locator("#cert-name")).to_have_text("alice")
    text = public.locator("#certificate").inner_text()
    assert "Case-set version" in text and "Course" in text
    assert "medical" not in text and "professor" not in text and "4/6" not in text

    page.select_option("#action", "revoke")
    page.fill("#reason", "certificate issued in error")
    page.click("#decision-form button[type=submit]")
    expect(trail).to_have_count(2)
    screenshot(page, tmp_path, "student", request)
    public.reload()
    expect(public.locator("#cert-status")).to_have_text("revoked")
    public.context.close()

    page.locator("#submissions a", has_text="detail").first.click()
    expect(page.locator("#cases tbody tr")).to_have_count(6)
    a1 = page.locator('tr[data-case="a1"]')
    expect(a1).to_contain_text("Why do chunks overlap?")
    expect(a1).to_contain_text("topic:chunking")
    expect(a1.locator(".tag-safety", has_text="claim_support")).to_have_count(1)
    expect(page.locator("#slice-summary")).to_contain_text("topic:metrics")
    expect(page.locator("#gate-summary")).to_contain_text("citation_recall")
    page.locator('tr[data-case="a1"] details summary').click()
    expect(page.locator('tr[data-case="a1"] pre')).to_contain_text("doc-a")
    screenshot(page, tmp_path, "submission-detail", request)


def test_regrade_preview_apply_and_audit_in_chromium(
    page: Page,
    base_url: str,
    instructor: Account,
    cases_dir: Path,
    class_of: Callable[[], dict[str, Account]],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """After a label fix the regrade page counts 5 outdated results; the preview and the run
    page show exactly one changed decision; the audit page leads with its verdict."""
    class_of()
    rewrite_cases(cases_dir, fixed_cases())
    log_in(page, base_url, instructor, "/instructor/regrade")
    expect(page.locator("#outdated-count")).to_have_text("5")
    page.click("#preview-button")
    expect(page.locator('#changes tr[data-changed="yes"]')).to_have_count(1)
    expect(page.locator('#changes tr[data-changed="yes"]')).to_contain_text("alice")
    page.click("button:has-text('Regrade now')")
    expect(page.locator("#changed-count")).to_have_text("1")
    expect(page.locator("#changes tbody tr")).to_have_count(5)
    screenshot(page, tmp_path, "regrade-run", request)
    page.goto(f"{base_url}/instructor/?filter=outdated")
    expect(page.locator("#roster tbody tr[data-student]")).to_have_count(0)
    page.goto(f"{base_url}/instructor/audit")
    expect(page.locator("#verdict")).to_contain_text(re.compile("AUDIT (PASSED|FAILED)"))
    expect(page.locator("#canaries tbody tr")).to_have_count(len(CANARIES))
    screenshot(page, tmp_path, "audit", request)


def test_students_and_anonymous_visitors_are_kept_out_in_chromium(
    page: Page, base_url: str, student: Account
) -> None:
    """An anonymous visitor lands on the login form; a logged-in student gets 403."""
    page.goto(f"{base_url}/instructor/students/alice")
    expect(page).to_have_url(re.compile(r"/login\?next="))
    page.fill("#token", student.token)
    page.click("button[type=submit]")
    response = page.goto(f"{base_url}/instructor/")
    assert response is not None and response.status == 403
    expect(page.locator("body")).to_contain_text("Instructors only")
