"""The dead-letter sink's partition produces as batches come and waits for Kafka only in
`snapshot()`, which returns once every dead letter is confirmed, failed deliveries produced
again. Fault injection: librdkafka's producer is replaced by a fake that confirms only
when flushed (or polled), failing the deliveries the test names."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from sinks import metrics
from sinks.dead_letter import DeadLetterConfig, DeadLetterProducer
from sinks.dead_letter import _DeadLetterPartition as Partition
from sinks.model import DeadLetter, Record


class FakeProducer:
    """Queues produces; `flush()` delivers them all, failing the first delivery of each
    value in `fail_once`."""

    def __init__(self, fail_once: set[bytes] = frozenset()) -> None:  # type: ignore[assignment]
        self.queued: list[tuple[bytes | None, Any]] = []
        self.delivered: list[bytes | None] = []
        self.flushes = 0
        self.fail_once = set(fail_once)

    def produce(
        self, topic: str, value: bytes | None, key: Any, headers: Any, on_delivery: Any
    ) -> None:
        self.queued.append((value, on_delivery))

    def poll(self, timeout: float) -> int:
        return 0  # nothing delivered yet: the broker is slower than the worker

    def flush(self, timeout: float) -> int:
        self.flushes += 1
        queued, self.queued = self.queued, []
        for value, on_delivery in queued:
            if value in self.fail_once:
                self.fail_once.discard(value)
                on_delivery(KafkaError(KafkaError._MSG_TIMED_OUT), None)
            else:
                self.delivered.append(value)
                on_delivery(None, None)
        return 0


def _letters(*values: bytes) -> list[DeadLetter]:
    return [
        DeadLetter(Record("t", 0, i, None, b"k", v), "deserialize", "ValueError", "bad")
        for i, v in enumerate(values)
    ]


@pytest.fixture
def fake() -> tuple[Partition, FakeProducer]:
    config = DeadLetterConfig("dlq", {"bootstrap.servers": "127.0.0.1:9"}, 0.0)
    producer = DeadLetterProducer(config)
    fake = FakeProducer({b"b"})
    producer._producer = fake  # type: ignore[assignment]
    return Partition(producer), fake


def test_batches_do_not_wait_for_kafka_the_epoch_end_does(
    fake: tuple[Partition, FakeProducer],
) -> None:
    part, producer = fake
    counted = metrics.DEAD_LETTERS.labels("deserialize")._value.get()
    part.write_batch(_letters(b"a", b"b"))
    part.write_batch(_letters(b"c"))
    assert producer.flushes == 0 and producer.delivered == []
    part.snapshot()
    # b's first delivery failed: produced again and confirmed before snapshot() returned
    assert sorted(producer.delivered) == [b"a", b"b", b"c"] and producer.queued == []
    assert metrics.DEAD_LETTERS.labels("deserialize")._value.get() == counted + 3


def test_an_epoch_without_dead_letters_confirms_nothing_more(
    fake: tuple[Partition, FakeProducer],
) -> None:
    part, producer = fake
    part.snapshot()
    part.write_batch(_letters(b"a"))
    part.snapshot()
    part.snapshot()
    assert producer.delivered == [b"a"] and producer.queued == []
