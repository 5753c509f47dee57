"""The flow's Prometheus metrics, served on Bytewax's API server
(`BYTEWAX_DATAFLOW_API_ENABLED=true`); the sinks' are in `sinks.metrics`.

Counters are bumped once per batch with a count, never once per record.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

RECORDS_IN = Counter("es_sink_records_in", "Kafka records read by the flow")
SKIPPED = Counter("es_sink_records_skipped", "Records dropped on purpose, by reason", ["reason"])
CONSUMER_LAG = Gauge(
    "es_sink_consumer_lag", "Log end offset minus next offset to read", ["topic", "partition"]
)
PAUSED = Gauge("es_sink_paused", "1 while an operator paused reading Kafka (PUT /pause)")
