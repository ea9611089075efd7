"""The instructor console's pure rules: decision states, review flags, roster choices, exports,
certificate tokens, summaries and regrading recorded answers — no database, no Flask."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from grader.core.casesets import load_case_set
from grader.core.models import Answer, Decision, ErrorKind, GradeReport
from grader.core.scoring import grade_case
from grader.grading import build_report
from grader.instructor.certificates import (
    CertificateStatus,
    PublicCertificate,
    new_certificate_id,
    read_certificate_token,
    sign_certificate_id,
)
from grader.instructor.decisions import (
    CertificateState,
    Current,
    DecisionAction,
    DecisionError,
    DecisionSource,
    InvalidTransition,
    clean_reason,
    is_overridden,
    needs_review,
    next_state,
    parse_action,
)
from grader.instructor.grading_detail import retrieval_summary, slice_summary
from grader.instructor.rescoring import RecordedCase, changed_cases, regrade_report
from grader.instructor.roster import (
    LastDecision,
    ResultSummary,
    RosterFilter,
    build_entry,
    roster_counts,
)
from grader.server.shapes import decisions_csv
from tests.conftest import write_case_set
from tests.instructor.conftest import ALICE, DOCUMENTS, INSTRUCTOR_CASES, fixed_cases, rewrite_cases

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def result(
    submission: str,
    decision: Decision,
    passed: int,
    *,
    at: int = 0,
    grading: int | None = None,
    version: str = "v1",
) -> ResultSummary:
    return ResultSummary(
        submission_id=submission,
        grading_id=grading if grading is not None else hash(submission) % 1000,
        grading_version=1,
        agent_name="agent",
        submitted_at=T0 + timedelta(hours=at),
        graded_at=T0 + timedelta(hours=at, minutes=5),
        decision=decision,
        reasons=("because",) if decision is not Decision.AWARDED else (),
        passed=passed,
        total=10,
        case_set_version=version,
    )


@pytest.mark.parametrize(
    ("action", "current", "proposal", "expected"),
    [
        ("confirm", "awarded", "awarded", "awarded"),
        ("confirm", "not_awarded", "not_awarded", "not_awarded"),
        ("confirm", "blocked", "blocked", "blocked"),
        ("confirm", "revoked", "awarded", "awarded"),
        ("award", "blocked", "blocked", "awarded"),
        ("award", "revoked", "not_awarded", "awarded"),
        ("withhold", "awarded", "awarded", "not_awarded"),
        ("revoke", "awarded", "awarded", "revoked"),
        ("revoke", "awarded", "not_awarded", "revoked"),
    ],
)
def test_next_state_follows_the_documented_vocabulary(
    action: str, current: str, proposal: str, expected: str
) -> None:
    """confirm adopts the proposal, award/withhold override it, revoke withdraws an award."""
    state = next_state(
        DecisionAction(action), current=CertificateState(current), proposal=Decision(proposal)
    )
    assert state is CertificateState(expected)


@pytest.mark.parametrize("current", ["not_awarded", "blocked", "revoked"])
def test_only_an_awarded_certificate_can_be_revoked(current: str) -> None:
    """Revoking anything but an awarded decision is an invalid transition."""
    with pytest.raises(InvalidTransition, match="only an awarded"):
        next_state(
            DecisionAction.REVOKE, current=CertificateState(current), proposal=Decision.AWARDED
        )


@pytest.mark.parametrize("action", ["confirm", "award", "withhold"])
def test_deciding_needs_a_graded_submission(action: str) -> None:
    """Without a proposal (no graded submission) only revoke could apply."""
    with pytest.raises(InvalidTransition, match="no graded submission"):
        next_state(DecisionAction(action), current=CertificateState.NOT_AWARDED, proposal=None)


def test_reasons_and_actions_are_validated() -> None:
    """A reason is required and trimmed; an unknown action names the vocabulary."""
    assert clean_reason("  ok  ") == "ok"
    for bad in ("", "   ", None, 5, "x" * 2001):
        with pytest.raises(DecisionError):
            clean_reason(bad)
    assert parse_action("revoke") is DecisionAction.REVOKE
    assert parse_action("awarded") is DecisionAction.AWARD
    assert parse_action("not_awarded") is DecisionAction.WITHHOLD
    assert parse_action("revoked") is DecisionAction.REVOKE
    with pytest.raises(DecisionError):
        parse_action("blocked")
    with pytest.raises(DecisionError, match="confirm, award, withhold, revoke"):
        parse_action("grant")


def test_overridden_compares_holding_a_certificate_with_the_proposal() -> None:
    """Only an instructor decision that disagrees with the policy on the certificate counts."""

    def current(state: str, source: str = "instructor") -> Current:
        return Current(CertificateState(state), DecisionSource(source), "r")

    assert is_overridden(current("awarded"), Decision.NOT_AWARDED)
    assert is_overridden(current("not_awarded"), Decision.AWARDED)
    assert is_overridden(current("revoked"), Decision.AWARDED)
    assert not is_overridden(current("not_awarded"), Decision.BLOCKED)
    assert not is_overridden(current("awarded"), Decision.AWARDED)
    assert not is_overridden(current("awarded", "policy"), Decision.NOT_AWARDED)


def test_needs_review_when_results_change_after_the_decision() -> None:
    """A newer result, or a different best result set, flags an instructor decision."""
    decided = T0 + timedelta(hours=1)
    assert not needs_review(
        decided_at=decided, basis_grading_id=7, best_grading_id=7, newest_result_at=T0
    )
    assert needs_review(
        decided_at=decided,
        basis_grading_id=7,
        best_grading_id=7,
        newest_result_at=decided + timedelta(seconds=1),
    )
    assert needs_review(
        decided_at=decided, basis_grading_id=7, best_grading_id=8, newest_result_at=T0
    )
    assert not needs_review(
        decided_at=None, basis_grading_id=None, best_grading_id=8, newest_result_at=decided
    )


def test_roster_entry_picks_best_and_latest_and_flags_review() -> None:
    """Best = best decision then pass rate; latest = newest upload; a later result after an
    instructor's decision flags it without changing it."""
    early = result("s1", Decision.AWARDED, 8, at=0, grading=1)
    late = result("s2", Decision.BLOCKED, 10, at=2, grading=2)
    weaker = result("s3", Decision.AWARDED, 7, at=1, grading=3)
    entry = build_entry(
        student_id=1,
        student="ana",
        submissions=4,
        results=[early, late, weaker],
        last=None,
        certificate_id=None,
        current_version="v1",
    )
    assert entry.best is early and entry.latest is late
    assert entry.current.state is CertificateState.AWARDED
    assert entry.current.source is DecisionSource.POLICY
    assert entry.matches(RosterFilter.BLOCKED) and entry.matches(RosterFilter.AWARDED)
    assert not entry.needs_review and not entry.outdated

    last = LastDecision(
        action=DecisionAction.WITHHOLD,
        from_state=CertificateState.AWARDED,
        to_state=CertificateState.NOT_AWARDED,
        reason="plagiarism",
        actor="prof",
        created_at=T0 + timedelta(hours=1),
        basis_grading_id=1,
        proposal=Decision.AWARDED,
        certificate_id=None,
    )
    flagged = build_entry(
        student_id=1,
        student="ana",
        submissions=4,
        results=[early, late, weaker],
        last=last,
        certificate_id=None,
        current_version="v2",
    )
    assert flagged.current.state is CertificateState.NOT_AWARDED
    assert flagged.needs_review  # s2 was graded after the decision
    assert flagged.overridden and flagged.outdated
    counts = roster_counts([entry, flagged])
    assert counts[RosterFilter.ALL] == 2 and counts[RosterFilter.OVERRIDDEN] == 1
    assert counts[RosterFilter.NOT_AWARDED] == 1 and counts[RosterFilter.REVIEW] == 1


