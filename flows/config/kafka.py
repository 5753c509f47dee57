"""Kafka source settings: read by flows/kafka/source.py; `librdkafka()` gives every Kafka client its
configuration (the source's consumers, the dead-letter producer, the start-up checks and
`es-sink`'s clients), each the pass-through settings of its own kind."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import field_validator, model_validator

from flows.config.fields import (
    KAFKA_CONFIG_PREFIX,
    Flag,
    Group,
    Items,
    OneOf,
    Pairs,
    Regex,
    setting,
)
from flows.errors import ConfigError

_RESERVED = ("group.id", "enable.auto.commit", "bootstrap.servers")

CLIENT_DEFAULTS: dict[str, Any] = {"metadata.recovery.rebootstrap.trigger.ms": 30_000}
"""Every client's. librdkafka drops the bootstrap brokers once it learned the cluster's, and
a broker in controlled shutdown can answer a metadata request with no broker at all: the
client then knows none, and by default looks at `bootstrap.servers` again only after 300 s
of failed metadata refreshes (a one-broker cluster's restart stalled the flow for minutes,
tests/integration/test_kafka_faults.py). 30 s here: a metadata request unanswered that long
also re-bootstraps, which resets every connection. librdkafka issue #5301 (open in 2.16.0)
describes an ordering of the same event after which the client never re-bootstraps."""


CONSUMER_ONLY = frozenset(
    {
        "group.id", "group.instance.id", "partition.assignment.strategy", "session.timeout.ms",
        "heartbeat.interval.ms", "group.protocol.type", "group.protocol",
        "group.remote.assignor", "coordinator.query.interval.ms", "max.poll.interval.ms",
        "enable.auto.commit", "auto.commit.interval.ms", "enable.auto.offset.store",
        "queued.min.messages", "queued.max.messages.kbytes", "fetch.wait.max.ms",
        "fetch.queue.backoff.ms", "fetch.message.max.bytes", "max.partition.fetch.bytes",
        "fetch.max.bytes", "fetch.min.bytes", "fetch.error.backoff.ms", "isolation.level",
        "enable.partition.eof", "check.crcs", "auto.offset.reset", "auto.commit.enable",
        "consume.callback.max.messages",
    }
)  # fmt: skip
"""librdkafka's consumer properties (`C` in its CONFIGURATION.md) a producer ignores with a
CONFWARN line at every start."""

PRODUCER_ONLY = frozenset(
    {
        "transactional.id", "transaction.timeout.ms", "enable.idempotence",
        "enable.gapless.guarantee", "queue.buffering.max.messages",
        "queue.buffering.max.kbytes", "queue.buffering.max.ms", "linger.ms",
        "message.send.max.retries", "retries", "queue.buffering.backpressure.threshold",
        "compression.codec", "compression.type", "compression.level", "batch.num.messages",
        "batch.size", "delivery.report.only.error", "sticky.partitioning.linger.ms",
        "request.required.acks", "acks", "request.timeout.ms", "message.timeout.ms",
        "delivery.timeout.ms", "partitioner",
    }
)  # fmt: skip
"""librdkafka's producer properties (`P`), which a consumer ignores with a CONFWARN line."""

ClientKind = Literal["consumer", "producer", "admin"]
_NOT_FOR: dict[str, frozenset[str]] = {
    "consumer": PRODUCER_ONLY,
    "producer": CONSUMER_ONLY,
    # librdkafka's admin client is a producer that produces nothing: neither kind applies.
    "admin": CONSUMER_ONLY | PRODUCER_ONLY,
}


class KafkaSettings(Group):
    """Which topics to read, from which cluster, as which consumer group."""

    topics: Items = setting(
        "KAFKA_TOPICS", (), "comma-separated topics; or KAFKA_TOPICS_REGEX", shown="(required)"
    )
    topics_regex: Regex | None = setting(
        "KAFKA_TOPICS_REGEX", None, "every topic fully matching it (not DLQ_TOPIC, not __*)"
    )
    bootstrap_servers: str = setting(
        "KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092", "host:port[,host:port]"
    )
    group_id: str = setting("KAFKA_GROUP_ID", "es-sink", "consumer group whose offsets we commit")
    auto_offset_reset: Annotated[str, OneOf(("earliest", "latest"))] = setting(
        "KAFKA_AUTO_OFFSET_RESET", "earliest", "where to start without snapshot or commit"
    )
    stop_at_end: Flag = setting(
        "KAFKA_STOP_AT_END", False, "exit 0 once every partition reached its end offset at start"
    )
    consume_batch_size: int = setting(
        "KAFKA_CONSUME_BATCH_SIZE", 1000, "records per consume() call", ge=1
    )
    kafka_config: Pairs = setting(
        "KAFKA_CONFIG",
        {},
        "librdkafka settings: KAFKA_CONFIG_<NAME> variables, or a YAML map",
        prefix=KAFKA_CONFIG_PREFIX,
        repr=False,
    )

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_ports(cls, value: str) -> str:
        for server in value.split(","):
            host, sep, port = server.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"expected host:port[,host:port], got {server!r}")
        return value

    @field_validator("kafka_config")
    @classmethod
    def _not_reserved(cls, value: dict[str, str]) -> dict[str, str]:
        for reserved in _RESERVED:
            if reserved in value:
                name = KAFKA_CONFIG_PREFIX + reserved.upper().replace(".", "_")
                msg = (
                    f"{name}: is managed by the flow; use the dedicated setting "
                    "(KAFKA_GROUP_ID, KAFKA_BOOTSTRAP_SERVERS) instead"
                )
                raise ConfigError(msg)
        return value

    @model_validator(mode="after")
    def _topics_or_regex(self) -> Self:
        if not self.topics and not self.topics_regex:
            msg = "KAFKA_TOPICS: required (comma-separated topic names), or set KAFKA_TOPICS_REGEX"
            raise ConfigError(msg)
        if self.topics and self.topics_regex:
            msg = "KAFKA_TOPICS_REGEX: set either KAFKA_TOPICS or KAFKA_TOPICS_REGEX, not both"
            raise ConfigError(msg)
        return self

    def librdkafka(
        self, client: ClientKind, defaults: Mapping[str, Any] | None = None, **overrides: Any
    ) -> dict[str, Any]:
        """The librdkafka configuration of a `client` of this kind: our `defaults`, then the
        user's pass-through settings that apply to the kind (which win over defaults; one
        `kafka_config` serves the consumers and the producers, so each gets its own side of
        it), then `overrides` the flow relies on."""
        ignored = _NOT_FOR[client]
        return {
            **CLIENT_DEFAULTS,
            **(defaults or {}),
            "bootstrap.servers": self.bootstrap_servers,
            **{k: v for k, v in self.kafka_config.items() if k not in ignored},
            **overrides,
        }
