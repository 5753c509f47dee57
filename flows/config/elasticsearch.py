"""Elasticsearch settings: the connection (sinks/elasticsearch/client.py and the start-up
checks) and the bulk requests, buffers and retries of the sink partitions
(sinks/elasticsearch/)."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import AfterValidator, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from flows.config.fields import Flag, Group, Items, OneOf, SecretValue, setting
from flows.errors import ConfigError
from sinks.elasticsearch.config import BulkConfig, EsConnection, RetryConfig, TemplateConfig

MIB = 1024 * 1024
ROUTING_HASHES = ("murmur2", "crc32")


def _urls(hosts: tuple[str, ...]) -> tuple[str, ...]:
    for host in hosts:
        if not re.match(r"^https?://[^/\s]+", host):
            raise ValueError(f"expected http(s)://host:port URLs, got {host!r}")
    return hosts or ("http://127.0.0.1:9200",)


class ConnectionSettings(Group):
    """Which cluster, as whom, over which TLS; and the index template installed at start."""

    es_hosts: Annotated[Items, AfterValidator(_urls)] = setting(
        "ES_HOSTS", ("http://127.0.0.1:9200",), "comma-separated URLs"
    )
    es_cloud_id: str | None = setting("ES_CLOUD_ID", None, "Elastic Cloud instead of ES_HOSTS")
    es_username: str | None = setting("ES_USERNAME", None, "basic auth (with ES_PASSWORD)")
    es_password: SecretValue | None = setting("ES_PASSWORD", None, "basic auth password")
    es_api_key: SecretValue | None = setting("ES_API_KEY", None, "API key authentication")
    es_bearer_token: SecretValue | None = setting(
        "ES_BEARER_TOKEN", None, "bearer token authentication"
    )
    es_ca_certs: str | None = setting("ES_CA_CERTS", None, "CA bundle for TLS")
    es_ssl_fingerprint: str | None = setting(
        "ES_SSL_FINGERPRINT", None, "pin the server certificate's SHA-256 fingerprint"
    )
    es_verify_certs: Flag = setting("ES_VERIFY_CERTS", True, "verify the server certificate")
    es_compress: Flag = setting("ES_COMPRESS", False, "gzip request bodies")
    es_request_timeout_s: float = setting(
        "ES_REQUEST_TIMEOUT_S", 60.0, "seconds per request", ge=0.1
    )
    es_index_template_file: str | None = setting(
        "ES_INDEX_TEMPLATE_FILE", None, "JSON index template installed once at start"
    )
    es_index_template: SkipJsonSchema[dict[str, Any] | None] = Field(None, repr=False)
    """The template body read from ES_INDEX_TEMPLATE_FILE at start (its `name` key removed)."""
    es_index_template_name: SkipJsonSchema[str | None] = None
    """The template's `name` key, else the file name without its extension."""

    @model_validator(mode="after")
    def _one_way_to_authenticate(self) -> Self:
        if bool(self.es_username) != bool(self.es_password):
            name = "ES_PASSWORD" if self.es_username else "ES_USERNAME"
            raise ConfigError(f"{name}: basic auth needs both ES_USERNAME and ES_PASSWORD")
        given = (self.es_password, self.es_api_key, self.es_bearer_token)
        if sum(x is not None for x in given) > 1:
            msg = "ES_API_KEY: choose one of basic auth, ES_API_KEY or ES_BEARER_TOKEN"
            raise ConfigError(msg)
        return self

    @model_validator(mode="after")
    def _read_template_once(self) -> Self:
        """The file is read here, at start, so a missing or broken one stops the flow now."""
        path = self.es_index_template_file
        if path and self.es_index_template is None:
            body = _template(path)
            name = str(body.pop("name", None) or Path(path).stem)
            object.__setattr__(self, "es_index_template", body)
            object.__setattr__(self, "es_index_template_name", name)
        return self

    @functools.cached_property
    def es_connection(self) -> EsConnection:
        """How the sink, the start-up checks and the API reach the cluster: one object per
        settings object, so the client cached on it is shared."""
        return EsConnection(
            hosts=tuple(self.es_hosts),
            cloud_id=self.es_cloud_id,
            username=self.es_username,
            password=self.es_password,
            api_key=self.es_api_key,
            bearer_token=self.es_bearer_token,
            ca_certs=self.es_ca_certs,
            ssl_fingerprint=self.es_ssl_fingerprint,
            verify_certs=self.es_verify_certs,
            compress=self.es_compress,
            request_timeout_s=self.es_request_timeout_s,
        )

    @functools.cached_property
    def es_template(self) -> TemplateConfig:
        """The index template the sink installs at start."""
        return TemplateConfig(
            file=self.es_index_template_file,
            name=self.es_index_template_name,
            body=self.es_index_template,
        )


