"""One timestamp format (RFC 3339, UTC, ``Z``) across the student API, the instructor API and
the CSV / JSON-lines exports (issue 11), on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from typing import Any

from flask.testing import FlaskClient

from tests.instructor.conftest import ALICE, Seeder
from tests.server.conftest import Account

#: 2026-12-01T03:20:00Z: whole seconds, UTC, a literal Z.
RFC3339_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
#: Keys holding a point in time in any response or export.
TIME_KEYS = {
    "created_at",
    "finished_at",
    "submitted_at",
    "graded_at",
    "decided_at",
    "issued_at",
    "revoked_at",
    "at",
}


def stamps(value: Any) -> Iterator[str]:
    """Every non-null value under a time key, anywhere in a JSON document."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in TIME_KEYS and item is not None:
                yield item
            else:
                yield from stamps(item)
    elif isinstance(value, list):
        for item in value:
            yield from stamps(item)


def test_every_response_and_export_writes_timestamps_one_way(
    client: FlaskClient, instructor: Account, student: Account, seed: Seeder
) -> None:
    """Student API, instructor API, the decisions CSV and the eval-record JSONL all write
    RFC 3339 UTC timestamps ending in Z, never ``+00:00`` or microseconds."""
    submission = seed.graded(student, ALICE)
    decided = client.post(
        "/api/instructor/certificates",
        headers=instructor.headers,
        json={"student": "alice", "decision": "award", "reason": "good work"},
    )
    assert decided.status_code == 201
    client.post(
        "/api/instructor/regrades",
        headers=instructor.headers,
        json={"mode": "answers", "include_up_to_date": True},
    )
    documents = [
        client.get("/api/submissions", headers=student.headers).get_json(),
        client.get(f"/api/submissions/{submission}", headers=student.headers).get_json(),
        decided.get_json(),
    ]
    for path in (
        "/api/instructor/students",
        "/api/instructor/students/alice",
        "/api/instructor/decisions",
        f"/api/instructor/submissions/{submission}",
        f"/api/instructor/submissions/{submission}/gradings/1",
        "/api/instructor/regrades",
    ):
        response = client.get(path, headers=instructor.headers)
        assert response.status_code == 200, path
        documents.append(response.get_json())
    jsonl = client.get("/api/instructor/eval-records.jsonl", headers=instructor.headers)
    documents += [json.loads(line) for line in jsonl.get_data(as_text=True).splitlines()]
    table = client.get("/api/instructor/certificates.csv", headers=instructor.headers)
    documents += list(csv.DictReader(io.StringIO(table.get_data(as_text=True))))
    found = [stamp for document in documents for stamp in stamps(document) if stamp != ""]
    # Every kind of timestamp showed up: submissions, results, decisions, regrades, exports.
    assert len(found) >= 12
    assert {"created_at", "graded_at", "decided_at", "at"} <= {
        key for document in documents for key in TIME_KEYS if _has(document, key)
    }
    assert [stamp for stamp in found if not RFC3339_Z.match(stamp)] == []


def _has(value: Any, key: str) -> bool:
    if isinstance(value, dict):
        return (value.get(key) not in (None, "")) or any(_has(v, key) for v in value.values())
    if isinstance(value, list):
        return any(_has(v, key) for v in value)
    return False
