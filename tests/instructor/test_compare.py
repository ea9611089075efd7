"""Comparing stored result sets (DESIGN §7): the instructor API and pages, what a regrade moved,
and a student's counts-only comparison of their own submissions — on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from grader.db.tables import Role
from tests.instructor.conftest import (
    ALICE,
    DAVE,
    INSTRUCTOR_CASES,
    Seeder,
    answer,
    fixed_cases,
    login,
    rewrite_cases,
    variant,
)
from tests.server.conftest import Account

#: Misses a1 and a2 and answers the safety-tagged refusal r1: worse than ALICE on a2 and r1.
WORSE = variant(
    a1=answer("Chunks are pieces of text.", "doc-a"),
    a2=answer("No idea really.", "doc-a"),
    r1=answer("Take two pills.", "doc-a"),
)


def hidden_in(text: str) -> list[str]:
    """Case ids (as whole tokens: hex ids and hashes may contain "a4"), questions, slices,
    citations and hidden answers found in ``text``."""
    found = [
        case["id"]
        for case in INSTRUCTOR_CASES
        if re.search(rf"(?<![0-9A-Za-z]){case['id']}(?![0-9A-Za-z])", text)
    ]
    fragments = [case["question"] for case in INSTRUCTOR_CASES]
    fragments += ["topic:", "safety:medical", "Take two pills", "doc-a", "doc-b", "doc-c"]
    return found + [fragment for fragment in fragments if fragment in text]


def get_compare(client: FlaskClient, account: Account, **query: Any) -> Any:
    return client.get("/api/instructor/compare", headers=account.headers, query_string=query)


def test_instructor_compares_two_submissions_with_flips_guardrails_and_slices(
    client: FlaskClient, instructor: Account, make_user: Callable[..., Account], seed: Seeder
) -> None:
    """ALICE (misses a1) vs DAVE (right everywhere but the mislabelled a3): one candidate-only
    case, p = 1, no detectable difference; a1 is the one flip, with its question and both
    answers; its slice shows the gain; every guardrail of the issue is there."""
    alice = seed.graded(make_user(Role.STUDENT, "alice"), ALICE, agent="alice-agent")
    dave = seed.graded(make_user(Role.STUDENT, "dave"), DAVE, agent="dave-agent")
    response = get_compare(client, instructor, baseline=alice, candidate=dave)
    assert response.status_code == 200, response.get_json()
    data = response.get_json()
    assert data["case_set_version"] == seed.case_set().version
    assert data["primary"]["metric"] == "answerable_pass_rate"
    assert (data["primary"]["baseline"], data["primary"]["candidate"]) == (0.5, 0.75)
    assert data["mcnemar"] == {"baseline_only": 0, "candidate_only": 1, "p_value": 1.0}
    assert data["verdict"] == "no_detectable_difference"
    low, high = data["primary"]["ci95"]
    assert low <= 0.25 <= high
    [flip] = data["flipped"]
    assert (flip["case_id"], flip["from"], flip["to"]) == ("a1", "failed", "passed")
    assert flip["question"] == "Why do chunks overlap?"
    assert flip["baseline_answer"]["answer"] == "Chunks are pieces of text."
    assert flip["candidate_answer"]["answer"] == "Chunks overlap so no sentence is cut."
    assert "claim_support" in flip["baseline_failed_gates"]
    assert data["slices"]["topic:chunking"]["candidate_only"] == 1
    assert data["slices"]["topic:agents"]["candidate_only"] == 0
    guards = data["guardrails"]
    assert {"refusal_pass_rate", "safety_failures", "errors", "latency_p95_seconds"} <= set(guards)
    assert not any(guard["regressed"] for guard in guards.values())
    assert (data["baseline"]["student"], data["candidate"]["agent_name"]) == ("alice", "dave-agent")
    assert "a1" in hidden_in(json.dumps(data))  # the student test's leak search can find ids

    # Reversed, the guardrail on the claim_support gate regresses.
    reverse = get_compare(client, instructor, baseline=dave, candidate=alice).get_json()
    assert reverse["guardrails"]["gate:answerable:claim_support"]["regressed"] is True
    assert reverse["mcnemar"]["baseline_only"] == 1


def test_safety_regression_is_flagged_and_bad_requests_are_one_line(
    client: FlaskClient,
    instructor: Account,
    student: Account,
    make_user: Callable[..., Account],
    seed: Seeder,
) -> None:
    """A candidate that answers the safety-tagged refusal regresses the safety guardrail;
    unknown ids are 404, a missing parameter or metric is 400, a student gets 403."""
    base = seed.graded(student, ALICE)
    cand = seed.graded(student, WORSE)
    data = get_compare(client, instructor, baseline=base, candidate=cand).get_json()
    assert data["guardrails"]["safety_failures"] == {
        **data["guardrails"]["safety_failures"],
        "baseline": 0,
        "candidate": 1,
        "regressed": True,
    }
    assert "safety_failures" in data["regressed"]
    by_primary = get_compare(client, instructor, baseline=base, candidate=cand, primary="pass_rate")
    assert by_primary.get_json()["primary"]["metric"] == "pass_rate"

    missing = get_compare(client, instructor, baseline=base, candidate="nope")
    assert missing.status_code == 404 and "no such submission" in missing.get_json()["error"]
    assert get_compare(client, instructor, baseline=base).status_code == 400
    bad_metric = get_compare(client, instructor, baseline=base, candidate=cand, primary="x")
    assert (
        bad_metric.status_code == 400 and "answerable_pass_rate" in bad_metric.get_json()["error"]
    )
    bad_version = get_compare(client, instructor, baseline=base, candidate=cand, baseline_version=9)
    assert bad_version.status_code == 404
    assert get_compare(client, student, baseline=base, candidate=cand).status_code == 403


def test_regrade_compares_current_results_and_refuses_across_versions(
    client: FlaskClient,
    instructor: Account,
    cases_dir: Path,
    make_user: Callable[..., Account],
    seed: Seeder,
) -> None:
    """After fixing a3's label and regrading, the current result sets are compared (a3 now
    passes on both sides); v1 against a current v2 is refused with one line; the case-set
    comparison shows alice's changed decision, who regraded, and that the citation gates moved."""
    alice = seed.graded(make_user(Role.STUDENT, "alice"), ALICE)
    dave = seed.graded(make_user(Role.STUDENT, "dave"), DAVE)
    rewrite_cases(cases_dir, fixed_cases())
    started = client.post(
        "/api/instructor/regrades", headers=instructor.headers, json={"mode": "answers"}
    )
    assert started.status_code == 201, started.get_json()
    run_id = started.get_json()["run_id"]

    now = get_compare(client, instructor, baseline=alice, candidate=dave).get_json()
    assert (now["primary"]["baseline"], now["primary"]["candidate"]) == (0.75, 1.0)
    assert now["case_set_version"] == seed.case_set().version
    assert (now["baseline"]["grading_version"], now["baseline"]["current"]) == (2, True)

    across = get_compare(client, instructor, baseline=alice, candidate=dave, baseline_version=1)
    assert across.status_code == 400
    assert "different case-set versions" in across.get_json()["error"]
    assert "\n" not in across.get_json()["error"]
    old = get_compare(
        client, instructor, baseline=alice, candidate=dave, baseline_version=1, candidate_version=1
    ).get_json()
    assert old["case_set_version"] != now["case_set_version"]
    assert old["slices"] == {}  # the loaded set is another version: no labels to slice by

    moved = client.get(f"/api/instructor/compare/regrades/{run_id}", headers=instructor.headers)
    body = moved.get_json()
    assert body["by"] == "professor"
    assert body["decisions_changed"] == 1
    changed = [d for d in body["decisions"] if d["decision_changed"]]
    assert [(d["student"], d["old_decision"], d["new_decision"]) for d in changed] == [
        ("alice", "not_awarded", "awarded")
    ]
    recall = body["gates"]["answerable"]["citation_recall"]
    assert (recall["to_passed"], recall["to_failed"]) == (2, 0)
    # doc-c was not allowed before either: precision moved with recall, nothing else did.
    assert body["gates_moved"] == ["answerable:citation_precision", "answerable:citation_recall"]
    missing = client.get("/api/instructor/compare/regrades/999", headers=instructor.headers)
    assert missing.status_code == 404


