"""Each Kafka client gets the pass-through settings (`KAFKA_CONFIG_*`, `kafka_config:`) that
apply to its kind: librdkafka warns at every start about a consumer property given to a
producer (the dead-letter producer, the admin clients of `es-sink`) or the reverse."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from flows.config import Settings
from flows.config.kafka import CONSUMER_ONLY, PRODUCER_ONLY, ClientKind

NOWHERE = "127.0.0.1:1"

Client = Callable[[dict[str, Any]], Any]


def load(**env: str) -> Settings:
    return Settings.load({"KAFKA_TOPICS": "t", "DLQ_TOPIC": "t-dlq", **env})


def warnings(make: Client, conf: dict[str, Any]) -> list[str]:
    """librdkafka's CONFWARN lines when a client of this kind starts with `conf`."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger(f"librdkafka-test-{id(lines)}")
    logger.propagate = False
    logger.addHandler(Collect())
    logger.setLevel(logging.DEBUG)
    client = make({**conf, "bootstrap.servers": NOWHERE, "logger": logger})
    client.poll(0.2)  # serves the log queue
    if isinstance(client, Consumer):
        client.close()
    return [line for line in lines if "CONFWARN" in line]


def consumer(conf: dict[str, Any]) -> Consumer:
    return Consumer({"group.id": "g", **conf})


MIXED = {
    "KAFKA_CONFIG_FETCH_MIN_BYTES": "65536",  # consumer only
    "KAFKA_CONFIG_LINGER_MS": "20",  # producer only
    "KAFKA_CONFIG_CLIENT_ID": "orders-to-es",  # both
}


def test_a_consumer_property_reaches_the_consumers_only() -> None:
    s = load(**MIXED)
    assert s.librdkafka("consumer")["fetch.min.bytes"] == "65536"
    assert "linger.ms" not in s.librdkafka("consumer")
    assert s.librdkafka("producer")["linger.ms"] == "20"
    assert "fetch.min.bytes" not in s.librdkafka("producer")
    admin = s.librdkafka("admin")
    assert "fetch.min.bytes" not in admin and "linger.ms" not in admin
    kinds: tuple[ClientKind, ...] = ("consumer", "producer", "admin")
    for kind in kinds:
        assert s.librdkafka(kind)["client.id"] == "orders-to-es"


def test_no_client_warns_about_the_pass_through_settings() -> None:
    s = load(**MIXED)
    dlq = s.dead_letter_config
    assert dlq is not None
    assert warnings(Producer, dlq.kafka) == []  # the dead-letter producer and its admin client
    assert warnings(AdminClient, s.librdkafka("admin")) == []
    assert warnings(Producer, s.librdkafka("producer")) == []
    assert warnings(consumer, s.librdkafka("consumer")) == []


SAMPLES = (
    "10000",
    "true",
    "consumer",
    "range",
    "read_committed",
    "earliest",
    "lz4",
    "murmur2",
    "1",
)
"""Values to try until librdkafka accepts one for a property (it checks types and ranges)."""


def _warns(make: Client, name: str, kind: str) -> bool:
    """Whether librdkafka says `name` is a `kind` property that this client ignores (with
    the first of SAMPLES it accepts; an alias is named by its property's name)."""
    for value in SAMPLES:
        try:
            found = warnings(make, {name: value})
        except (KafkaException, ValueError, TypeError):
            continue
        return any(f"is a {kind} property and will be ignored" in line for line in found)
    raise AssertionError(f"{name}: no sample value librdkafka accepts")


@pytest.mark.parametrize("name", sorted(CONSUMER_ONLY))
def test_each_consumer_only_property_is_one_for_librdkafka(name: str) -> None:
    assert _warns(Producer, name, "consumer")


@pytest.mark.parametrize("name", sorted(PRODUCER_ONLY))
def test_each_producer_only_property_is_one_for_librdkafka(name: str) -> None:
    assert _warns(consumer, name, "producer")
