"""The dead-letter sink's partition produces as batches come and waits for Kafka in
`snapshot()`, which returns only once every dead letter is confirmed (failed deliveries
produced again, within one DLQ_RETRY_BUDGET_S), or stops the flow. Fault injection: a fake
librdkafka producer that confirms only when flushed, failing the deliveries a test names."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from confluent_kafka import KafkaError

from sinks import dead_letter, failing, metrics, progress
from sinks.backoff import under_way
from sinks.dead_letter import _DeadLetterPartition as Partition
from sinks.errors import DeadLetterDeliveryError
from sinks.model import DeadLetter, Record
from tests.unit.sinks.dead_letter.test_dlq_producer import PRODUCER, FakeClock, dlq_producer


class Broker:
    """Queues produces; `flush()` delivers them, failing each delivery of a value in
    `fail` as often as its count says (-1: always); `full` refuses produces locally."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.queued: list[tuple[bytes | None, Any]] = []
        self.delivered: list[bytes | None] = []
        self.flushes = 0
        self.fail: dict[bytes, int] = {}
        self.full = False
        self.full_after_flushes: int | None = None  # the queue fills after that many
        self.flush_s = 0.0  # each flush takes this long
        self.unfinished_flushes = 0  # that many flushes time out with records left
        self.polls = 0

    def produce(self, topic: str, value: bytes | None, key: Any, headers: Any,
                on_delivery: Any) -> None:  # fmt: skip
        after = self.full_after_flushes
        if self.full or (after is not None and self.flushes >= after):
            raise BufferError("Local: Queue full")
        self.queued.append((value, on_delivery))

    def poll(self, timeout: float) -> int:
        self.polls += 1
        assert self.polls < 10_000, "waited on a full queue without end"
        self.clock.now += timeout  # nothing delivered: the broker is slower than the worker
        return 0

    def flush(self, timeout: float) -> int:
        self.flushes += 1
        self.clock.now += self.flush_s
        if self.unfinished_flushes:
            self.unfinished_flushes -= 1
            return len(self.queued) or 1
        queued, self.queued = self.queued, []
        for value, on_delivery in queued:
            left = self.fail.get(value or b"", 0)
            if left:
                self.fail[value or b""] = left - 1
                on_delivery(KafkaError(KafkaError._MSG_TIMED_OUT), None)
            else:
                self.delivered.append(value)
                on_delivery(None, None)
        return 0


@pytest.fixture(autouse=True)
def _not_failing() -> Any:
    failing.clear()
    yield
    failing.clear()


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> tuple[Broker, Any]:
    clock = FakeClock()
    fake = Broker(clock)
    monkeypatch.setattr(PRODUCER, lambda conf: fake)
    env = {"KAFKA_TOPICS": "t", "DLQ_TOPIC": "dlq", "DLQ_RETRY_BUDGET_S": "60"}
    return fake, dlq_producer(env, clock)


def _letters(*values: bytes) -> list[DeadLetter]:
    return [
        DeadLetter(Record("t", 0, i, None, b"k", v), "deserialize", "ValueError", "bad")
        for i, v in enumerate(values)
    ]


def test_batches_do_not_wait_for_kafka_the_epoch_end_does(broker: tuple[Broker, Any]) -> None:
    fake, producer = broker
    part = Partition(producer)
    counted = metrics.DEAD_LETTERS.labels("deserialize")._value.get()
    fake.fail[b"b"] = 1
    part.write_batch(_letters(b"a", b"b"))
    part.write_batch(_letters(b"c"))
    assert fake.flushes == 0 and fake.delivered == []
    part.snapshot()
    # b's first delivery failed: produced again and confirmed before snapshot() returned
    assert sorted(fake.delivered) == [b"a", b"b", b"c"] and fake.queued == []
    assert metrics.DEAD_LETTERS.labels("deserialize")._value.get() == counted + 3


def test_a_failure_another_partition_flushed_is_produced_again_by_its_own(
    broker: tuple[Broker, Any],
) -> None:
    """Partitions share the producer: B's snapshot serves A's delivery report; A's own
    snapshot must still produce A's failed record again."""
    fake, producer = broker
    a, b = Partition(producer), Partition(producer)
    fake.fail[b"x"] = 1
    a.write_batch(_letters(b"x"))
    b.write_batch(_letters(b"y"))
    b.snapshot()
    assert fake.delivered == [b"y"]
    a.snapshot()
    assert fake.delivered == [b"y", b"x"]


def test_deliveries_failing_past_the_budget_stop_the_flow(broker: tuple[Broker, Any]) -> None:
    fake, producer = broker
    part = Partition(producer)
    fake.fail[b"x"] = -1  # always
    part.write_batch(_letters(b"x"))
    with pytest.raises(DeadLetterDeliveryError, match="DLQ_RETRY_BUDGET_S=60"):
        part.snapshot()
    assert failing.failing()