def _template(path: str) -> dict[str, Any]:
    def fail(problem: str) -> ConfigError:
        return ConfigError(f"ES_INDEX_TEMPLATE_FILE: {problem}")

    try:
        body = json.loads(Path(path).read_text())
    except OSError as e:
        raise fail(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise fail(f"{path} is not JSON: {e}") from None
    if not isinstance(body, dict) or "index_patterns" not in body:
        raise fail(f"{path} needs an index_patterns key")
    return body


class BulkSettings(Group):
    """How actions are partitioned, batched into `_bulk` requests, buffered and retried."""

    es_sink_partitions: int = setting(
        "ES_SINK_PARTITIONS",
        0,
        "sink partitions; set it at least to the total worker count",
        ge=0,
        shown="max(8, workers)",
    )
    es_sink_routing_hash: Annotated[str, OneOf(ROUTING_HASHES)] = setting(
        "ES_SINK_ROUTING_HASH",
        "murmur2",
        "hash of a document id that picks its sink partition; the producers' partitioner "
        "(`murmur2`: Java clients; `crc32`: librdkafka's default) sends a Kafka partition's "
        "documents to one sink partition when ids are string keys",
    )
    bulk_max_actions: int = setting("BULK_MAX_ACTIONS", 5000, "actions per `_bulk`", ge=1)
    bulk_max_bytes: int = setting("BULK_MAX_BYTES", 8 * MIB, "bytes per `_bulk`", ge=1024)
    bulk_linger_ms: int = setting(
        "BULK_LINGER_MS", 50, "send a partition's buffer once its oldest action is this old", ge=0
    )
    es_max_in_flight: int = setting(
        "ES_MAX_IN_FLIGHT",
        4,
        "`_bulk` requests in flight per process (each sink partition has at most one)",
        ge=1,
    )
    es_sink_buffer_bytes: int = setting(
        "ES_SINK_BUFFER_BYTES",
        24 * MIB,
        "encoded actions held per process, buffered or in flight, before partitions send early",
        ge=1024,
    )
    es_retry_initial_ms: int = setting(
        "ES_RETRY_INITIAL_MS", 100, "first backoff (full jitter, doubling)", ge=1
    )
    es_retry_max_ms: int = setting("ES_RETRY_MAX_MS", 10_000, "longest backoff", ge=1)
    es_retry_budget_s: float = setting(
        "ES_RETRY_BUDGET_S",
        0.0,
        "0 means retry an unreachable or overloaded Elasticsearch forever (the flow stalls)",
        ge=0.0,
    )
    es_item_retry_max: int = setting(
        "ES_ITEM_RETRY_MAX",
        10,
        "retries of a bulk item whose retryable error is not a 429; then it is a failed record",
        ge=0,
    )

    @model_validator(mode="after")
    def _backoff_grows(self) -> Self:
        if self.es_retry_max_ms < self.es_retry_initial_ms:
            raise ConfigError("ES_RETRY_MAX_MS: must not be below ES_RETRY_INITIAL_MS")
        return self

    @functools.cached_property
    def es_bulk(self) -> BulkConfig:
        """How the sink partitions batch and buffer `_bulk` requests."""
        return BulkConfig(
            max_actions=self.bulk_max_actions,
            max_bytes=self.bulk_max_bytes,
            linger_ms=self.bulk_linger_ms,
            max_in_flight=self.es_max_in_flight,
            buffer_bytes=self.es_sink_buffer_bytes,
        )

    @functools.cached_property
    def es_retry(self) -> RetryConfig:
        """How the sink partitions retry requests and items."""
        return RetryConfig(
            initial_ms=self.es_retry_initial_ms,
            max_ms=self.es_retry_max_ms,
            budget_s=self.es_retry_budget_s,
            item_retry_max=self.es_item_retry_max,
        )
