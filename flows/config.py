"""Settings: environment variables, optionally on top of a YAML file (ES_SINK_CONFIG).

The environment variable names are a public contract. A YAML file uses the same names in
lower case plus `transforms:` (a list) and `kafka_config:` / `es_index_map:` (maps); the
environment overrides the file. Every invalid value raises `ConfigError` naming the setting.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows.decode import CONVERTERS, REGISTRY_FORMATS
from flows.errors import ConfigError
from sinks.secrets import Secret

KAFKA_CONFIG_PREFIX = "KAFKA_CONFIG_"
SCHEMA_REGISTRY_CONFIG_PREFIX = "SCHEMA_REGISTRY_CONFIG_"

VALUE_FORMATS = tuple(CONVERTERS)  # the converter registry is the only list of formats
WRITE_METHODS = ("index", "create", "upsert")
NULL_VALUE_POLICIES = ("ignore", "delete", "dlq", "fail")
NULL_KEY_POLICIES = ("coordinates", "dlq")


@dataclass(frozen=True, eq=False)
class Settings:
    """Everything the flow needs, parsed and checked once at start.

    Compared and hashed by identity, so per-process resources (one Elasticsearch client,
    one dead-letter producer) can be cached per settings object.
    """

    # -- source
    topics: tuple[str, ...] = ()
    topics_regex: str | None = None
    bootstrap_servers: str = "127.0.0.1:9092"
    group_id: str = "es-sink"
    auto_offset_reset: str = "earliest"
    stop_at_end: bool = False
    consume_batch_size: int = 1000
    kafka_metadata_refresh_s: float = 30.0
    """Seconds between checks for new partitions/topics (restart to read them); 0: off."""
    kafka_config: Mapping[str, str] = field(default_factory=dict, repr=False)
    # -- decode
    value_format: str = "json"
    key_format: str = "string"
    value_field: str = "message"
    schema_registry_url: str | None = None
    schema_registry_config: Mapping[str, str] = field(default_factory=dict, repr=False)
    # -- transforms: YAML entries (dicts) and `python:` import strings, in order
    transforms: tuple[Mapping[str, Any], ...] = ()
    # -- dead letters and error policy
    dlq_topic: str | None = None
    errors_tolerance: str = "none"
    dlq_stacktrace: bool = False
    dlq_max_consecutive: int = 0
    dlq_max_ratio: float = 0.0
    dlq_ratio_min_records: int = 1000
    on_null_value: str = "ignore"
    on_null_key: str = "coordinates"
    # -- Elasticsearch
    es_hosts: tuple[str, ...] = ("http://127.0.0.1:9200",)
    es_index: str = "{topic}"
    es_index_map: Mapping[str, str] = field(default_factory=dict)
    es_sink_partitions: int = 0
    write_method: str = "index"
    doc_id: str = "key"
    version: str = "none"
    es_routing: str | None = None
    es_pipeline: str | None = None
    es_data_stream: bool = False
    es_timestamp_field: str | None = None
    es_index_template_file: str | None = None
    es_index_template: Mapping[str, Any] | None = field(default=None, repr=False)
    """The template body read from ES_INDEX_TEMPLATE_FILE at start (its `name` key removed)."""
    es_index_template_name: str | None = None
    es_username: str | None = None
    es_password: Secret | None = None
    es_api_key: Secret | None = None
    es_bearer_token: Secret | None = None
    es_ca_certs: str | None = None
    es_ssl_fingerprint: str | None = None
    es_verify_certs: bool = True
    es_cloud_id: str | None = None
    es_compress: bool = False
    es_request_timeout_s: float = 60.0
    bulk_max_actions: int = 5000
    bulk_max_bytes: int = 8 * 1024 * 1024
    bulk_linger_ms: int = 200
    es_max_in_flight: int = 4
    """`_bulk` requests in flight per process (each sink partition has at most one)."""
    es_sink_buffer_bytes: int = 24 * 1024 * 1024
    """Encoded actions held per process, buffered or in flight, before partitions send early."""
    gc_interval_s: float = 10.0
    """Seconds between the cyclic garbage collector's runs (flows.collector); 0: Python's."""
    es_retry_initial_ms: int = 100
    es_retry_max_ms: int = 10_000
    es_retry_budget_s: float = 0.0
    """0 means retry an unreachable or overloaded Elasticsearch forever (the flow stalls)."""
    es_item_retry_max: int = 10
    """Retries of a bulk item whose retryable error is not a 429; then it is a failed record."""
    dlq_retry_budget_s: float = 0.0
    """0 means retry the dead-letter topic forever on transient broker errors (the flow stalls)."""
    es_retry_on_conflict: int = 3
    """WRITE_METHOD=upsert: re-runs of an update that met a concurrent write (then 409)."""
    shutdown_timeout_s: float = 30.0
    """Seconds a graceful stop (SIGTERM/SIGINT) may take before the process exits non-zero."""

    @property
    def doc_id_field(self) -> str | None:
        """The dotted path of DOC_ID=field:<path>, else None."""
        return self.doc_id.split(":", 1)[1] if self.doc_id.startswith("field:") else None

    @property
    def version_header(self) -> str | None:
        """The header name of VERSION=header:<name>, else None."""
        return self.version.split(":", 1)[1] if self.version.startswith("header:") else None

    @property
    def external_versioning(self) -> bool:
        """True when writes carry `version_type=external`."""
        return self.version != "none"

    def secrets(self) -> list[str]:
        """Every configured secret value, to mask wherever text leaves the process."""
        out = [s.reveal() for s in (self.es_password, self.es_api_key, self.es_bearer_token) if s]
        for conf in (self.kafka_config, self.schema_registry_config):
            out.extend(v for k, v in conf.items() if _SENSITIVE.search(k) and v)
        return out

    def librdkafka(
        self, defaults: Mapping[str, Any] | None = None, **overrides: Any
    ) -> dict[str, Any]:
        """The librdkafka configuration: our `defaults`, then the user's pass-through
        settings (which win over defaults), then `overrides` the flow relies on."""
        return {
            **(defaults or {}),
            "bootstrap.servers": self.bootstrap_servers,
            **self.kafka_config,
            **overrides,
        }

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ES_SINK_CONFIG (if set) and the environment; raise ConfigError if invalid."""
        env = dict(os.environ if environ is None else environ)
        raw: dict[str, Any] = {}
        if path := env.get("ES_SINK_CONFIG"):
            raw.update(_read_yaml(path))
        raw.update({k: v for k, v in env.items() if k in _ENV_NAMES or _is_prefixed(k)})
        return _parse(raw)


