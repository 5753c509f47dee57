"""The flow's Prometheus metrics, served on Bytewax's API server
(`BYTEWAX_DATAFLOW_API_ENABLED=true`); the sinks' are in `sinks.metrics`.

Counters are bumped once per batch with a count, never once per record.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Info

from flows.runtime.version import VERSION

# es_sink_records_skipped is declared with the sinks' metrics: they skip records too
# (ERRORS_TOLERANCE=log).
from sinks.metrics import SKIPPED as SKIPPED

RECORDS_IN = Counter("es_sink_records_in", "Kafka records read by the flow")
CONSUMER_LAG = Gauge(
    "es_sink_consumer_lag", "Log end offset minus next offset to read", ["topic", "partition"]
)
DELETED_UNREAD = Counter(
    "es_sink_offsets_deleted_unread",
    "Offsets the broker deleted (retention, DeleteRecords) before the flow read them",
    ["topic", "partition"],
)
PAUSED = Gauge("es_sink_paused", "1 while an operator paused reading Kafka (PUT /pause)")
BUILD = Info("es_sink_build", "The es-sink version this process runs (always 1)")
BUILD.info({"version": VERSION})