def test_compare_pages_show_verdict_guardrails_flips_and_the_chart(
    app: Flask,
    instructor: Account,
    make_user: Callable[..., Account],
    cases_dir: Path,
    seed: Seeder,
) -> None:
    """The submission detail links to the comparison; its page shows the verdict, the effect
    and CI, regressed guardrails in red, slices, flipped cases with both answers and the SVG;
    the regrade page links to what moved."""
    base = seed.graded(make_user(Role.STUDENT, "alice"), ALICE)
    cand = seed.graded(make_user(Role.STUDENT, "erin"), WORSE)
    browser = app.test_client()
    login(browser, instructor)
    detail = browser.get(f"/instructor/submissions/{base}").get_data(as_text=True)
    assert 'id="compare-with"' in detail and "/instructor/compare" in detail
    blank = browser.get("/instructor/compare")
    assert blank.status_code == 200 and "compare-error" not in blank.get_data(as_text=True)

    page = browser.get(f"/instructor/compare?baseline={base}&candidate={cand}&baseline_version=1")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "No detectable difference at this sample size" in html
    assert re.search(r"difference <strong>-25\.0 pp</strong>\s+\(95% CI", html)
    assert re.search(r'<tr class="regressed" data-guardrail="safety_failures">', html)
    assert 'data-case="a2"' in html and "No idea really." in html  # both answers side by side
    assert "When does an agent loop stop?" in html
    assert "<svg" in html and 'class="bar bar-candidate"' in html
    assert "topic:agents" in html

    refused = browser.get(f"/instructor/compare?baseline={base}&candidate=nope")
    assert refused.status_code == 404 and "Cannot compare" in refused.get_data(as_text=True)

    rewrite_cases(cases_dir, fixed_cases())
    run = browser.post(
        "/api/instructor/regrades", headers=instructor.headers, json={"mode": "answers"}
    ).get_json()
    run_page = browser.get(f"/instructor/regrades/{run['run_id']}").get_data(as_text=True)
    assert 'id="regrade-compare-link"' in run_page
    moved = browser.get(f"/instructor/compare/regrades/{run['run_id']}").get_data(as_text=True)
    assert "citation_recall" in moved and "<svg" in moved and "professor" in moved


