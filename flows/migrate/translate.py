"""Kafka Connect's Elasticsearch sink configuration -> the flow's settings, option by option.

`translate` reads a connector's options (and the worker's, where the connector inherits
them), and returns the settings that make the flow write what the connector wrote: the same
document ids (`topic+partition+offset` where keys are ignored, the key's string form where
not), the same index names (ES_INDEX_NAMING=connect), the same write method, versions,
tombstone handling, error tolerance and dead-letter topic, and the transforms closest to its
SMTs. Every option gets a row (`report.Row`): mapped, default, no effect, or not supported
with why and the nearest equivalent. Secrets are never copied: the settings name the
environment variable to set.

The connector's behaviour is the one documented for its 15.x line (confluentinc/
kafka-connect-elasticsearch, `ElasticsearchSinkConnectorConfig`, `DataConverter`,
`ElasticsearchSinkTask`) and Apache Kafka Connect's framework options.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from flows.migrate import smts
from flows.migrate.connector import Connector, is_secret, masked_url
from flows.migrate.report import DEFAULT, MAPPED, NO_EFFECT, UNSUPPORTED, Row
from sinks.elasticsearch.index_names import connect_data_stream_name

CONNECTOR_CLASSES = (
    "io.confluent.connect.elasticsearch.ElasticsearchSinkConnector",
    "ElasticsearchSinkConnector",
)
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
CONVERTERS = {
    JSON_CONVERTER: "json",
    "org.apache.kafka.connect.storage.StringConverter": "string",
    "org.apache.kafka.connect.converters.ByteArrayConverter": "bytes",
    "io.confluent.connect.avro.AvroConverter": "avro",
    "io.confluent.connect.json.JsonSchemaConverter": "json-schema",
    "io.confluent.connect.protobuf.ProtobufConverter": "protobuf",
}
REGISTRY_FORMATS = ("avro", "json-schema", "protobuf")
NUMERIC_CONVERTERS = tuple(
    f"org.apache.kafka.connect.converters.{n}Converter"
    for n in ("Long", "Integer", "Short", "Float", "Double", "Boolean")
)
# Converter options that decide nothing about how the flow reads a record.
CONVERTER_NO_EFFECT = frozenset(
    {
        "schemas.cache.size",
        "auto.register.schemas",
        "use.latest.version",
        "latest.compatibility.strict",
        "key.subject.name.strategy",
        "value.subject.name.strategy",
        "enhanced.avro.schema.support",
        "connect.meta.data",
        "scrub.invalid.names",
        "normalize.schemas",
        "use.schema.id",
        "avro.codec",
        "generalized.sum.type.support",
        "ignore.default.for.nullables",
        "replace.null.with.default",
        "object.additional.properties",
        "optional.for.nullables",
        "enhanced.protobuf.schema.support",
        "wrapper.for.nullables",
        "wrapper.for.raw.primitives",
        "generate.struct.for.nulls",
        "int.for.enums",
        "optional.for.proto2",
        "flatten.unions",
        "context.name.strategy",
        "use.latest.with.metadata",
        "latest.cache.size",
        "latest.cache.ttl.sec",
        "decimal.format",
        "schema.registry.basic.auth.credentials.source",
    }
)
# librdkafka properties spelt as the Java consumer spells them (or renamed).
KAFKA_SAME = frozenset(
    {
        "client.id",
        "isolation.level",
        "fetch.min.bytes",
        "max.partition.fetch.bytes",
        "fetch.max.bytes",
        "security.protocol",
        "ssl.endpoint.identification.algorithm",
        "client.rack",
        "socket.connection.setup.timeout.ms",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "retry.backoff.ms",
        "metadata.max.age.ms",
        "sasl.kerberos.service.name",
        "sasl.oauthbearer.token.endpoint.url",
    }
)
KAFKA_RENAMED = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "sasl.mechanism": "sasl.mechanisms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
}
# Consumer settings of a group member: the flow reads through assign(), never a member.
KAFKA_GROUP_ONLY = frozenset(
    {
        "max.poll.records",
        "max.poll.interval.ms",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "partition.assignment.strategy",
        "enable.auto.commit",
        "auto.commit.interval.ms",
        "group.instance.id",
        "key.deserializer",
        "value.deserializer",
        "request.timeout.ms",
        "default.api.timeout.ms",
        "group.protocol",
        "group.remote.assignor",
        "allow.auto.create.topics",
        "exclude.internal.topics",
        "interceptor.classes",
        "metric.reporters",
    }
)
PRODUCER_SAME = frozenset(
    {"client.id", "acks", "compression.type", "linger.ms", "batch.size", "message.max.bytes"}
)
# Options that change only how the connector runs, not what it writes.
NO_EFFECT_OPTIONS = {
    "max.connection.idle.time.ms": "defined but never read by the connector",
    "connection.timeout.ms": "the flow connects within ES_REQUEST_TIMEOUT_S and retries a "
    "refused connection instead of failing",
    "max.buffered.records": "the flow bounds what it holds in bytes (ES_SINK_BUFFER_BYTES, "
    "24 MiB by default), not records",
    "flush.timeout.ms": "the flow waits for Elasticsearch instead of failing when its buffer "
    "is full",
    "flush.synchronously": "the flow commits each Kafka partition behind its written records "
    "whatever transforms rename (routers included)",
    "max.retries": "the flow retries until ES_RETRY_BUDGET_S (0: forever) instead of failing "
    "after a number of attempts; set es_retry_budget_s to give up after a time",
    "max.external.resource.mappings": "the flow takes any number of ES_INDEX_MAP entries",
    "type.name": "mapping types are gone since Elasticsearch 7; the connector ignores it too",
    "auto.create.indices.at.start": "Elasticsearch creates an index at its first document",
    "log.sensitive.data": "the flow logs no record values unless ERRORS_LOG_VALUES=true",
    "config.action.reload": "the flow reads its settings at start",
    "errors.retry.timeout": "the flow's decoders and built-in transforms have no retriable "
    "failures; an unreachable Schema Registry stalls the flow instead",
    "errors.retry.delay.max.ms": "see errors.retry.timeout",
    "errors.deadletterqueue.topic.replication.factor": "the flow creates no topic: the "
    "dead-letter topic must exist, and the connector's does",
}
DEFAULTS = {
    "key.ignore": "false",
    "schema.ignore": "false",
    "write.method": "insert",
    "behavior.on.null.values": "fail",
    "behavior.on.malformed.documents": "fail",
    "drop.invalid.message": "false",
    "use.autogenerated.ids": "false",
    "errors.tolerance": "none",
    "errors.log.enable": "false",
    "errors.log.include.messages": "false",
    "errors.deadletterqueue.context.headers.enable": "false",
    "compact.map.entries": "true",
    "max.in.flight.requests": "5",
    "data.stream.namespace": "${topic}",
    "external.resource.usage": "disabled",
    "elastic.security.protocol": "plaintext",
    "tasks.max": "1",
}


@dataclass
class Migration:
    """`translate`'s answer: the flow's settings and a row per option."""

    connector: Connector
    settings: dict[str, Any] = field(default_factory=dict)
    """ES_SINK_CONFIG keys (environment names in lower case) -> values, in order."""
    environment: dict[str, str] = field(default_factory=dict)
    """Variable -> the connector option whose value it must hold (secrets)."""
    comments: list[str] = field(default_factory=list)
    """What the YAML cannot say (how to run it, what the worker configured)."""
    rows: list[Row] = field(default_factory=list)

    @property
    def faithful(self) -> bool:
        return all(r.status != UNSUPPORTED for r in self.rows)

    def unsupported(self) -> list[Row]:
        return [r for r in self.rows if r.status == UNSUPPORTED]


def translate(connector: Connector, partitions: dict[str, int] | None = None) -> Migration:
    """The flow's settings for `connector` (`partitions`: topic -> partition count, when
    Kafka was asked; VERSION=offset needs one partition per topic)."""
    return _Translation(connector, partitions).run()


def _flag(value: str | None, default: bool = False) -> bool:
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() == "true"


def _items(value: str | None) -> list[str]:
    return [s.strip() for s in (value or "").split(",") if s.strip()]


def java_regex(pattern: str) -> str | None:
    """A Java regex as Python's `re` reads it (`(?<name>` named groups), or None when
    Python cannot compile it (`\\p{Alpha}` and other Java-only syntax)."""
    converted = re.sub(r"\(\?<([A-Za-z][A-Za-z0-9]*)>", r"(?P<\1>", pattern)
    try:
        re.compile(converted)
    except re.error:
        return None
    return converted


class _Translation:
    def __init__(self, connector: Connector, partitions: dict[str, int] | None) -> None:
        self.c = connector
        self.cfg = connector.config
        self.worker = connector.worker
        self.partitions = partitions
        self.m = Migration(connector)
        self.seen: set[str] = set()
        self.topics: list[str] = []
        self.regex: str | None = None
        self.key_used = True
        self.data_stream = False
        self.dlq: str | None = None
        self.tolerance = "none"
        self.registry: str | None = None
        self.formats: dict[str, str] = {}
        """The key and value formats chosen, by side."""

    # ------------------------------------------------------------------ helpers

    def get(self, option: str) -> str | None:
        self.seen.add(option)
        value = self.cfg.get(option)
        return None if value is None or value.strip() == "" else value.strip()

    def lower(self, option: str) -> str:
        return (self.get(option) or DEFAULTS.get(option, "")).lower()

    def given(self, option: str) -> bool:
        return option in self.cfg and self.cfg[option].strip() != ""

    def shown(self, option: str) -> str | None:
        if option not in self.cfg:
            return None
        if is_secret(option):
            return "***"
        value = self.cfg[option]
        if option == "connection.url" or option.endswith("schema.registry.url"):
            return ",".join(masked_url(u) for u in value.split(","))
        return value

    def row(
        self,
        option: str,
        status: str,
        setting: str = "",
        note: str = "",
        value: str | None = None,
    ) -> None:
        self.seen.add(option)
        shown = value if value is not None else self.shown(option)
        if shown is None and option in DEFAULTS:
            shown = f"({DEFAULTS[option]})"
        self.m.rows.append(Row(option, shown, status, setting, note))

    def set(self, key: str, value: Any) -> str:
        """Set the YAML key `key`; returns `NAME=value` for the table."""
        self.m.settings[key] = value
        if isinstance(value, dict):
            text = ",".join(f"{k}:{v}" for k, v in value.items())
        elif isinstance(value, list):
            text = "[...]"
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        return f"{key.upper()}={text}"

    def secret(self, env: str, option: str) -> str:
        self.m.environment[env] = option
        return f"{env} (environment)"

    # ------------------------------------------------------------------ the run

    def run(self) -> Migration:
        self.key_used = self.keys_read()
        self.framework()
        self.topics_()
        self.errors()
        self.converters()
        self.connection()
        self.tls()
        self.batching()
        self.documents()
        self.nulls()
        smts.translate(self)
        self.clients()
        self.leftovers()
        return self.m

    def keys_read(self) -> bool:
        """Whether the ids are the keys (else the keys are never read)."""
        cfg = self.cfg
        method = (cfg.get("write.method") or "insert").strip().lower()
        if _flag(cfg.get("use.autogenerated.ids")) and method == "insert":
            return False
        if _flag(cfg.get("key.ignore")):
            return False
        topics = _items(cfg.get("topics"))
        per_topic = _items(cfg.get("topic.key.ignore"))
        return not (topics and per_topic and set(topics) <= set(per_topic))

    # ------------------------------------------------------------------ framework

    def framework(self) -> None:
        name = self.c.name
        self.seen.add("name")
        if name:
            group = f"es-sink-{name}"
            setting = self.set("kafka_group_id", group)
            self.row(
                "name",
                MAPPED,
                setting,
                f"the connector's offsets are in group connect-{name}: es-sink migrate "
                f"offsets --from-group connect-{name} copies them to {group}",
                value=name,
            )
        cls = self.get("connector.class")
        if cls is None or cls in CONNECTOR_CLASSES:
            self.row("connector.class", DEFAULT if cls is None else MAPPED, "the flow")
        else:
            self.row(
                "connector.class",
                UNSUPPORTED,
                note="migrate config knows Confluent's Elasticsearch sink "
                "(io.confluent.connect.elasticsearch.ElasticsearchSinkConnector) only",
            )
        tasks = self.get("tasks.max")
        if tasks is not None:
            n = int(tasks) if tasks.isdigit() and int(tasks) > 0 else 1
            run = "python -m bytewax.run flows.es_sink" + (f" -w {n}" if n > 1 else "")
            more = f" (or {n} processes, -i/-a)" if n > 1 else ""
            self.m.comments.append(
                f"tasks.max={tasks}: run `{run}`{more}; a Kafka partition is read by one worker"
            )
            self.row(
                "tasks.max",
                MAPPED,
                f"-w {n}",
                "workers (or processes) are command-line arguments of `python -m bytewax.run` "
                "(docs/guarantees.md, Scaling); the YAML's header says so",
            )

    def topics_(self) -> None:
        topics = _items(self.get("topics"))
        regex = self.get("topics.regex")
        if topics:
            self.topics = topics
            self.row("topics", MAPPED, self.set("kafka_topics", ",".join(topics)))
        if regex:
            converted = java_regex(regex)
            if converted is None:
                self.row(
                    "topics.regex",
                    UNSUPPORTED,
                    note="Python's re cannot read this Java regex; list the topics "
                    "(kafka_topics) or write the regex in Python's syntax",
                )
            else:
                self.regex = converted
                note = "matched whole, as Kafka Connect does; DLQ_TOPIC and __ topics excluded"
                self.row("topics.regex", MAPPED, self.set("kafka_topics_regex", converted), note)
        if not topics and not regex:
            self.row(
                "topics", UNSUPPORTED, note="the connector names no topics (topics or topics.regex)"
            )

    # ------------------------------------------------------------------ errors

    def errors(self) -> None:
        """errors.tolerance, the dead-letter topic and the connector's own drop/ignore
        options become one ERRORS_TOLERANCE: the flow has one policy for every failure."""
        tolerance = self.lower("errors.tolerance")
        dlq = self.get("errors.deadletterqueue.topic.name")
        log = _flag(self.get("errors.log.enable"))
        reporter = bool(dlq) or log
        drop_invalid = _flag(self.get("drop.invalid.message"))
        malformed = self.lower("behavior.on.malformed.documents")
        tolerant = tolerance == "all"
        self.dlq = dlq
        # Which failures the connector skips (instead of stopping its task). A report with
        # errors.tolerance=none exceeds the tolerance, so with a reporter only "all" skips.
        skips = {
            "records its converters or SMTs fail on": tolerant,
            "records it cannot make a document of (drop.invalid.message)": drop_invalid
            and (tolerant or not reporter),
            "documents Elasticsearch refuses as malformed (behavior.on.malformed.documents)": (
                malformed in ("ignore", "warn") and (tolerant or not reporter)
            ),
        }
        skipped = [what for what, yes in skips.items() if yes]
        stopped = [what for what, yes in skips.items() if not yes]
        if dlq:
            self.row("errors.deadletterqueue.topic.name", MAPPED, self.set("dlq_topic", dlq))
        if not skipped:
            policy, status = "none", MAPPED
            note = "the connector's task stops on a failed record, and the flow stops on it"
            if not tolerant and (dlq or log):
                note += " (the connector also reports it first)"
        elif not stopped:
            policy = "all" if dlq else "log"
            status = MAPPED
            note = (
                "the connector skips every failed record"
                + (", and dead-letters it" if dlq else "")
                + "; the flow too. What Elasticsearch refuses for other reasons (after its "
                "retries) is skipped by the flow too, where the connector's task stops"
            )
        else:
            policy, status = "none", UNSUPPORTED
            note = (
                f"the connector skips {_and(skipped)}, but stops on {_and(stopped)}; "
                "the flow has one policy for every failure (ERRORS_TOLERANCE): nearest is none "
                "(stops on each, nothing skipped silently), or all/log to skip them all"
            )
        if policy != "none":
            setting = self.set("errors_tolerance", policy)
        else:
            setting = "ERRORS_TOLERANCE=none"
        if status == MAPPED and policy == "none" and not self.given("errors.tolerance"):
            status = DEFAULT
        self.row("errors.tolerance", status, setting, note)
        self.tolerance = policy
        for option, what in (
            ("drop.invalid.message", "records it cannot make a document of"),
            ("behavior.on.malformed.documents", "documents Elasticsearch refuses as malformed"),
        ):
            if self.given(option):
                self.row(option, status, setting, f"{what}: see errors.tolerance")
        if self.given("errors.log.enable"):
            if policy == "log":
                self.row(
                    "errors.log.enable", MAPPED, setting, "one WARNING line per skipped record"
                )
            elif log and policy == "all":
                self.row(
                    "errors.log.enable",
                    NO_EFFECT,
                    note="with a dead-letter topic the flow logs no line per record: the dead "
                    "letter holds the reason (es-sink dlq inspect)",
                )
            else:
                self.row("errors.log.enable", NO_EFFECT if log else DEFAULT)
        if self.given("errors.log.include.messages"):
            if policy == "log" and _flag(self.get("errors.log.include.messages")):
                self.row("errors.log.include.messages", MAPPED, self.set("errors_log_values", True))
            else:
                self.row(
                    "errors.log.include.messages", NO_EFFECT, note="only with ERRORS_TOLERANCE=log"
                )
        if self.given("errors.deadletterqueue.context.headers.enable"):
            on = _flag(self.get("errors.deadletterqueue.context.headers.enable"))
            self.row(
                "errors.deadletterqueue.context.headers.enable",
                MAPPED if on else NO_EFFECT,
                "always on",
                "the flow's dead letters always carry __connect.errors.topic, .partition, "
                ".offset, .stage, .exception.class.name and .exception.message (stage names "
                "are the flow's: deserialize, transform, index)",
            )
        for option in (
            "errors.retry.timeout",
            "errors.retry.delay.max.ms",
            "errors.deadletterqueue.topic.replication.factor",
        ):
            if self.given(option):
                self.row(option, NO_EFFECT, note=NO_EFFECT_OPTIONS[option])

    # ------------------------------------------------------------------ converters

    def converter(self, side: str) -> tuple[str | None, dict[str, str], str]:
        """(class, its options, where they came from) of the key or value converter."""
        prefix = f"{side}.converter."
        cls = self.get(f"{side}.converter")
        if cls is not None:
            opts = {k[len(prefix) :]: v for k, v in self.cfg.items() if k.startswith(prefix)}
            return cls, opts, "connector"
        cls = (self.worker.get(f"{side}.converter") or "").strip() or None
        opts = {k[len(prefix) :]: v for k, v in self.worker.items() if k.startswith(prefix)}
        return cls, opts, "worker"

    def converters(self) -> None:
        for side in ("value", "key"):
            cls, opts, origin = self.converter(side)
            for k in opts:
                self.seen.add(f"{side}.converter.{k}")
            option = f"{side}.converter" if origin == "connector" else f"worker {side}.converter"
            self.format(side, cls, opts, option, cls, origin)

    def header_converter(self, version_header: str | None) -> None:
        """header.converter decides what the connector reads of `version_header` (the
        header whose number versions its writes, when it does): the flow reads that
        header's bytes as UTF-8 decimal digits."""
        header = self.get("header.converter")
        if header is None:
            return
        short = header.rsplit(".", 1)[-1]
        if header.endswith("SimpleHeaderConverter"):
            self.row("header.converter", DEFAULT)
        elif version_header is None:
            self.row(
                "header.converter",
                NO_EFFECT,
                note="no header the connector reads decides what it writes",
            )
        elif short == "StringConverter":
            self.row(
                "header.converter",
                MAPPED,
                f"VERSION=header:{version_header}",
                "the version header's UTF-8 text, which the flow reads too",
            )
        else:
            self.row(
                "header.converter",
                UNSUPPORTED,
                note=f"the connector reads the version header {version_header} through "
                f"{short}, which does not give the header's text as it is: its versions (or "
                "its task failures on a header it cannot read as a number) differ from the "
                "flow's, which reads the header's bytes as UTF-8 decimal digits; nearest: "
                "SimpleHeaderConverter or StringConverter on the connector before the switch",
            )
        for k in self.cfg:
            if k.startswith("header.converter."):
                self.row(k, NO_EFFECT)

    def format(
        self,
        side: str,
        cls: str | None,
        opts: dict[str, str],
        option: str,
        shown: str | None,
        origin: str,
    ) -> None:
        key_side = side == "key"
        setting_key = f"{side}_format"
        if cls is None and key_side and not self.key_used:
            self.row(
                f"{side}.converter",
                NO_EFFECT,
                self.set(setting_key, "bytes"),
                "not in the connector's configuration (the worker's applies), and keys are "
                "not read (the ids are not keys): bytes never fails to decode",
                value="(the worker's)",
            )
            return
        if cls is None:
            assumed = "string" if key_side else "json"
            self.row(
                f"{side}.converter",
                UNSUPPORTED,
                self.set(setting_key, assumed),
                "not in the connector's configuration: the worker's converter applies, which "
                f"this configuration does not show; assumed {assumed} (give --worker-config "
                "with the worker's properties)",
                value="(the worker's)",
            )
            return
        fmt = CONVERTERS.get(cls)
        if cls == JSON_CONVERTER:
            schemas = _flag(opts.get("schemas.enable"), default=True)
            fmt = "connect-json" if schemas else "json"
        if fmt is None:
            if key_side and not self.key_used:
                self.row(
                    option,
                    MAPPED,
                    self.set(setting_key, "bytes"),
                    "keys are not read (the ids are not keys): bytes never fails to decode",
                    value=shown,
                )
            else:
                why = (
                    "the flow has no converter for Kafka's binary numbers"
                    if cls in NUMERIC_CONVERTERS
                    else f"the flow has no converter for {cls}"
                )
                self.row(
                    option,
                    UNSUPPORTED,
                    note=f"{why}; nearest: a python transform decoding the bytes (KEY_FORMAT"
                    "=bytes gives them base64)"
                    if key_side
                    else why,
                    value=shown,
                )
            self.converter_options(side, opts, fmt, origin)
            return
        self.formats[side] = fmt
        if key_side and not self.key_used and fmt != "bytes":
            self.row(
                option,
                MAPPED,
                self.set(setting_key, "bytes"),
                f"keys are not read (the ids are not keys): bytes never fails to decode, "
                f"where {fmt} would dead-letter a key it cannot read",
                value=shown,
            )
            self.converter_options(side, opts, fmt, origin, ignored=True)
            return
        if key_side and fmt == "bytes" and self.key_used:
            self.row(
                option,
                UNSUPPORTED,
                self.set(setting_key, "bytes"),
                "the connector refuses a bytes key as a document id (a DataException for "
                "every keyed record); the flow dead-letters such a record too, with that "
                "reason, rather than index it under an id the connector never wrote. "
                "Nearest: key.ignore=true ids (doc_id: coordinates), or StringConverter if "
                "the keys are UTF-8 text",
                value=shown,
            )
            self.converter_options(side, opts, fmt, origin)
            return
        notes = {
            "connect-json": "the JsonConverter envelope {schema, payload}; Decimal fields "
            "become decimal strings and Date fields ISO dates, where the connector writes "
            "numbers (a double, a day count)",
            "json": "schemaless JSON" + ("" if key_side else ": the value must be an object"),
            "string": "UTF-8 text (invalid UTF-8 is a dead letter, where Java replaces it)"
            + ("" if key_side else f", wrapped as {{{self.value_field()}: text}}"),
            "bytes": "base64" + ("" if key_side else f", wrapped as {{{self.value_field()}: ...}}"),
            "avro": "through the Schema Registry; bytes become base64, decimals decimal "
            "strings, dates and timestamps ISO text, where the connector writes numbers",
            "json-schema": "through the Schema Registry",
            "protobuf": "through the Schema Registry, as proto3 JSON",
        }
        default = fmt == ("string" if key_side else "json")
        setting = self.set(setting_key, fmt) if not default else f"{setting_key.upper()}={fmt}"
        if not key_side and fmt in ("string", "bytes"):
            notes[fmt] += (
                "; the connector writes such a value as a JSON string, which Elasticsearch "
                "refuses unless an SMT (HoistField) wraps it"
            )
        self.row(option, MAPPED, setting, notes[fmt], value=shown)
        self.converter_options(side, opts, fmt, origin)

    def value_field(self) -> str:
        return str(self.m.settings.get("value_field", "message"))

    def converter_options(
        self, side: str, opts: dict[str, str], fmt: str | None, origin: str, ignored: bool = False
    ) -> None:
        prefix = f"{side}.converter." if origin == "connector" else f"worker {side}.converter."
        for name, value in opts.items():
            option = prefix + name
            shown = "***" if is_secret(name) else value
            if ignored:
                self.row(option, NO_EFFECT, note="keys are not read", value=shown)
            elif name == "schemas.enable":
                self.row(option, MAPPED, f"{side.upper()}_FORMAT={fmt}", value=shown)
            elif name == "schema.registry.url":
                self.registry_url(side, option, value)
            elif name in ("basic.auth.user.info", "schema.registry.basic.auth.user.info"):
                env = self.secret("SCHEMA_REGISTRY_CONFIG_BASIC_AUTH_USER_INFO", option)
                self.row(option, MAPPED, env, "user:password for the Schema Registry", value="***")
            elif name == "basic.auth.credentials.source":
                if value.upper() in ("USER_INFO", "URL"):
                    conf = dict(self.m.settings.get("schema_registry_config", {}))
                    conf["basic.auth.credentials.source"] = value.upper()
                    self.row(option, MAPPED, self.set("schema_registry_config", conf), value=value)
                else:
                    self.row(
                        option,
                        UNSUPPORTED,
                        note="the flow's registry client takes USER_INFO or URL credentials only",
                        value=value,
                    )
            elif name == "bearer.auth.token":
                env = self.secret("SCHEMA_REGISTRY_CONFIG_BEARER_AUTH_TOKEN", option)
                self.row(option, MAPPED, env, value="***")
            elif name == "bearer.auth.credentials.source":
                if value.upper() == "STATIC_TOKEN":
                    conf = dict(self.m.settings.get("schema_registry_config", {}))
                    conf["bearer.auth.credentials.source"] = "STATIC_TOKEN"
                    self.row(option, MAPPED, self.set("schema_registry_config", conf), value=value)
                else:
                    self.row(
                        option,
                        UNSUPPORTED,
                        note="only STATIC_TOKEN bearer authentication is carried over",
                        value=value,
                    )
            elif name.startswith("schema.registry.ssl."):
                self.row(
                    option,
                    UNSUPPORTED,
                    note="the registry client reads PEM files: set schema_registry_config "
                    "ssl.ca.location (and ssl.certificate.location, ssl.key.location) to "
                    "PEM exports of the Java stores",
                    value=shown,
                )
            elif name in CONVERTER_NO_EFFECT:
                self.row(
                    option,
                    NO_EFFECT,
                    note="decides nothing about how a record is read",
                    value=shown,
                )
            else:
                self.row(
                    option,
                    UNSUPPORTED,
                    note="a converter option migrate config does not know",
                    value=shown,
                )

    def registry_url(self, side: str, option: str, url: str) -> None:
        masked = ",".join(masked_url(u) for u in url.split(","))
        if self.registry is not None and self.registry != url:
            self.row(
                option,
                UNSUPPORTED,
                note="the key and value converters name different Schema Registries; the flow "
                "reads one (SCHEMA_REGISTRY_URL)",
                value=masked,
            )
            return
        self.registry = url
        if masked != url:  # credentials in the URL: the URL is a secret
            env = self.secret("SCHEMA_REGISTRY_URL", option)
            self.row(option, MAPPED, env, "it holds credentials", value=masked)
            return
        self.row(option, MAPPED, self.set("schema_registry_url", url), value=url)

    # ------------------------------------------------------------------ connection

    def connection(self) -> None:
        raw = self.get("connection.url")
        if raw is None:
            self.row("connection.url", UNSUPPORTED, note="required by the connector; not given")
        else:
            urls = [u.strip().rstrip("/") for u in raw.split(",") if u.strip()]
            https = any(u.lower().startswith("https://") for u in urls)
            hosts, user, password = [], None, None
            notes = []
            for u in urls:
                if "://" not in u:
                    u = "http://" + u
                    notes.append("a URL without a scheme is http")
                if https and u.lower().startswith("http://"):
                    u = "https://" + u[len("http://") :]
                    notes.append("every URL is https, as the connector makes them when one is")
                parts = urllib.parse.urlsplit(u)
                if parts.username is not None:
                    user = urllib.parse.unquote(parts.username)
                    password = parts.password is not None
                    u = masked_url(u, drop=True)
                hosts.append(u)
            note = "; ".join(dict.fromkeys(notes))
            setting = self.set("es_hosts", ",".join(hosts))
            if user is not None:
                self.set("es_username", user)
                setting += f", ES_USERNAME={user}"
                if password:
                    setting += ", " + self.secret("ES_PASSWORD", "connection.url's password")
                note = "; ".join(
                    filter(None, [note, "the URL's credentials moved to ES_USERNAME, ES_PASSWORD"])
                )
            self.row("connection.url", MAPPED, setting, note)
        user = self.get("connection.username")
        if user is not None:
            self.row("connection.username", MAPPED, self.set("es_username", user))
        if self.given("connection.password"):
            env = self.secret("ES_PASSWORD", "connection.password")
            self.row("connection.password", MAPPED, env, "never written to the file")
        if self.given("connection.compression"):
            on = _flag(self.get("connection.compression"))
            self.row(
                "connection.compression",
                MAPPED if on else DEFAULT,
                self.set("es_compress", True) if on else "",
            )
        for option in ("kerberos.user.principal", "kerberos.keytab.path"):
            if self.given(option):
                self.row(
                    option,
                    UNSUPPORTED,
                    note="the flow has no Kerberos (SPNEGO) "
                    "authentication; nearest: an API key (ES_API_KEY) or basic auth",
                )
        if self.given("proxy.host"):
            self.row(
                "proxy.host",
                UNSUPPORTED,
                note="the flow reaches Elasticsearch directly; nearest: a reverse proxy's URL "
                "in ES_HOSTS",
            )
        for option in ("proxy.port", "proxy.username", "proxy.password"):
            if self.given(option):
                status = UNSUPPORTED if self.given("proxy.host") else NO_EFFECT
                self.row(option, status, note="see proxy.host")
        if self.given("read.timeout.ms"):
            ms = _int(self.get("read.timeout.ms"), 3000)
            seconds = max(ms / 1000, 0.1)
            self.row(
                "read.timeout.ms",
                MAPPED,
                self.set("es_request_timeout_s", _number(seconds)),
                "the flow's timeout is per request (a bulk timed out is sent again once "
                "Elasticsearch no longer runs it)",
            )

    def tls(self) -> None:
        protocol = self.lower("elastic.security.protocol")
        https = {k: v for k, v in self.cfg.items() if k.startswith("elastic.https.")}
        if self.given("elastic.security.protocol"):
            self.row(
                "elastic.security.protocol",
                MAPPED if protocol == "ssl" else DEFAULT,
                "https:// URLs in ES_HOSTS" if protocol == "ssl" else "",
            )
        kind = (https.get("elastic.https.ssl.truststore.type") or "JKS").upper()
        for option, value in https.items():
            name = option[len("elastic.https.") :]
            self.seen.add(option)
            if name == "ssl.truststore.location":
                if kind == "PEM":
                    self.row(option, MAPPED, self.set("es_ca_certs", value))
                else:
                    how = (
                        f"openssl pkcs12 -in {value} -nokeys -out ca.pem"
                        if kind == "PKCS12"
                        else f"keytool -exportcert -rfc -keystore {value} -alias <alias> > ca.pem"
                    )
                    self.row(
                        option,
                        UNSUPPORTED,
                        note=f"a {kind} truststore: the flow reads "
                        f"a PEM CA bundle; export it (`{how}`) and set es_ca_certs",
                    )
            elif name in ("ssl.truststore.type", "ssl.truststore.password"):
                self.row(
                    option,
                    DEFAULT if kind == "PEM" else NO_EFFECT,
                    note="see ssl.truststore.location",
                )
            elif name == "ssl.truststore.certificates":
                self.row(
                    option,
                    UNSUPPORTED,
                    note="write the PEM certificates to a file and set es_ca_certs to it",
                )
            elif name.startswith(("ssl.keystore.", "ssl.key.")):
                self.row(
                    option,
                    UNSUPPORTED,
                    note="the flow presents no client certificate; "
                    "nearest: an API key (ES_API_KEY) or basic auth",
                )
            elif name == "ssl.endpoint.identification.algorithm":
                if value.strip() == "":
                    self.row(
                        option,
                        UNSUPPORTED,
                        note="the connector checks the certificate "
                        "but not the host name; the flow checks both, or neither "
                        "(es_verify_certs: false), or pins the certificate "
                        "(es_ssl_fingerprint)",
                        value='""',
                    )
                else:
                    self.row(option, DEFAULT, note="the flow verifies the host name")
            else:
                self.row(
                    option,
                    NO_EFFECT,
                    note="the flow negotiates TLS 1.2 or 1.3 with Python's defaults",
                )

    def batching(self) -> None:
        if self.given("batch.size"):
            n = max(_int(self.get("batch.size"), 2000), 1)
            self.row("batch.size", MAPPED, self.set("bulk_max_actions", n))
        if self.given("bulk.size.bytes"):
            n = _int(self.get("bulk.size.bytes"), 5 * 1024 * 1024)
            if n < 0:
                self.row(
                    "bulk.size.bytes",
                    NO_EFFECT,
                    note="no byte limit in the connector; "
                    "the flow keeps one (BULK_MAX_BYTES, 8 MiB)",
                )
            else:
                self.row("bulk.size.bytes", MAPPED, self.set("bulk_max_bytes", max(n, 1024)))
        if self.given("linger.ms"):
            n = max(_int(self.get("linger.ms"), 1), 0)
            self.row(
                "linger.ms",
                MAPPED,
                self.set("bulk_linger_ms", n),
                "the connector flushes every linger.ms; the flow sends a partition's "
                "buffer once its oldest action is this old",
            )
        if self.given("max.in.flight.requests"):
            n = max(_int(self.get("max.in.flight.requests"), 5), 1)
            self.row(
                "max.in.flight.requests",
                MAPPED,
                self.set("es_max_in_flight", n),
                "per process; each sink partition has one bulk in flight, so writes "
                "to one document stay in order",
            )
        if self.given("retry.backoff.ms"):
            n = max(_int(self.get("retry.backoff.ms"), 100), 1)
            setting = self.set("es_retry_initial_ms", n)
            if n > 10_000:
                setting += ", " + self.set("es_retry_max_ms", n)
            self.row("retry.backoff.ms", MAPPED, setting, "full jitter, doubling, as the connector")
        for option, why in NO_EFFECT_OPTIONS.items():
            if option.startswith("errors."):
                continue
            if self.given(option):
                self.row(option, NO_EFFECT, note=why)

    # ------------------------------------------------------------------ documents

    def documents(self) -> None:
        method = self.lower("write.method")
        autogen = _flag(self.get("use.autogenerated.ids")) and method == "insert"
        key_ignore = _flag(self.get("key.ignore"))
        per_topic = _items(self.get("topic.key.ignore"))
        self.data_stream = False
        usage = self.lower("external.resource.usage")
        ds_type = self.get("data.stream.type")
        ds_dataset = self.get("data.stream.dataset")
        if ds_type and ds_type.lower() != "none" and ds_dataset:
            self.data_stream = True
        if usage in ("datastream", "alias_datastream"):
            self.data_stream = True
        # ids
        sep = self.set("doc_id_separator", "+")
        if per_topic and not key_ignore:
            if self.topics and set(self.topics) <= set(per_topic):
                key_ignore = True
                self.row(
                    "topic.key.ignore",
                    MAPPED,
                    "DOC_ID=coordinates (see key.ignore)",
                    "every topic of the connector ignores its key",
                )
            else:
                self.row(
                    "topic.key.ignore",
                    UNSUPPORTED,
                    note="the flow has one DOC_ID for all its topics; nearest: two flows, "
                    f"one for {', '.join(per_topic)} with doc_id: coordinates and one for the "
                    "other topics with doc_id: key (each its own kafka_topics and group)",
                )
        elif per_topic:
            self.row("topic.key.ignore", DEFAULT, note="key.ignore=true covers every topic")
        self.key_used = not (key_ignore or autogen)
        if autogen:
            self.row(
                "use.autogenerated.ids",
                MAPPED,
                self.set("doc_id", "none"),
                "Elasticsearch generates the ids: a replay duplicates documents, as with the "
                "connector",
            )
            if self.given("key.ignore"):
                self.row("key.ignore", NO_EFFECT, note="use.autogenerated.ids sends no id")
        else:
            if self.given("use.autogenerated.ids"):
                status = NO_EFFECT if _flag(self.get("use.autogenerated.ids")) else DEFAULT
                self.row("use.autogenerated.ids", status, note="only with write.method=insert")
            if key_ignore:
                self.row(
                    "key.ignore",
                    MAPPED,
                    f"{self.set('doc_id', 'coordinates')}, {sep}",
                    "the id is topic+partition+offset (the topic as the record has it after "
                    "its SMTs, a router's name included, not the index name)",
                )
            else:
                kinds = (
                    "the id is the key's string form (a string as it is, an integer in "
                    "decimal); any other key (a float, a boolean, a struct, a map, an array) "
                    "is a failed record, as the connector's DataException "
                    "(ES_INDEX_NAMING=connect)"
                )
                note = (
                    kinds + "; a record without a key is a failed record too, as the "
                    "connector's DataException, which the error policy decides (see "
                    "errors.tolerance); a tombstone without a key is skipped under "
                    "behavior.on.null.values=delete, as the connector skips it"
                )
                setting = f"DOC_ID=key, {sep}, {self.set('on_null_key', 'fail')}"
                self.row("key.ignore", MAPPED, setting, note)
        # write method
        if method == "upsert":
            inflight = _int(self.cfg.get("max.in.flight.requests"), 5)
            retries = min(max(inflight, 1), 5)
            setting = (
                f"{self.set('write_method', 'upsert')}, {self.set('es_retry_on_conflict', retries)}"
            )
            self.row(
                "write.method",
                MAPPED,
                setting,
                "doc_as_upsert: the record's document merged into the stored one, or created; "
                "retry_on_conflict as the connector's min(max.in.flight.requests, 5)",
            )
        elif method == "insert":
            what = "create (data streams)" if self.data_stream else "index"
            self.row("write.method", DEFAULT, f"WRITE_METHOD={what.split()[0]}")
        else:
            self.row("write.method", UNSUPPORTED, note="expected insert or upsert")
        # versions
        header = self.get("external.version.header")
        versioned = self.key_used and method == "insert" and not self.data_stream
        self.header_converter(header if header and versioned else None)
        if header and versioned:
            self.row(
                "external.version.header",
                MAPPED,
                self.set("version", f"header:{header}"),
                "the header's decimal digits are the external version of index and delete",
            )
        elif header:
            self.row(
                "external.version.header",
                NO_EFFECT,
                note="the connector versions only keyed inserts and deletes to indices",
            )
        elif versioned:
            self.offset_versions()
        # index names
        self.index_names(usage)
        # mapping
        self.schemas()
        if self.given("compact.map.entries"):
            compact = _flag(self.get("compact.map.entries"), default=True)
            if compact:
                self.row("compact.map.entries", DEFAULT, note="maps are JSON objects")
            else:
                self.row(
                    "compact.map.entries",
                    UNSUPPORTED,
                    note="the flow writes maps as JSON objects, not arrays of {key, value}",
                )

    def offset_versions(self) -> None:
        """The connector versions a keyed insert or delete by its offset. VERSION=offset is
        that; the flow refuses it where offsets do not order a document's writes (a topic
        of several partitions with key ids, several topics into one index)."""
        counts = self.partitions or {}
        known = bool(self.topics) and all(t in counts for t in self.topics)
        single = known and all(counts[t] == 1 for t in self.topics)
        option = "external.version.header"
        value = "(not set: the record's offset)"
        if single and not self.regex:
            self.row(
                option,
                MAPPED,
                self.set("version", "offset"),
                "every topic has one partition: each document is versioned by its record's "
                "offset, as the connector does",
                value=value,
            )
            return
        why = (
            "a topic has more than one partition"
            if known
            else "its topics' partition counts are not known (give --bootstrap-servers)"
        )
        self.row(
            option,
            MAPPED,
            "VERSION=none",
            "the connector versions each keyed document by its record's offset; the flow "
            "refuses VERSION=offset where " + why + ", and instead keeps every write to one "
            "id in order (one sink partition per id, in offset order), which leaves the same "
            "documents. An index or delete over a document the connector versioned works: "
            "Elasticsearch continues its version",
            value=value,
        )

    def index_names(self, usage: str) -> None:
        naming = self.set("es_index_naming", "connect")
        mapping = _pairs(self.get("topic.to.external.resource.mapping"))
        legacy = _pairs(self.get("topic.index.map"))
        if usage != "disabled":
            if usage not in ("index", "datastream", "alias_index", "alias_datastream"):
                self.row("external.resource.usage", UNSUPPORTED, note="unknown value")
            elif not mapping:
                self.row(
                    "external.resource.usage",
                    UNSUPPORTED,
                    note="needs topic.to.external.resource.mapping",
                )
            else:
                ds = usage.endswith("datastream")
                setting = self.set("es_index_map", mapping)
                if ds:
                    setting += ", " + self.set("es_data_stream", True)
                self.row(
                    "external.resource.usage",
                    MAPPED,
                    "ES_INDEX_MAP" + (", ES_DATA_STREAM=true" if ds else ""),
                )
                self.row(
                    "topic.to.external.resource.mapping",
                    MAPPED,
                    setting,
                    "each topic's existing index, alias or data stream; a topic outside the "
                    "map (a new one under topics.regex) writes to ES_INDEX, where the "
                    "connector fails",
                )
                self.data_stream_options(ds_given=False)
                return
        elif mapping:
            self.row(
                "topic.to.external.resource.mapping",
                NO_EFFECT,
                note="only with external.resource.usage",
            )
        if self.given("external.resource.usage") and usage == "disabled":
            self.row("external.resource.usage", DEFAULT)
        if legacy:
            self.row(
                "topic.index.map",
                MAPPED,
                f"{self.set('es_index_map', legacy)}, {naming}",
                "the connector's 10.x option (removed in 11): each topic's index",
            )
        if self.data_stream:
            self.data_stream_options(ds_given=True)
            return
        self.row(
            "(index names)",
            MAPPED,
            f"ES_INDEX={{topic}}, {naming}",
            "the index is the topic (after its transforms) lower-cased, cut to 255 "
            "characters, a leading - or _ dropped, . and .. spelled dot, dotdot",
            value="(the topic)",
        )
        self.data_stream_options(ds_given=False)

    def data_stream_options(self, ds_given: bool) -> None:
        kind = self.get("data.stream.type")
        dataset = self.get("data.stream.dataset")
        namespace = self.get("data.stream.namespace") or "${topic}"
        fields = _items(self.get("data.stream.timestamp.field"))
        if ds_given and kind and dataset:
            template = f"{kind.lower()}-{dataset}-" + namespace.replace("${topic}", "{topic}")
            setting = f"{self.set('es_data_stream', True)}, {self.set('es_index', template)}"
            exact: dict[str, str] = {}
            for topic in self.topics:
                name = connect_data_stream_name(kind, dataset, namespace, topic)
                if name != template.replace("{topic}", topic).lower():
                    exact[topic] = name
            note = (
                "records go to data stream {type}-{dataset}-{namespace}, as create with the "
                "connector's ids; ES_INDEX_NAMING=connect lower-cases the topic"
            )
            if exact:
                merged = {**self.m.settings.get("es_index_map", {}), **exact}
                setting += ", " + self.set("es_index_map", merged)
                note += "; topics whose namespace the connector cuts to 100 characters are mapped"
            elif self.regex and "${topic}" in namespace:
                note += (
                    "; a topic of more than 100 characters under topics.regex keeps its whole "
                    "name, where the connector cuts the namespace to 100"
                )
            self.row("data.stream.type", MAPPED, setting, note)
            self.row("data.stream.dataset", MAPPED, "ES_INDEX")
            if self.given("data.stream.namespace"):
                self.row("data.stream.namespace", MAPPED, "ES_INDEX")
        else:
            for option in ("data.stream.type", "data.stream.dataset", "data.stream.namespace"):
                if self.given(option):
                    none = option == "data.stream.type" and (kind or "").lower() == "none"
                    self.row(
                        option,
                        DEFAULT if none else NO_EFFECT,
                        note="" if none else "data streams need both type and dataset",
                    )
        if fields:
            if len(fields) == 1:
                self.row(
                    "data.stream.timestamp.field",
                    MAPPED,
                    self.set("es_timestamp_field", fields[0]),
                    "copied into @timestamp as it is (the connector copies its text) unless "
                    "the document has an @timestamp (the connector overwrites it)",
                )
            else:
                self.row(
                    "data.stream.timestamp.field",
                    UNSUPPORTED,
                    self.set("es_timestamp_field", fields[0]),
                    "the flow reads one field (the connector the first present); nearest: "
                    "the first, and a record without it is a failed record",
                )
        elif self.data_stream:
            self.row(
                "data.stream.timestamp.field",
                DEFAULT,
                "the record timestamp",
                "@timestamp is the record's timestamp (epoch ms), kept where the "
                "document has one (the connector overwrites it)",
                value="(the record timestamp)",
            )

    def schemas(self) -> None:
        ignore = _flag(self.get("schema.ignore"))
        per_topic = _items(self.get("topic.schema.ignore"))
        all_ignored = ignore or (bool(self.topics) and set(self.topics) <= set(per_topic))
        if all_ignored:
            self.row(
                "schema.ignore",
                DEFAULT if ignore else MAPPED,
                note="Elasticsearch maps new fields dynamically, or an index template "
                "does (ES_INDEX_TEMPLATE_FILE), as with the connector",
            )
            if per_topic:
                self.row("topic.schema.ignore", DEFAULT)
            return
        self.row(
            "schema.ignore",
            UNSUPPORTED,
            note="the connector makes each new index's mapping from the record schema; the "
            "flow makes no mapping. The indices the connector made keep theirs; for an index "
            "made from now on (a new topic, a new day), install the mapping as an index "
            "template: ES_INDEX_TEMPLATE_FILE with `GET <index>/_mapping` of an existing one",
            value=self.shown("schema.ignore") or "(false)",
        )
        if per_topic:
            self.row("topic.schema.ignore", UNSUPPORTED, note="see schema.ignore")

    def nulls(self) -> None:
        """behavior.on.null.values: a tombstone is skipped, deletes by key, or is a failed
        record (a DataException, which drop.invalid.message may skip)."""
        behavior = self.lower("behavior.on.null.values")
        tolerant = self.tolerance != "none"
        if behavior == "delete":
            if self.key_used:
                self.row(
                    "behavior.on.null.values",
                    MAPPED,
                    self.set("on_null_value", "delete"),
                    "a tombstone deletes the document of its key (one without a key is "
                    "skipped, as the connector skips it)"
                    + (
                        " (versioned as the writes are)"
                        if "version" in self.m.settings
                        else ", in order with the writes of its key (the connector versions "
                        "a delete by its offset)"
                    ),
                )
            else:
                self.row(
                    "behavior.on.null.values",
                    MAPPED,
                    "ON_NULL_VALUE=ignore",
                    "with ignored keys the connector deletes the id topic+partition+offset of "
                    "the tombstone itself, which holds nothing: the flow skips it",
                )
        elif behavior == "ignore":
            # The connector reports each skipped tombstone when it has a reporter (a
            # dead-letter topic or errors.log.enable); with errors.tolerance=none the
            # report exceeds the tolerance and stops its task.
            reporter = bool(self.dlq) or _flag(self.get("errors.log.enable"))
            if reporter and self.lower("errors.tolerance") != "all":
                self.row(
                    "behavior.on.null.values",
                    MAPPED,
                    self.set("on_null_value", "fail"),
                    "the connector reports a skipped tombstone ('Cannot write null valued "
                    "record.') to its "
                    + ("dead-letter topic" if self.dlq else "log")
                    + ", which exceeds errors.tolerance=none and stops its task: a tombstone "
                    "stops the flow too",
                )
            elif self.dlq:
                self.row(
                    "behavior.on.null.values",
                    MAPPED,
                    self.set("on_null_value", "dlq"),
                    "the connector skips a tombstone and reports it to its dead-letter topic "
                    "('Cannot write null valued record.'); set ignore to skip them without",
                )
            else:
                self.row(
                    "behavior.on.null.values", MAPPED, "ON_NULL_VALUE=ignore", "skipped and counted"
                )
        elif behavior == "fail":
            if tolerant:
                policy = "dlq" if self.dlq else "ignore"
                setting = (
                    self.set("on_null_value", policy)
                    if policy != "ignore"
                    else "ON_NULL_VALUE=ignore"
                )
                self.row(
                    "behavior.on.null.values",
                    MAPPED,
                    setting,
                    "a tombstone is a failed record, which the connector skips "
                    + ("and dead-letters" if self.dlq else "")
                    + " (errors.tolerance)",
                )
            else:
                self.row(
                    "behavior.on.null.values",
                    MAPPED,
                    self.set("on_null_value", "fail"),
                    "a tombstone stops the connector's task, and the flow",
                )
        else:
            self.row("behavior.on.null.values", UNSUPPORTED, note="expected ignore, delete or fail")

    # ------------------------------------------------------------------ clients

    def clients(self) -> None:
        worker_bootstrap = (self.worker.get("bootstrap.servers") or "").strip()
        override = self.get("consumer.override.bootstrap.servers")
        if override:
            self.row(
                "consumer.override.bootstrap.servers",
                MAPPED,
                self.set("kafka_bootstrap_servers", override),
            )
        elif worker_bootstrap:
            self.row(
                "worker bootstrap.servers",
                MAPPED,
                self.set("kafka_bootstrap_servers", worker_bootstrap),
                value=worker_bootstrap,
            )
        elif "kafka_bootstrap_servers" not in self.m.settings:
            self.m.comments.append(
                "kafka_bootstrap_servers: the worker's bootstrap.servers (not in the "
                "connector's configuration)"
            )
        worker_consumer = {
            k[len("consumer.") :]: v for k, v in self.worker.items() if k.startswith("consumer.")
        }
        for name, value in worker_consumer.items():
            if f"consumer.override.{name}" not in self.cfg:
                self.kafka_option(f"worker consumer.{name}", name, value, "consumer")
        for option, value in list(self.cfg.items()):
            if option.startswith("consumer.override.") and option not in self.seen:
                self.kafka_option(option, option[len("consumer.override.") :], value, "consumer")
            elif option.startswith("producer.override."):
                self.kafka_option(option, option[len("producer.override.") :], value, "producer")
            elif option.startswith("admin.override."):
                self.row(option, NO_EFFECT, note="the flow's admin clients are es-sink's tools")

    def kafka_option(self, option: str, name: str, value: str, kind: str) -> None:
        self.seen.add(option)
        shown = "***" if is_secret(name) else value
        conf = dict(self.m.settings.get("kafka_config", {}))

        def put(key: str, text: str, note: str = "") -> None:
            conf[key] = text
            self.row(
                option,
                MAPPED,
                self.set("kafka_config", conf).split("=")[0] + f"[{key}]",
                note,
                value=shown,
            )

        if kind == "producer":
            if name in PRODUCER_SAME:
                put(name, value, "the dead-letter producer's (client.id: every client's)")
            else:
                self.row(
                    option,
                    NO_EFFECT,
                    note="the dead-letter producer is idempotent and confirms every record",
                    value=shown,
                )
            return
        if name == "auto.offset.reset":
            if value.lower() in ("earliest", "latest"):
                self.row(
                    option, MAPPED, self.set("kafka_auto_offset_reset", value.lower()), value=shown
                )
            else:
                self.row(
                    option,
                    UNSUPPORTED,
                    note="the flow starts a partition without "
                    "committed offset at earliest or latest",
                    value=shown,
                )
        elif name == "group.id":
            self.row(
                option,
                MAPPED,
                f"--from-group {value}",
                "the connector's offsets are in this group (es-sink migrate offsets)",
                value=shown,
            )
        elif name == "bootstrap.servers":
            self.row(option, MAPPED, self.set("kafka_bootstrap_servers", value), value=shown)
        elif name == "sasl.jaas.config":
            m = re.search(r'username\s*=\s*"([^"]*)"', value)
            if m and re.search(r"(Plain|Scram)LoginModule", value):
                conf["sasl.username"] = m.group(1)
                self.set("kafka_config", conf)
                env = self.secret("KAFKA_CONFIG_SASL_PASSWORD", f"{option}'s password")
                self.row(option, MAPPED, f"KAFKA_CONFIG[sasl.username], {env}", value="***")
            else:
                self.row(
                    option,
                    UNSUPPORTED,
                    note="only PLAIN and SCRAM logins carry over "
                    "(librdkafka's sasl.username and sasl.password)",
                    value="***",
                )
        elif name in KAFKA_SAME:
            put(name, value)
        elif name in KAFKA_RENAMED:
            put(KAFKA_RENAMED[name], value, f"librdkafka's name for {name}")
        elif name in KAFKA_GROUP_ONLY:
            self.row(
                option,
                NO_EFFECT,
                note="the flow reads through assign(), never a group member",
                value=shown,
            )
        elif name == "ssl.truststore.location":
            self.row(
                option,
                UNSUPPORTED,
                note="librdkafka reads a PEM CA bundle: kafka_config ssl.ca.location",
                value=shown,
            )
        else:
            self.row(
                option,
                UNSUPPORTED,
                note="a Java client property without a librdkafka "
                "equivalent migrate config knows; see librdkafka's CONFIGURATION.md",
                value=shown,
            )

    def leftovers(self) -> None:
        for option in self.cfg:
            if option in self.seen:
                continue
            if option in DEFAULTS and self.cfg[option].strip().lower() == DEFAULTS[option]:
                self.row(option, DEFAULT)
                continue
            self.row(
                option,
                UNSUPPORTED,
                note="not an option migrate config knows (of the Elasticsearch sink or of "
                "Kafka Connect): check it by hand",
            )


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _int(value: str | None, default: int) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 3)


def _pairs(value: str | None) -> dict[str, str]:
    out = {}
    for item in _items(value):
        topic, sep, target = item.partition(":")
        if sep and topic.strip() and target.strip():
            out[topic.strip()] = target.strip()
    return out