def test_a_confirmation_and_its_resends_share_one_budget(broker: tuple[Broker, Any]) -> None:
    """58 s of slow flushes, then the failed delivery's re-send finds the queue full: the
    flow stops when DLQ_RETRY_BUDGET_S (60) is spent in all, not after a second budget."""
    fake, producer = broker
    part = Partition(producer)
    fake.fail[b"x"] = 1
    part.write_batch(_letters(b"x"))
    fake.flush_s, fake.unfinished_flushes, fake.full_after_flushes = 29.0, 1, 2
    with pytest.raises(DeadLetterDeliveryError, match="DLQ_RETRY_BUDGET_S=60"):
        part.snapshot()
    assert 60 <= fake.clock.now <= 61


def test_an_epoch_without_dead_letters_confirms_nothing_more(broker: tuple[Broker, Any]) -> None:
    fake, producer = broker
    part = Partition(producer)
    part.snapshot()
    part.write_batch(_letters(b"a"))
    part.snapshot()
    part.snapshot()
    assert fake.delivered == [b"a"] and fake.queued == []
    assert fake.flushes == 1  # the snapshots with nothing unconfirmed waited for nothing


def test_a_queue_that_stays_full_stops_the_flow_after_the_budget(
    broker: tuple[Broker, Any],
) -> None:
    fake, producer = broker
    fake.full = True
    with pytest.raises(DeadLetterDeliveryError, match="queue stayed full"):
        Partition(producer).write_batch(_letters(b"x"))
    assert failing.failing() and 60 <= fake.clock.now <= 61


QUEUE_FULL = ("dead-letter", "the producer's queue is full")


@pytest.mark.parametrize("path", ["produce", "send"])
def test_a_wait_on_a_full_queue_is_listed_as_a_retry_under_way_while_it_lasts(
    broker: tuple[Broker, Any], monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """The status API lists what the process is retrying: a wait on a full producer queue
    holds the epoch as a broker's failed deliveries do. Once the record is queued the
    entry goes, also while the same `send()` then waits for its confirmation."""
    fake, producer = broker
    fake.full = True
    polled: list[tuple[str, str]] = []
    flushed: list[tuple[str, str]] = []
    poll, flush = fake.poll, fake.flush

    def watched_poll(timeout: float) -> int:
        polled.extend((u.where, u.reason) for u in under_way())
        fake.full = fake.polls < 2
        return poll(timeout)

    def watched_flush(timeout: float) -> int:
        flushed.extend((u.where, u.reason) for u in under_way())
        return flush(timeout)

    monkeypatch.setattr(fake, "poll", watched_poll)
    monkeypatch.setattr(fake, "flush", watched_flush)
    if path == "produce":
        Partition(producer).write_batch(_letters(b"x"))
    else:
        producer.send(_letters(b"x"))
        assert fake.flushes
    assert QUEUE_FULL in polled
    assert QUEUE_FULL not in flushed
    assert QUEUE_FULL not in [(u.where, u.reason) for u in under_way()]


def test_a_wait_on_a_full_queue_keeps_the_worker_alive(
    broker: tuple[Broker, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The liveness check (API_LIVENESS_S) must not take a worker waiting on a full queue,
    which DLQ_RETRY_BUDGET_S=0 lets last, for a wedged one: it beats after every poll."""
    fake, producer = broker
    fake.full = True
    beats: list[float] = []
    monkeypatch.setattr(progress, "beat", lambda: beats.append(fake.clock.now))
    poll = fake.poll

    def watched_poll(timeout: float) -> int:
        fake.full = fake.polls < 100  # 50 s (fake) of a full queue, within the 60 s budget
        return poll(timeout)

    monkeypatch.setattr(fake, "poll", watched_poll)
    Partition(producer).write_batch(_letters(b"x"))
    assert len(beats) >= 100
    assert max(b - a for a, b in itertools.pairwise(beats)) <= 0.5


@pytest.mark.parametrize(
    ("limit", "value", "first_flushes"),
    [
        ("UNCONFIRMED_LETTERS", 3, 0),
        ("UNCONFIRMED_BYTES", 300, 1),  # the error headers weigh more than these records
    ],
)
def test_unconfirmed_letters_past_a_limit_are_confirmed_before_the_epoch_ends(
    broker: tuple[Broker, Any],
    monkeypatch: pytest.MonkeyPatch,
    limit: str,
    value: int,
    first_flushes: int,
) -> None:
    fake, producer = broker
    monkeypatch.setattr(dead_letter, limit, value)
    part = Partition(producer)
    part.write_batch(_letters(b"a", b"b"))  # 6 bytes of keys and values, 2 letters
    assert fake.flushes == first_flushes
    if limit == "UNCONFIRMED_BYTES":
        assert fake.delivered == [b"a", b"b"]
        return
    part.write_batch(_letters(b"c"))
    assert fake.flushes == 1 and fake.delivered == [b"a", b"b", b"c"]
    part.write_batch(_letters(b"d"))
    assert fake.flushes == 1  # counted again from zero