def test_student_compares_own_submissions_with_counts_only(
    app: Flask,
    client: FlaskClient,
    make_user: Callable[..., Account],
    seed: Seeder,
) -> None:
    """A student's comparison of two of their own graded submissions has counts by kind and
    gate, p and CI, and no case id, question, slice, answer or flip; another student's
    submission is 404; the submissions page offers "compare with …" and the page has the chart."""
    alice = make_user(Role.STUDENT, "alice")
    bob = make_user(Role.STUDENT, "bob")
    first = seed.graded(alice, WORSE)
    second = seed.graded(alice, DAVE)
    others = seed.graded(bob, DAVE)
    response = client.get(
        "/api/compare", headers=alice.headers, query_string={"baseline": first, "candidate": second}
    )
    assert response.status_code == 200, response.get_json()
    view = response.get_json()
    answerable = view["by_kind"]["answerable"]
    assert (answerable["baseline_passed"], answerable["candidate_passed"]) == (1, 3)
    assert answerable["gates"]["claim_support"]["difference"] == 2
    assert view["by_kind"]["refusal"]["difference"] == 1
    assert view["safety_failures"] == {"baseline": 1, "candidate": 0, "difference": -1}
    assert view["primary"]["p_value"] == 0.5  # 0 vs 2 discordant: 2 · (1/2)^2
    assert len(view["primary"]["ci95"]) == 2
    assert hidden_in(json.dumps(view)) == []
    assert {"flipped", "slices", "guardrails", "cases"}.isdisjoint(view)

    assert (
        client.get(
            "/api/compare",
            headers=alice.headers,
            query_string={"baseline": first, "candidate": others},
        ).status_code
        == 404
    )
    assert client.get("/api/compare", headers=alice.headers).status_code == 400

    browser = app.test_client()
    login(browser, alice)
    listing = browser.get("/submissions").get_data(as_text=True)
    assert 'id="compare-with"' in listing
    page = browser.get(f"/compare?baseline={first}&candidate={second}")
    html = page.get_data(as_text=True)
    assert page.status_code == 200
    assert "answerable cases passed 1 → 3 of 4" in html and "<svg" in html
    assert hidden_in(html) == []
    assert browser.get(f"/compare?baseline={first}&candidate={others}").status_code == 404


def test_student_comparison_is_refused_without_counts_feedback(
    client: FlaskClient, make_user: Callable[..., Account], cases_dir: Path, seed: Seeder
) -> None:
    """Under ``pass_fail`` feedback a student sees no counts, so no comparison either: 400 with
    one line."""
    alice = make_user(Role.STUDENT, "alice")
    first, second = seed.graded(alice, WORSE), seed.graded(alice, DAVE)
    (cases_dir / "policy.toml").write_text('feedback = "pass_fail"\n')
    response = client.get(
        "/api/compare", headers=alice.headers, query_string={"baseline": first, "candidate": second}
    )
    assert response.status_code == 400
    assert response.get_json() == {
        "error": "comparisons are not available with this course's feedback"
    }
