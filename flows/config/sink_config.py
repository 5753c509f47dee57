"""The sinks' frozen configs, built from the settings: the one place that maps one to the
other (the sinks never see `Settings`).

Memoized per settings object (settings hash by identity), so every reader of one run's
settings gets the same config objects, and the per-process resources cached on them (one
Elasticsearch client per connection, one dead-letter producer) are shared: the start-up
credential check and the sink use one client.
"""

from __future__ import annotations

import functools
import re

from flows.config import Settings
from flows.errors import ConfigError
from sinks.dead_letter.config import DeadLetterConfig, ErrorTolerance
from sinks.elasticsearch.config import (
    BulkConfig,
    DocumentConfig,
    EsConnection,
    EsSinkConfig,
    RetryConfig,
    TemplateConfig,
)
from sinks.elasticsearch.write_methods import Updates
from sinks.model import FieldPath
from sinks.secrets import Secret


@functools.cache
def es_sink(s: Settings) -> EsSinkConfig:
    """What the Elasticsearch sink reads."""
    return EsSinkConfig(
        connection=connection(s),
        documents=documents(s),
        bulk=BulkConfig(
            max_actions=s.bulk_max_actions,
            max_bytes=s.bulk_max_bytes,
            linger_ms=s.bulk_linger_ms,
            max_in_flight=s.es_max_in_flight,
            buffer_bytes=s.es_sink_buffer_bytes,
        ),
        retry=RetryConfig(
            initial_ms=s.es_retry_initial_ms,
            max_ms=s.es_retry_max_ms,
            budget_s=s.es_retry_budget_s,
            item_retry_max=s.es_item_retry_max,
        ),
        template=TemplateConfig(
            file=s.es_index_template_file,
            name=s.es_index_template_name,
            body=s.es_index_template,
        ),
        tolerance=tolerance(s),
        dead_letters=dead_letters(s),
    )


@functools.cache
def connection(s: Settings) -> EsConnection:
    """How to reach Elasticsearch."""
    return EsConnection(
        hosts=tuple(s.es_hosts),
        cloud_id=s.es_cloud_id,
        username=s.es_username,
        password=s.es_password,
        api_key=s.es_api_key,
        bearer_token=s.es_bearer_token,
        ca_certs=s.es_ca_certs,
        ssl_fingerprint=s.es_ssl_fingerprint,
        verify_certs=s.es_verify_certs,
        compress=s.es_compress,
        request_timeout_s=s.es_request_timeout_s,
    )


@functools.cache
def documents(s: Settings) -> DocumentConfig:
    """How documents become bulk actions (read by the processor's ActionBuilder)."""
    doc_id_field = s.doc_id_field
    routing = s.es_routing
    routing_field = routing.split(":", 1)[1] if routing and ":" in routing else None
    return DocumentConfig(
        write_method=s.write_method,
        retry_on_conflict=s.es_retry_on_conflict,
        index=s.es_index,
        index_map=dict(s.es_index_map),
        doc_id="field" if doc_id_field else s.doc_id,
        id_field=_path("DOC_ID", doc_id_field),
        on_null_key=s.on_null_key,
        version="header" if s.version_header is not None else s.version,
        version_header=s.version_header,
        routing=None if not routing else "field" if routing_field else "key",
        routing_field=_path("ES_ROUTING", routing_field),
        pipeline=s.es_pipeline,
        data_stream=s.es_data_stream,
        timestamp_field=_path("ES_TIMESTAMP_FIELD", s.es_timestamp_field),
        updates=Updates(
            on_missing=s.on_missing_document,
            script=_script(s),
            scripted_upsert=s.es_scripted_upsert,
            record=s.es_script_record,
        ),
        index_allow=re.compile(s.es_index_allow) if s.es_index_allow else None,
        index_naming=s.es_index_naming,
        id_separator=s.doc_id_separator,
    )


def _script(s: Settings) -> dict[str, str] | None:
    """The `script` of WRITE_METHOD=script's updates (its `params.doc` is added per record)."""
    if s.es_script_id:
        return {"id": s.es_script_id}
    if s.es_script_source:
        return {"source": s.es_script_source, "lang": s.es_script_lang}
    return None


@functools.cache
def tolerance(s: Settings) -> ErrorTolerance:
    """ERRORS_TOLERANCE and the dead-letter circuit breaker."""
    return ErrorTolerance(
        tolerate=s.errors_tolerance != "none",
        max_consecutive=s.dlq_max_consecutive,
        max_ratio=s.dlq_max_ratio,
        min_records=s.dlq_ratio_min_records,
        secrets=_secrets(s),
        log=s.errors_tolerance == "log",
        log_values=s.errors_log_values,
    )


@functools.cache
def dead_letters(s: Settings) -> DeadLetterConfig | None:
    """DLQ_TOPIC and how to reach it; None without one."""
    if not s.dlq_topic:
        return None
    return DeadLetterConfig(
        topic=s.dlq_topic,
        kafka=s.librdkafka("producer"),
        retry_budget_s=s.dlq_retry_budget_s,
        secrets=_secrets(s),
    )


def _secrets(s: Settings) -> tuple[Secret, ...]:
    return tuple(Secret(v) for v in s.secrets())


def _path(name: str, dotted: str | None) -> FieldPath | None:
    if not dotted:
        return None
    try:
        return FieldPath(dotted)
    except ValueError as e:
        msg = f"{name}: {e}"
        raise ConfigError(msg) from None