def _is_prefixed(name: str) -> bool:
    return name.startswith((KAFKA_CONFIG_PREFIX, SCHEMA_REGISTRY_CONFIG_PREFIX))


_SENSITIVE = re.compile(
    r"password|secret|user\.info|sasl\.jaas|token|credential|key\.pem|key$", re.IGNORECASE
)

# Settings read from the environment, by name; the YAML file uses the same names in lower
# case. Maps and lists that only YAML can express are listed in _YAML_ONLY.
_ENV_NAMES = {
    "KAFKA_TOPICS", "KAFKA_TOPICS_REGEX", "KAFKA_BOOTSTRAP_SERVERS", "KAFKA_GROUP_ID",
    "KAFKA_AUTO_OFFSET_RESET", "KAFKA_STOP_AT_END", "KAFKA_CONSUME_BATCH_SIZE",
    "KAFKA_METADATA_REFRESH_S",
    "VALUE_FORMAT", "KEY_FORMAT", "VALUE_FIELD", "SCHEMA_REGISTRY_URL", "TRANSFORMS",
    "DLQ_TOPIC", "ERRORS_TOLERANCE", "DLQ_STACKTRACE", "DLQ_MAX_CONSECUTIVE", "DLQ_MAX_RATIO",
    "DLQ_RATIO_MIN_RECORDS", "ON_NULL_VALUE", "ON_NULL_KEY",
    "ES_HOSTS", "ES_INDEX", "ES_INDEX_MAP", "ES_SINK_PARTITIONS", "WRITE_METHOD", "DOC_ID",
    "VERSION", "ES_ROUTING", "ES_PIPELINE", "ES_DATA_STREAM", "ES_TIMESTAMP_FIELD",
    "ES_INDEX_TEMPLATE_FILE", "ES_USERNAME", "ES_PASSWORD", "ES_API_KEY", "ES_BEARER_TOKEN",
    "ES_CA_CERTS", "ES_SSL_FINGERPRINT", "ES_VERIFY_CERTS", "ES_CLOUD_ID", "ES_COMPRESS",
    "ES_REQUEST_TIMEOUT_S", "BULK_MAX_ACTIONS", "BULK_MAX_BYTES", "BULK_LINGER_MS",
    "ES_MAX_IN_FLIGHT", "ES_SINK_BUFFER_BYTES", "GC_INTERVAL_S", "ES_RETRY_INITIAL_MS",
    "ES_RETRY_MAX_MS", "ES_RETRY_BUDGET_S", "SHUTDOWN_TIMEOUT_S",
    "ES_ITEM_RETRY_MAX", "DLQ_RETRY_BUDGET_S",
    "ES_RETRY_ON_CONFLICT",
}  # fmt: skip
_YAML_ONLY = {"KAFKA_CONFIG", "SCHEMA_REGISTRY_CONFIG"}


