"""The metrics the status API adds, computed when Prometheus scrapes: state, readiness,
stop in progress, buffers, bulks in flight, retries under way, committed lag. Nothing per
record."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import get_args

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from flows.api import models
from flows.api.state import ProcessState
from flows.runtime import shutdown
from sinks.backoff import under_way
from sinks.elasticsearch.partition import buffered

STATES: tuple[str, ...] = get_args(models.State)


class ProcessCollector(Collector):
    def __init__(self, state: ProcessState) -> None:
        self._state = state

    def describe(self) -> list[Metric]:
        return []  # collected at scrape time only; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        now = self._state.state()
        family = GaugeMetricFamily(
            "es_sink_state", "1 on the process's current state, 0 on the others", labels=["state"]
        )
        for s in STATES:
            family.add_metric([s], 1.0 if s == now else 0.0)
        yield family
        ready = self._state.last_ready()
        yield GaugeMetricFamily(
            "es_sink_ready", "1 while GET /health/ready answers 200", value=float(ready)
        )
        yield GaugeMetricFamily(
            "es_sink_shutdown_in_progress",
            "1 once a graceful stop began",
            value=float(shutdown.requested()),
        )
        b = buffered()
        yield GaugeMetricFamily(
            "es_sink_oldest_unflushed_seconds",
            "Age of the oldest buffered action no bulk has taken yet (0: none)",
            value=b.oldest_s or 0.0,
        )
        yield GaugeMetricFamily(
            "es_sink_buffered_bytes", "Bytes of actions buffered, not yet sent", value=b.bytes
        )
        yield GaugeMetricFamily(
            "es_sink_bulks_in_flight", "Bulk requests being sent", value=b.bulks_in_flight
        )
        retries = GaugeMetricFamily(
            "es_sink_retries_in_progress",
            "Retry loops still retrying, by where they retry",
            labels=["reason"],
        )
        for where, n in sorted(Counter(u.where for u in under_way()).items()):
            retries.add_metric([where], n)
        yield retries
        # Kafka's answer, cached like /status's: records read but not yet written and
        # committed show here, not in es_sink_consumer_lag (which counts from the position).
        committed = GaugeMetricFamily(
            "es_sink_committed_lag",
            "Log end offset minus the group's committed offset (absent before the first commit)",
            labels=["topic", "partition"],
        )
        for (topic, partition), lag in sorted(self._state.committed_lags().items()):
            committed.add_metric([topic, str(partition)], lag)
        yield committed
