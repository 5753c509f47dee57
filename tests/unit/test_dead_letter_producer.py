"""DeadLetterProducer's handling of records too large for the dead-letter topic, with a
fake producer for fault injection only."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException

from flows.config import Settings
from flows.record import DeadLetter, Record
from sinks.dead_letter import VALUE_OMITTED_HEADER, DeadLetterProducer


class FakeProducer:
    """Refuses values over `limit` bytes: locally, or later in the delivery report."""

    def __init__(self, conf: dict[str, Any], limit: int = 100, local: bool = True) -> None:
        self.limit, self.local = limit, local
        self.sent: list[dict[str, Any]] = []
        self.reports: list[tuple[Any, KafkaError | None]] = []

    def produce(self, topic: str, value: bytes | None, key: bytes | None, headers: Any,
                on_delivery: Any) -> None:  # fmt: skip
        too_large = value is not None and len(value) > self.limit
        if too_large and self.local:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        err = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if too_large else None
        self.reports.append((on_delivery, err))
        if err is None:
            self.sent.append({"value": value, "key": key, "headers": dict(headers)})

    def flush(self, timeout: float) -> int:
        for cb, err in self.reports:
            cb(err, None)
        self.reports.clear()
        return 0

    def poll(self, timeout: float) -> int:
        return 0


def _producer(monkeypatch, fake: list[FakeProducer], local: bool) -> DeadLetterProducer:
    monkeypatch.setattr(
        "sinks.dead_letter.Producer",
        lambda conf: fake.append(FakeProducer(conf, local=local)) or fake[-1],
    )
    monkeypatch.setattr("sinks.dead_letter.time.sleep", lambda s: None)
    return DeadLetterProducer(Settings.load({"KAFKA_TOPICS": "t", "DLQ_TOPIC": "dlq"}))


BIG = DeadLetter(Record("t", 2, 7, None, b"k", b"x" * 500), "index", "E", "too big for ES")
SMALL = DeadLetter(Record("t", 2, 8, None, b"k2", b"y"), "deserialize", "E", "bad")


def test_a_record_too_large_for_any_producer_is_sent_without_its_value(monkeypatch):
    fake: list[FakeProducer] = []
    _producer(monkeypatch, fake, local=True).send([BIG, SMALL])

    sent = {m["key"]: m for m in fake[0].sent}
    assert sent[b"k2"]["value"] == b"y"  # the other record is untouched
    assert sent[b"k"]["value"] is None
    note = sent[b"k"]["headers"][VALUE_OMITTED_HEADER].decode()
    assert "500 bytes" in note and "t/2@7" in note
    assert sent[b"k"]["headers"]["__connect.errors.offset"] == b"7"


def test_a_record_the_topic_refuses_is_retried_with_its_value_until_accepted(monkeypatch):
    fake: list[FakeProducer] = []
    producer = _producer(monkeypatch, fake, local=False)
    attempts = 0
    flush = FakeProducer.flush

    def raise_limit_later(self: FakeProducer, timeout: float) -> int:
        nonlocal attempts
        attempts += 1
        if attempts == 3:  # the operator raised the topic's max.message.bytes
            self.limit = 10_000
        return flush(self, timeout)

    monkeypatch.setattr(FakeProducer, "flush", raise_limit_later)
    producer.send([BIG])

    assert [m["value"] for m in fake[0].sent] == [BIG.record.value]
    assert VALUE_OMITTED_HEADER not in fake[0].sent[0]["headers"]
