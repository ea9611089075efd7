"""The canary audit of a case set, computed once per case-set version and kept for a while.

Running the canaries (DESIGN §9) takes a moment, and the roster asks for the verdict on every
view; the case-set version is a content hash, so a cached report can never be stale.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from grader.audit.report import AuditReport, run_audit
from grader.core.casesets import CaseSet


class AuditCache:
    """Audit reports by case-set version, the ``kept`` most recently computed ones."""

    def __init__(self, kept: int = 4) -> None:
        self.kept = kept
        self._lock = threading.Lock()
        self._reports: OrderedDict[str, AuditReport] = OrderedDict()

    def report(self, case_set: CaseSet) -> AuditReport:
        """The audit of ``case_set`` (run outside the lock: two first callers may both run it)."""
        with self._lock:
            cached = self._reports.get(case_set.version)
        if cached is not None:
            return cached
        report = run_audit(case_set)
        with self._lock:
            self._reports[case_set.version] = report
            while len(self._reports) > self.kept:
                self._reports.popitem(last=False)
        return report

    def failing(self, case_set: CaseSet | None) -> bool:
        """Whether ``case_set``'s audit fails: every proposal then needs review."""
        return case_set is not None and not self.report(case_set).ok