def _read_yaml(path: str) -> dict[str, Any]:
    import yaml

    try:
        text = Path(path).read_text()
    except OSError as e:
        msg = f"ES_SINK_CONFIG: cannot read {path}: {e.strerror}"
        raise ConfigError(msg) from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        msg = f"ES_SINK_CONFIG: {path} is not valid YAML: {e}"
        raise ConfigError(msg) from None
    if not isinstance(data, dict):
        msg = f"ES_SINK_CONFIG: {path} must hold a mapping of settings"
        raise ConfigError(msg)
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).upper()
        if name not in _ENV_NAMES and name not in _YAML_ONLY:
            msg = f"{key}: unknown setting in {path}"
            raise ConfigError(msg)
        out[name] = value
    return out


class _Reader:
    """Typed access to raw settings; every error names the setting."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw

    def _get(self, name: str) -> Any:
        value = self.raw.get(name)
        if isinstance(value, str):
            value = value.strip()
            if value == "":
                return None
        return value

    def fail(self, name: str, problem: str) -> ConfigError:
        return ConfigError(f"{name}: {problem}")

    def text(self, name: str, default: str | None = None) -> str | None:
        value = self._get(name)
        return default if value is None else str(value)

    def req_str(self, name: str, default: str) -> str:
        value = self.text(name, default)
        assert value is not None
        return value

    def integer(self, name: str, default: int, minimum: int = 0) -> int:
        value = self._get(name)
        if value is None:
            return default
        try:
            out = int(value)
        except (TypeError, ValueError):
            raise self.fail(name, f"expected a whole number, got {value!r}") from None
        if out < minimum:
            raise self.fail(name, f"must be at least {minimum}, got {out}")
        return out

    def number(self, name: str, default: float, minimum: float = 0.0) -> float:
        value = self._get(name)
        if value is None:
            return default
        try:
            out = float(value)
        except (TypeError, ValueError):
            raise self.fail(name, f"expected a number, got {value!r}") from None
        if out < minimum:
            raise self.fail(name, f"must be at least {minimum}, got {out}")
        return out

    def flag(self, name: str, default: bool) -> bool:
        value = self._get(name)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        raise self.fail(name, f"expected true or false, got {value!r}")

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.req_str(name, default).lower()
        if value not in choices:
            raise self.fail(name, f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    def items(self, name: str) -> tuple[str, ...]:
        value = self._get(name)
        if value is None:
            return ()
        items = value if isinstance(value, list) else str(value).split(",")
        return tuple(s for s in (str(i).strip() for i in items) if s)

    def mapping(self, name: str) -> dict[str, str]:
        """A map from YAML, or `a:b,c:d` from the environment."""
        value = self._get(name)
        if value is None:
            return {}
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
        out = {}
        for pair in str(value).split(","):
            k, sep, v = pair.partition(":")
            if not sep or not k.strip() or not v.strip():
                raise self.fail(
                    name, f"expected topic:index pairs separated by commas, got {pair!r}"
                )
            out[k.strip()] = v.strip()
        return out

    def prefixed(self, yaml_name: str, prefix: str) -> dict[str, str]:
        """`<prefix>SECURITY_PROTOCOL=x` → `security.protocol: x`, over the YAML map."""
        out = self.mapping(yaml_name)
        for key, value in self.raw.items():
            if key.startswith(prefix) and key != yaml_name:
                out[key[len(prefix) :].lower().replace("_", ".")] = str(value)
        return out

    def secret(self, name: str) -> Secret | None:
        value = self.text(name)
        return None if value is None else Secret(value)


def _parse(raw: Mapping[str, Any]) -> Settings:
    r = _Reader(raw)
    topics = r.items("KAFKA_TOPICS")
    topics_regex = r.text("KAFKA_TOPICS_REGEX")
    if not topics and not topics_regex:
        raise r.fail(
            "KAFKA_TOPICS", "required (comma-separated topic names), or set KAFKA_TOPICS_REGEX"
        )
    if topics and topics_regex:
        raise r.fail(
            "KAFKA_TOPICS_REGEX", "set either KAFKA_TOPICS or KAFKA_TOPICS_REGEX, not both"
        )
    if topics_regex:
        try:
            re.compile(topics_regex)
        except re.error as e:
            raise r.fail("KAFKA_TOPICS_REGEX", f"invalid regular expression: {e}") from None

    bootstrap = r.req_str("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    for server in bootstrap.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise r.fail(
                "KAFKA_BOOTSTRAP_SERVERS", f"expected host:port[,host:port], got {server!r}"
            )

    kafka_config = r.prefixed("KAFKA_CONFIG", KAFKA_CONFIG_PREFIX)
    for reserved in ("group.id", "enable.auto.commit", "bootstrap.servers"):
        if reserved in kafka_config:
            raise r.fail(
                f"KAFKA_CONFIG_{reserved.upper().replace('.', '_')}",
                "is managed by the flow; use the dedicated setting "
                "(KAFKA_GROUP_ID, KAFKA_BOOTSTRAP_SERVERS) instead",
            )

    value_format = r.choice("VALUE_FORMAT", "json", VALUE_FORMATS)
    key_format = r.choice("KEY_FORMAT", "string", VALUE_FORMATS)
    registry_url = r.text("SCHEMA_REGISTRY_URL")
    for name, fmt in (("VALUE_FORMAT", value_format), ("KEY_FORMAT", key_format)):
        if fmt in REGISTRY_FORMATS and not registry_url:
            raise r.fail("SCHEMA_REGISTRY_URL", f"required when {name}={fmt}")

    transforms: list[Mapping[str, Any]] = []
    yaml_transforms = raw.get("TRANSFORMS")
    if isinstance(yaml_transforms, list):
        for i, entry in enumerate(yaml_transforms):
            if not isinstance(entry, dict) or ("type" not in entry and "python" not in entry):
                raise r.fail(f"transforms[{i}]", "each entry needs a `type:` or a `python:` key")
            transforms.append(entry)
    else:
        transforms.extend({"python": s} for s in r.items("TRANSFORMS"))

    errors_tolerance = r.choice("ERRORS_TOLERANCE", "none", ("none", "all"))
    dlq_topic = r.text("DLQ_TOPIC")
    if errors_tolerance == "all" and not dlq_topic:
        raise r.fail("DLQ_TOPIC", "required when ERRORS_TOLERANCE=all (dead letters go there)")
    on_null_value = r.choice("ON_NULL_VALUE", "ignore", NULL_VALUE_POLICIES)
    on_null_key = r.choice("ON_NULL_KEY", "coordinates", NULL_KEY_POLICIES)
    for name, policy in (("ON_NULL_VALUE", on_null_value), ("ON_NULL_KEY", on_null_key)):
        if policy == "dlq" and not dlq_topic:
            raise r.fail("DLQ_TOPIC", f"required when {name}=dlq")

    hosts = r.items("ES_HOSTS") or ("http://127.0.0.1:9200",)
    for host in hosts:
        if not re.match(r"^https?://[^/\s]+", host):
            raise r.fail("ES_HOSTS", f"expected http(s)://host:port URLs, got {host!r}")

    write_method = r.choice("WRITE_METHOD", "index", WRITE_METHODS)
    data_stream = r.flag("ES_DATA_STREAM", False)
    if data_stream and write_method != "create":
        if r.text("WRITE_METHOD") is not None:
            raise r.fail("WRITE_METHOD", "data streams accept only create (ES_DATA_STREAM=true)")
        write_method = "create"
    doc_id = r.req_str("DOC_ID", "key")
    if doc_id not in ("key", "coordinates", "none") and not re.fullmatch(r"field:[^\s]+", doc_id):
        raise r.fail(
            "DOC_ID", f"expected key, coordinates, none or field:<dotted.path>, got {doc_id!r}"
        )
    version = r.req_str("VERSION", "none")
    if version not in ("none", "offset") and not re.fullmatch(r"header:[^\s]+", version):
        raise r.fail("VERSION", f"expected none, offset or header:<name>, got {version!r}")
    if version != "none" and write_method == "upsert":
        raise r.fail("VERSION", "external versioning cannot be combined with WRITE_METHOD=upsert")
    if version != "none" and doc_id == "none":
        raise r.fail("VERSION", "external versioning needs document ids (DOC_ID is none)")
    if version != "none" and write_method == "create":
        raise r.fail(
            "VERSION", "Elasticsearch allows external versioning only with index, not create"
        )
    if write_method == "upsert" and doc_id == "none":
        raise r.fail("WRITE_METHOD", "upsert needs document ids (DOC_ID is none)")
    routing = r.text("ES_ROUTING")
    if routing and routing != "key" and not re.fullmatch(r"field:[^\s]+", routing):
        raise r.fail("ES_ROUTING", f"expected key or field:<dotted.path>, got {routing!r}")

    es_index = r.req_str("ES_INDEX", "{topic}")
    _check_index_template("ES_INDEX", es_index)
    index_map = r.mapping("ES_INDEX_MAP")
    for topic, index in index_map.items():
        _check_index_template(f"ES_INDEX_MAP[{topic}]", index)
    if on_null_value == "delete":
        _check_deletes_can_find(doc_id, routing, es_index, index_map, data_stream, transforms)
    if version == "offset":
        _check_offsets_comparable(doc_id, topics, topics_regex, es_index, index_map, transforms)

    username, password = r.text("ES_USERNAME"), r.secret("ES_PASSWORD")
    if bool(username) != bool(password):
        raise r.fail(
            "ES_PASSWORD" if username else "ES_USERNAME",
            "basic auth needs both ES_USERNAME and ES_PASSWORD",
        )
    api_key, bearer = r.secret("ES_API_KEY"), r.secret("ES_BEARER_TOKEN")
    if sum(x is not None for x in (password, api_key, bearer)) > 1:
        raise r.fail("ES_API_KEY", "choose one of basic auth, ES_API_KEY or ES_BEARER_TOKEN")
    template_file = r.text("ES_INDEX_TEMPLATE_FILE")
    template_body: dict[str, Any] | None = None
    template_name: str | None = None
    if template_file:
        try:
            body = json.loads(Path(template_file).read_text())
        except OSError as e:
            raise r.fail(
                "ES_INDEX_TEMPLATE_FILE", f"cannot read {template_file}: {e.strerror}"
            ) from None
        except ValueError as e:
            raise r.fail("ES_INDEX_TEMPLATE_FILE", f"{template_file} is not JSON: {e}") from None
        if not isinstance(body, dict) or "index_patterns" not in body:
            raise r.fail("ES_INDEX_TEMPLATE_FILE", f"{template_file} needs an index_patterns key")
        template_name = str(body.pop("name", None) or Path(template_file).stem)
        template_body = body

    retry_initial = r.integer("ES_RETRY_INITIAL_MS", 100, minimum=1)
    retry_max = r.integer("ES_RETRY_MAX_MS", 10_000, minimum=1)
    if retry_max < retry_initial:
        raise r.fail("ES_RETRY_MAX_MS", "must not be below ES_RETRY_INITIAL_MS")
    max_ratio = r.number("DLQ_MAX_RATIO", 0.0)
    if max_ratio > 1:
        raise r.fail("DLQ_MAX_RATIO", f"a share between 0 and 1 (0 = off), got {max_ratio}")

    return Settings(
        topics=topics,
        topics_regex=topics_regex,
        bootstrap_servers=bootstrap,
        group_id=r.req_str("KAFKA_GROUP_ID", "es-sink"),
        auto_offset_reset=r.choice("KAFKA_AUTO_OFFSET_RESET", "earliest", ("earliest", "latest")),
        stop_at_end=r.flag("KAFKA_STOP_AT_END", False),
        consume_batch_size=r.integer("KAFKA_CONSUME_BATCH_SIZE", 1000, minimum=1),
        kafka_metadata_refresh_s=r.number("KAFKA_METADATA_REFRESH_S", 30.0),
        kafka_config=kafka_config,
        value_format=value_format,
        key_format=key_format,
        value_field=r.req_str("VALUE_FIELD", "message"),
        schema_registry_url=registry_url,
        schema_registry_config=r.prefixed("SCHEMA_REGISTRY_CONFIG", SCHEMA_REGISTRY_CONFIG_PREFIX),
        transforms=tuple(transforms),
        dlq_topic=dlq_topic,
        errors_tolerance=errors_tolerance,
        dlq_stacktrace=r.flag("DLQ_STACKTRACE", False),
        dlq_max_consecutive=r.integer("DLQ_MAX_CONSECUTIVE", 0),
        dlq_max_ratio=max_ratio,
        dlq_ratio_min_records=r.integer("DLQ_RATIO_MIN_RECORDS", 1000, minimum=1),
        on_null_value=on_null_value,
        on_null_key=on_null_key,
        es_hosts=hosts,
        es_index=es_index,
        es_index_map=index_map,
        es_sink_partitions=r.integer("ES_SINK_PARTITIONS", 0),
        write_method=write_method,
        doc_id=doc_id,
        version=version,
        es_routing=routing,
        es_pipeline=r.text("ES_PIPELINE"),
        es_data_stream=data_stream,
        es_timestamp_field=r.text("ES_TIMESTAMP_FIELD"),
        es_index_template_file=template_file,
        es_index_template=template_body,
        es_index_template_name=template_name,
        es_username=username,
        es_password=password,
        es_api_key=api_key,
        es_bearer_token=bearer,
        es_ca_certs=r.text("ES_CA_CERTS"),
        es_ssl_fingerprint=r.text("ES_SSL_FINGERPRINT"),
        es_verify_certs=r.flag("ES_VERIFY_CERTS", True),
        es_cloud_id=r.text("ES_CLOUD_ID"),
        es_compress=r.flag("ES_COMPRESS", False),
        es_request_timeout_s=r.number("ES_REQUEST_TIMEOUT_S", 60.0, minimum=0.1),
        bulk_max_actions=r.integer("BULK_MAX_ACTIONS", 5000, minimum=1),
        bulk_max_bytes=r.integer("BULK_MAX_BYTES", 8 * 1024 * 1024, minimum=1024),
        bulk_linger_ms=r.integer("BULK_LINGER_MS", 200),
        es_max_in_flight=r.integer("ES_MAX_IN_FLIGHT", 4, minimum=1),
        es_sink_buffer_bytes=r.integer("ES_SINK_BUFFER_BYTES", 24 * 1024 * 1024, minimum=1024),
        gc_interval_s=r.number("GC_INTERVAL_S", 10.0),
        es_retry_initial_ms=retry_initial,
        es_retry_max_ms=retry_max,
        es_retry_budget_s=r.number("ES_RETRY_BUDGET_S", 0.0),
        es_item_retry_max=r.integer("ES_ITEM_RETRY_MAX", 10),
        dlq_retry_budget_s=r.number("DLQ_RETRY_BUDGET_S", 0.0),
        es_retry_on_conflict=r.integer("ES_RETRY_ON_CONFLICT", 3),
        shutdown_timeout_s=r.number("SHUTDOWN_TIMEOUT_S", 30.0),
    )


# Built-in transforms that derive a document's id, key, index or routing from its fields.
_FIELD_ROUTED = {"route", "id_from_field", "key_from_field"}


def _check_deletes_can_find(
    doc_id: str,
    routing: str | None,
    es_index: str,
    index_map: Mapping[str, str],
    data_stream: bool,
    transforms: Sequence[Mapping[str, Any]],
) -> None:
    """ON_NULL_VALUE=delete: a tombstone must name the index, id and routing of the document
    it deletes. It has no fields and its own timestamp, so anything derived from those would
    send the delete elsewhere, where Elasticsearch answers 404 and the document stays
    (review finding F3). Refused at start rather than silently doing nothing."""
    why = "ON_NULL_VALUE=delete: a tombstone has no fields and its own timestamp, so"
    if doc_id != "key":
        msg = f"{why} its delete can only find a document whose id is the record key (DOC_ID=key)"
        raise ConfigError(f"DOC_ID: {msg}, got {doc_id!r}")
    if routing and routing != "key":
        msg = f"{why} a delete cannot be routed by a field; use ES_ROUTING=key or no routing"
        raise ConfigError(f"ES_ROUTING: {msg}")
    if data_stream:
        raise ConfigError("ES_DATA_STREAM: data streams accept only create, not deletes")
    from flows.naming import IndexTemplate

    for name, template in (("ES_INDEX", es_index), *_named_map(index_map)):
        if IndexTemplate(template).has_date:
            msg = (
                f"{why} a delete would go to the index of the tombstone's date, not the "
                f"document's; use an index without a date part or ON_NULL_VALUE=ignore/dlq"
            )
            raise ConfigError(f"{name}: {msg} ({template!r})")
    for i, entry in enumerate(transforms):
        kind = entry.get("type")
        dated = kind == "route" and IndexTemplate(str(entry.get("index") or "")).has_date
        by_field = kind == "route" and ("routing_field" in entry or "timestamp_field" in entry)
        if kind in ("id_from_field", "key_from_field") or dated or by_field:
            msg = f"{why} a {kind} transform cannot give its delete the document's {_what(kind)}"
            raise ConfigError(f"transforms[{i}]: {msg}")


def _check_offsets_comparable(
    doc_id: str,
    topics: Sequence[str],
    topics_regex: str | None,
    es_index: str,
    index_map: Mapping[str, str],
    transforms: Sequence[Mapping[str, Any]],
) -> None:
    """VERSION=offset uses the Kafka offset as the document version, and offsets are ordered
    only within one partition: wherever one document can receive writes from two partitions,
    a newer write loses to an older one and the 409 counts as done (review finding F5). What
    the settings show is refused here; what only Kafka shows (partitions added, a recreated
    topic) is refused by the source."""
    why = (
        "VERSION=offset orders writes by Kafka offset, which is ordered only within one "
        "partition, so"
    )
    fix = "use VERSION=none (writes to one document stay in order) or VERSION=header:<name>"
    if doc_id not in ("key", "coordinates"):  # a coordinates id has one record, so one partition
        msg = f"{why} the document id must be the record key (DOC_ID=key), got {doc_id!r}; {fix}"
        raise ConfigError(f"VERSION: {msg}")
    # With a regex the topics are not known yet: every mapped index may receive its topic.
    indices = [index_map.get(t, es_index) for t in topics] or list(index_map.values())
    indices = [i for i in indices if "{topic}" not in i]  # the others differ per topic
    clash = next((i for i in indices if indices.count(i) > 1), None)
    if clash is not None or (topics_regex and "{topic}" not in es_index):
        where = f"index {clash!r}" if clash else f"ES_INDEX={es_index!r} with KAFKA_TOPICS_REGEX"
        msg = f"{why} several topics must not write one index ({where}); {fix}"
        raise ConfigError(f"VERSION: {msg}")
    for i, entry in enumerate(transforms):
        if entry.get("type") in _FIELD_ROUTED:
            msg = f"{why} a {entry['type']} transform must not choose ids or indices; {fix}"
            raise ConfigError(f"transforms[{i}]: {msg}")


def _named_map(index_map: Mapping[str, str]) -> list[tuple[str, str]]:
    return [(f"ES_INDEX_MAP[{t}]", i) for t, i in index_map.items()]


def _what(kind: object) -> str:
    return {"route": "index and routing", "id_from_field": "id"}.get(str(kind), "key")


def _check_index_template(name: str, template: str) -> None:
    from flows.naming import IndexTemplate

    try:
        IndexTemplate(template)
    except ValueError as e:
        raise ConfigError(f"{name}: {e}") from None
