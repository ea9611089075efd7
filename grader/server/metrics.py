"""Prometheus metrics computed at scrape time from the database and Redis.

Reading the figures from the shared stores (rather than counting in-process) keeps them right
with any number of gunicorn processes, server hosts and worker hosts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlmodel import Session

from grader.db.metrics import grading_duration_histogram, status_counts

from .state import ServerState

log = logging.getLogger("grader.server")

#: Buckets of the grading duration histogram, in seconds.
DURATION_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class GraderCollector(Collector):
    def __init__(self, server: ServerState) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "grader_dependency_up", "Whether a dependency answered this scrape", labels=["name"]
        )
        try:
            depth = self.server.queue.count
            queue = GaugeMetricFamily(
                "grader_queue_depth", "Grading jobs waiting in the rq queue", labels=["queue"]
            )
            queue.add_metric([self.server.queue.name], depth)
            yield queue
            up.add_metric(["redis"], 1)
        except Exception as exc:
            log.warning("metrics: redis unavailable: %s", exc)
            up.add_metric(["redis"], 0)
        try:
            with Session(self.server.engine) as session:
                counts = status_counts(session=session)
                buckets, count, total = grading_duration_histogram(
                    session=session, buckets=DURATION_BUCKETS
                )
            submissions = GaugeMetricFamily(
                "grader_submissions", "Submissions by status", labels=["status"]
            )
            for status, number in counts.items():
                submissions.add_metric([status.value], number)
            yield submissions
            histogram = HistogramMetricFamily(
                "grader_grading_duration_seconds",
                "Wall-clock time of first gradings (sandbox run included)",
            )
            histogram.add_metric(
                [],
                [
                    (f"{bound:g}", value)
                    for bound, value in zip(DURATION_BUCKETS, buckets, strict=True)
                ]
                + [("+Inf", count)],
                total,
            )
            yield histogram
            up.add_metric(["database"], 1)
        except Exception as exc:
            log.warning("metrics: database unavailable: %s", exc)
            up.add_metric(["database"], 0)
        yield up
