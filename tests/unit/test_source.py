"""Source partition offset bookkeeping, with a fake consumer for fault injection only
(the real broker behaviour is covered by the integration tests)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from flows import halt, shutdown
from flows.config import Settings
from flows.errors import RecordFailedError
from flows.source import KafkaSourcePartition


class FakeConsumer:
    """Serves scripted messages; async commits are answered on the next consume()."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.on_commit = conf["on_commit"]
        self.messages: list[Message] = []
        self.fail_next_async = False
        self.broker_committed: int | None = None
        self.answers: list[tuple[KafkaError | None, list[TopicPartition]]] = []

    def get_watermark_offsets(self, tp: TopicPartition, **_: Any) -> tuple[int, int]:
        return 0, 3

    def committed(self, tps: list[TopicPartition], **_: Any) -> list[TopicPartition]:
        return [TopicPartition(tps[0].topic, tps[0].partition, -1001)]

    def assign(self, tps: list[TopicPartition]) -> None:
        self.messages = [
            Message(topic=tps[0].topic, partition=0, offset=o, value=b"{}") for o in range(3)
        ]

    def consume(self, n: int, timeout: float) -> list[Message]:
        for answer in self.answers:
            self.on_commit(*answer)
        self.answers.clear()
        out, self.messages = self.messages[:n], self.messages[n:]
        return out

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> Any:
        tp = offsets[0]
        if asynchronous:
            if self.fail_next_async:
                self.fail_next_async = False
                self.answers.append((KafkaError(KafkaError.REQUEST_TIMED_OUT), []))
            else:
                self.broker_committed = tp.offset
                self.answers.append((None, [TopicPartition(tp.topic, tp.partition, tp.offset)]))
            return None
        self.broker_committed = tp.offset
        return [TopicPartition(tp.topic, tp.partition, tp.offset)]

    def close(self) -> None:
        pass


@pytest.fixture
def part(monkeypatch: pytest.MonkeyPatch) -> KafkaSourcePartition:
    monkeypatch.setattr("flows.source.Consumer", FakeConsumer)
    monkeypatch.setattr(halt, "HELD", {})
    monkeypatch.setattr(shutdown, "_requested", type(shutdown._requested)())
    settings = Settings.load({"KAFKA_TOPICS": "t"})
    return KafkaSourcePartition(settings, "t", 0, None)


def test_a_failed_async_commit_is_retried_and_the_final_commit_lands(part):
    consumer: FakeConsumer = part._consumer  # type: ignore[assignment]
    assert len(part.next_batch()) == 3
    assert part.snapshot() == 3
    consumer.fail_next_async = True
    part.next_batch()  # commits 3 asynchronously; Kafka will refuse it
    part.next_batch()  # the refusal is served here
    assert consumer.broker_committed is None
    assert part.snapshot() == 3  # still not confirmed: queued again
    shutdown.request()
    with pytest.raises(StopIteration):
        part.next_batch()  # the final, synchronous commit
    assert consumer.broker_committed == 3


def test_commits_only_what_a_snapshot_named(part):
    consumer: FakeConsumer = part._consumer  # type: ignore[assignment]
    part.next_batch()
    part.next_batch()
    assert consumer.broker_committed is None  # read, but no epoch closed yet
    part.snapshot()
    part.next_batch()
    assert consumer.broker_committed == 3


# ------------------------------------------------------- ERRORS_TOLERANCE=none (flows.halt)


def test_a_held_failure_is_raised_only_after_the_next_snapshot(part):
    """Offset 1 failed while 0..2 were read: the partition reads nothing more, snapshots
    offset 1 (never past it), and raises only after that snapshot's epoch, committing
    nothing."""
    consumer: FakeConsumer = part._consumer  # type: ignore[assignment]
    consumer.messages = consumer.messages[:2]  # offset 2 stays unread in the broker
    assert len(part.next_batch()) == 2
    error = RecordFailedError("t/0@1", "deserialize", "bad")
    halt.hold("t", 0, 1, error)
    consumer.messages = [Message(topic="t", partition=0, offset=2, value=b"{}")]
    assert part.next_batch() == []  # the epoch goes on: records before 1 are being written
    assert part.snapshot() == 1
    with pytest.raises(RecordFailedError) as info:
        part.next_batch()
    assert info.value is error
    assert consumer.broker_committed is None
    assert len(consumer.messages) == 1  # never consumed


def test_a_held_failure_in_another_partition_does_not_stop_this_one(part):
    halt.hold("t", 1, 0, RecordFailedError("t/1@0", "deserialize", "bad"))
    assert len(part.next_batch()) == 3
    assert part.snapshot() == 3
    part.next_batch()
    assert part._consumer.broker_committed == 3  # type: ignore[attr-defined]
