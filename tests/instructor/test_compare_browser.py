"""The comparison pages in real headless Chromium (Playwright, Debian's chromium): the instructor
goes from a submission's detail to its comparison, the student from their list to theirs; the
server-rendered SVG chart is drawn, and screenshots are kept."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from grader.db.tables import Role
from tests.instructor.conftest import ALICE, DAVE, Seeder
from tests.instructor.test_browser import base_url, log_in, page, screenshot  # noqa: F401
from tests.instructor.test_compare import WORSE
from tests.server.conftest import Account


def bar_widths(tab: Page, side: str) -> list[float]:
    """The drawn widths (CSS pixels) of one side's bars in the gate chart."""
    bars = tab.locator(f"#gate-chart rect.bar-{side}")
    return [bars.nth(i).bounding_box()["width"] for i in range(bars.count())]  # type: ignore[index]


def test_instructor_comparison_page_in_chromium(
    page: Page,  # noqa: F811
    base_url: str,  # noqa: F811
    instructor: Account,
    make_user: Callable[..., Account],
    seed: Seeder,
    tmp_path: object,
    request: pytest.FixtureRequest,
) -> None:
    """From alice's submission detail, compare with erin's weaker agent: the verdict and effect
    are shown, the safety guardrail row is red, flipped cases show both answers, and the chart
    draws shorter candidate bars where erin fails more. Screenshot kept."""
    alice = seed.graded(make_user(Role.STUDENT, "alice"), ALICE)
    erin = seed.graded(make_user(Role.STUDENT, "erin"), WORSE)
    log_in(page, base_url, instructor, f"/instructor/submissions/{alice}")
    page.fill('#compare-with input[name="candidate"]', erin)
    page.click("#compare-with button[type=submit]")
    expect(page).to_have_url(re.compile(r"/instructor/compare\?"))
    expect(page.locator("#verdict")).to_contain_text("No detectable difference at this sample size")
    expect(page.locator("#effect")).to_contain_text("-25.0 pp")
    safety = page.locator('#guardrails tr[data-guardrail="safety_failures"]')
    expect(safety).to_contain_text("regressed")
    colour = safety.locator("td").first.evaluate("cell => getComputedStyle(cell).backgroundColor")
    assert colour not in ("rgba(0, 0, 0, 0)", "rgb(255, 255, 255)")
    expect(page.locator('#flipped tr[data-case="a2"]')).to_contain_text("No idea really.")
    expect(page.locator('#flipped tr[data-case="r1"]')).to_contain_text("Take two pills.")
    chart = page.locator("#gate-chart")
    expect(chart).to_be_visible()
    base, cand = bar_widths(page, "baseline"), bar_widths(page, "candidate")
    assert len(base) == len(cand) == 13  # 7 answerable gates + 6 refusal gates
    assert all(width >= 0 for width in base + cand) and max(base) > 100
    assert sum(cand) < sum(base)
    assert page.locator("#gate-chart .whisker").count() == 26
    screenshot(page, tmp_path, "compare-instructor", request)  # type: ignore[arg-type]


def test_student_comparison_page_in_chromium(
    page: Page,  # noqa: F811
    base_url: str,  # noqa: F811
    make_user: Callable[..., Account],
    seed: Seeder,
    tmp_path: object,
    request: pytest.FixtureRequest,
) -> None:
    """A student picks two of their graded submissions on their list and sees counts and the
    chart, with no case id or question on the page. Screenshot kept."""
    student = make_user(Role.STUDENT, "sam")
    seed.graded(student, WORSE)
    seed.graded(student, DAVE)
    log_in(page, base_url, student, "/submissions")
    page.click("#compare-with button[type=submit]")
    expect(page).to_have_url(re.compile(r"/compare\?baseline="))
    expect(page.locator("#verdict")).to_contain_text("answerable cases passed 1 → 3 of 4")
    expect(page.locator("#compare-counts")).to_contain_text("claim_support")
    expect(page.locator("#gate-chart")).to_be_visible()
    assert sum(bar_widths(page, "candidate")) > sum(bar_widths(page, "baseline"))
    text = page.locator("main").inner_text()
    assert "chunks overlap" not in text.lower() and "Take two pills" not in text
    screenshot(page, tmp_path, "compare-student", request)  # type: ignore[arg-type]
