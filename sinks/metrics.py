"""The sinks' Prometheus metrics, served on Bytewax's API server
(`BYTEWAX_DATAFLOW_API_ENABLED=true`); the flow's own are in `flows.metrics`.

Counters are bumped once per bulk or batch with a count, never once per record.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

DOCS_INDEXED = Counter("es_sink_docs_indexed", "Bulk actions Elasticsearch acknowledged")
DEAD_LETTERS = Counter(
    "es_sink_dead_letters", "Records sent to the dead-letter topic, by stage", ["stage"]
)
SKIPPED = Counter(
    "es_sink_records_skipped",
    "Records not written on purpose, by reason: dropped (by a transform or ON_NULL_VALUE=ignore), "
    "failed_deserialize, failed_transform, failed_index (ERRORS_TOLERANCE=log)",
    ["reason"],
)
DELETES_NOT_FOUND = Counter(
    "es_sink_deletes_not_found",
    "Deletes Elasticsearch answered 404 (no such document or index): done, nothing deleted",
)
UPDATES_MISSING = Counter(
    "es_sink_updates_missing",
    "Updates of a missing document skipped under ON_MISSING_DOCUMENT=ignore: nothing written",
)
BULK_RETRIES = Counter(
    "es_sink_bulk_retries", "Bulk items or requests retried, by status or error", ["status"]
)
BULK_SECONDS = Histogram(
    "es_sink_bulk_seconds",
    "Latency of one _bulk request",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
BUFFERED = Gauge("es_sink_buffered_actions", "Actions buffered in a sink partition", ["part"])