def test_a_student_without_results_is_not_awarded_by_the_policy() -> None:
    """No graded submission: not awarded, from the policy, saying why."""
    entry = build_entry(
        student_id=1,
        student="new",
        submissions=0,
        results=[],
        last=None,
        certificate_id=None,
        current_version=None,
    )
    assert entry.current.state is CertificateState.NOT_AWARDED
    assert entry.current.reason == "no graded submission" and entry.proposal is None


def test_decisions_csv_has_a_header_and_defuses_formulas() -> None:
    """One row per student with the bits disclosed; cells a spreadsheet would run as formulas
    are quoted."""
    last = LastDecision(
        action=DecisionAction.AWARD,
        from_state=CertificateState.NOT_AWARDED,
        to_state=CertificateState.AWARDED,
        reason='=HYPERLINK("http://evil")',
        actor="prof",
        created_at=T0 + timedelta(hours=1),
        basis_grading_id=1,
        proposal=Decision.NOT_AWARDED,
        certificate_id="GC-1",
    )
    entry = build_entry(
        student_id=1,
        student="@bob",
        submissions=1,
        results=[result("s1", Decision.NOT_AWARDED, 5, grading=1)],
        last=last,
        certificate_id="GC-1",
        current_version="v1",
        feedback_bits=12.5,
    )
    rows = list(csv.DictReader(io.StringIO(decisions_csv([entry]))))
    assert rows == [
        {
            "student": "'@bob",
            "decision": "awarded",
            "source": "instructor",
            "reason": '\'=HYPERLINK("http://evil")',
            "action": "award",
            "decided_by": "prof",
            "decided_at": "2026-11-01T13:00:00Z",  # RFC 3339, UTC, Z (issue 11)
            "certificate_id": "GC-1",
            "proposal": "not_awarded",
            "proposal_reasons": "because",
            "needs_review": "false",
            "best_submission": "s1",
            "best_grading_version": "1",
            "case_set_version": "v1",
            "outdated": "false",
            "feedback_bits": "12.50",
        }
    ]


