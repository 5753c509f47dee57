"""What the Elasticsearch sink needs from the configuration: frozen, built once at start
(each settings group in `flows.config` builds its part beside its declarations; the
defaults live there, once).

Compared and hashed by identity (`eq=False`): per-process resources (one client per
connection, see `client.shared_client`) are cached per config object.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sinks.dead_letter.config import DeadLetterConfig, ErrorTolerance
from sinks.elasticsearch.write_methods import WRITE_METHODS, Updates, WriteMethod
from sinks.model import FieldPath
from sinks.secrets import Secret


@dataclass(frozen=True, eq=False)
class EsConnection:
    """ES_HOSTS or ES_CLOUD_ID, one kind of credentials, TLS, compression, timeout."""

    hosts: tuple[str, ...]
    cloud_id: str | None
    username: str | None
    password: Secret | None
    api_key: Secret | None
    bearer_token: Secret | None
    ca_certs: str | None
    ssl_fingerprint: str | None
    verify_certs: bool
    compress: bool
    request_timeout_s: float


@dataclass(frozen=True, eq=False)
class DocumentConfig:
    """How a document becomes a bulk action: index, id, version, routing, write method."""

    write_method: str
    """A name in `WRITE_METHODS` (WRITE_METHOD; `create` for a data stream)."""
    retry_on_conflict: int
    """ES_RETRY_ON_CONFLICT, for write methods that retry conflicts."""
    index: str
    """ES_INDEX: an index name pattern (`sinks.elasticsearch.index_names`)."""
    index_map: Mapping[str, str]
    """ES_INDEX_MAP: topic → index name pattern."""
    doc_id: str
    """DOC_ID: `key`, `coordinates`, `none` or `field` (then `id_field`)."""
    id_field: FieldPath | None
    """DOC_ID=field:<path>."""
    on_null_key: str
    """ON_NULL_KEY: `coordinates`, `dlq` or `fail` (both: a failed record)."""
    version: str
    """VERSION: `none`, `offset` or `header` (then `version_header`)."""
    version_header: str | None
    """VERSION=header:<name>."""
    routing: str | None
    """ES_ROUTING: None, `key` or `field` (then `routing_field`)."""
    routing_field: FieldPath | None
    """ES_ROUTING=field:<path>."""
    pipeline: str | None
    data_stream: bool
    timestamp_field: FieldPath | None
    """ES_TIMESTAMP_FIELD: the data stream's @timestamp (else the record timestamp)."""
    updates: Updates
    """ON_MISSING_DOCUMENT and the script, for the update-based write methods."""
    index_allow: re.Pattern[str] | None
    """ES_INDEX_ALLOW: every index name a record produces must match it whole."""
    index_naming: str = "as-is"
    """ES_INDEX_NAMING: `as-is`, or `connect` (`index_names.connect_index_name` first)."""
    id_separator: str = "-"
    """DOC_ID_SEPARATOR: between topic, partition and offset in a coordinates id."""
    key_format: str = "string"
    """KEY_FORMAT: with ES_INDEX_NAMING=connect a `bytes` key is no id, as for Kafka Connect."""

    @property
    def method(self) -> WriteMethod:
        return WRITE_METHODS[self.write_method]

    @property
    def external_versioning(self) -> bool:
        """True when writes carry `version_type=external`."""
        return self.version != "none"


@dataclass(frozen=True, eq=False)
class BulkConfig:
    """When a partition sends, and how much a process holds."""

    max_actions: int
    """BULK_MAX_ACTIONS per request."""
    max_bytes: int
    """BULK_MAX_BYTES per request."""
    linger_ms: int
    """BULK_LINGER_MS: the longest a buffer waits while no bulk of its partition is in flight."""
    max_in_flight: int
    """ES_MAX_IN_FLIGHT: `_bulk` requests in flight per process."""
    buffer_bytes: int
    """ES_SINK_BUFFER_BYTES: encoded actions held per process, buffered or in flight."""


@dataclass(frozen=True, eq=False)
class RetryConfig:
    """How long and how often the sink retries what Elasticsearch may accept later."""

    initial_ms: int
    """ES_RETRY_INITIAL_MS (see `sinks.backoff`)."""
    max_ms: int
    """ES_RETRY_MAX_MS."""
    budget_s: float
    """ES_RETRY_BUDGET_S; 0: forever (the flow stalls)."""
    item_retry_max: int
    """ES_ITEM_RETRY_MAX: retries of an item whose retryable error is not a 429."""


@dataclass(frozen=True, eq=False)
class TemplateConfig:
    """ES_INDEX_TEMPLATE_FILE, read at start: installed once per process by the sink."""

    file: str | None
    name: str | None
    body: Mapping[str, Any] | None = field(repr=False)


@dataclass(frozen=True, eq=False)
class EsSinkConfig:
    """Everything the Elasticsearch sink reads, and nothing else."""

    connection: EsConnection
    documents: DocumentConfig
    bulk: BulkConfig
    retry: RetryConfig
    template: TemplateConfig
    tolerance: ErrorTolerance
    dead_letters: DeadLetterConfig | None
    """DLQ_TOPIC, where refused records go (None: the error policy stops the flow first)."""