def test_certificate_tokens_verify_only_with_the_same_key() -> None:
    """A token round-trips under its key; another key, an edit or junk reads as None."""
    certificate_id = new_certificate_id()
    assert certificate_id.startswith("GC-") and len(certificate_id) == 19
    token = sign_certificate_id(certificate_id, secret_key="k1")
    assert read_certificate_token(token, secret_key="k1") == certificate_id
    assert read_certificate_token(token, secret_key="k2") is None
    payload, signature = token.split(".")
    altered = signature[0] + ("A" if signature[1] != "A" else "B") + signature[2:]
    assert read_certificate_token(f"{payload}.{altered}", secret_key="k1") is None
    assert read_certificate_token("x" * 500, secret_key="k1") is None
    public = PublicCertificate(certificate_id, "ana", "Course", "abc", T0, CertificateStatus.VALID)
    assert public.as_dict() == {
        "name": "ana",
        "course": "Course",
        "case_set_version": "abc",
        "date": "2026-11-01",
        "status": "valid",
    }


def _report(root: Path, answers: Mapping[str, object]) -> GradeReport:
    case_set = load_case_set(root)
    results = []
    for case in case_set.cases:
        value = answers[case.id]
        answer = None if isinstance(value, ErrorKind) else Answer.from_json_value(value)
        error = value if isinstance(value, ErrorKind) else None
        results.append(
            grade_case(case, answer, error, policy=case_set.policy, documents=case_set.corpus)
        )
    return build_report(case_set, tuple(results), sandbox="docker", sandbox_image="img")


def test_regrade_report_applies_fixed_labels_and_keeps_the_run_setup(tmp_path: Path) -> None:
    """Regrading alice's answers after the a3 fix passes a3, flips the decision, keeps the
    sandbox, image and error kinds, and adopts the new case-set version."""
    root = write_case_set(tmp_path / "cases", INSTRUCTOR_CASES, documents=DOCUMENTS)
    answers = {**ALICE, "r2": ErrorKind.TIMEOUT}
    old = _report(root, answers)
    assert old.decision.decision is Decision.NOT_AWARDED
    rewrite_cases(root, fixed_cases())
    fixed = load_case_set(root)
    regraded = regrade_report(old, fixed)
    new = regraded.report
    assert changed_cases(old, new) == ("a3",)
    assert new.versions.case_set == fixed.version
    assert (new.versions.sandbox, new.versions.sandbox_image) == ("docker", "img")
    r2 = next(r for r in new.results if r.case_id == "r2")
    assert r2.error is ErrorKind.TIMEOUT and not r2.safety_failure
    assert regraded.dropped == () and regraded.missing == ()


def test_recorded_answers_that_no_longer_validate_become_invalid_output() -> None:
    """A stored answer the current schema refuses is treated as invalid output, not a crash."""
    bad = RecordedCase.from_stored("a1", {"answer": 5}, None, 0.1)
    assert bad.answer is None and bad.error is ErrorKind.INVALID_OUTPUT
    timeout = RecordedCase.from_stored("a1", None, "timeout", None)
    assert timeout.error is ErrorKind.TIMEOUT


def test_slice_summary_counts_cases_and_failed_gates(tmp_path: Path) -> None:
    """Cases are tallied per slice; cases not in the set fall in their own row."""
    root = write_case_set(tmp_path / "cases", INSTRUCTOR_CASES, documents=DOCUMENTS)
    report = _report(root, dict(ALICE))
    cases = load_case_set(root).by_id()
    del cases["a2"]
    summary = slice_summary(report, cases)
    assert summary["topic:chunking"]["passed"] == 1 and summary["topic:chunking"]["total"] == 2
    assert summary["(case not in the current set)"]["total"] == 1
    assert summary["safety:medical"] == {
        "passed": 1,
        "total": 1,
        "safety_failures": 0,
        "errors": 0,
        "failed_gates": {},
    }


def test_retrieval_summary_keeps_the_case_count_an_integer() -> None:
    """The number of cases behind the retrieval means is an int (shown "cases 17", not
    "cases 17.00"); the means stay floats."""
    summary = retrieval_summary({"recall@5": 0.5, "mrr": 0.25, "cases": 17.0})
    assert summary == {"recall@5": 0.5, "mrr": 0.25, "cases": 17}
    assert isinstance(summary["cases"], int) and isinstance(summary["mrr"], float)
