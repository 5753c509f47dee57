"""One consumer per worker (flows.consumers): records sorted into their partitions'
queues, back-pressure by pausing, commit answers routed; a fake librdkafka consumer for
fault injection only (the real broker: the integration tests, which all read through it)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from flows import consumers, halt, shutdown
from flows.config import Settings
from flows.consumers import HIGH_WATER, WorkerConsumer
from flows.source import KafkaSourcePartition


class ScriptedConsumer:
    """Returns the scripted `batches` one per consume(); records the calls made."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.on_commit = conf["on_commit"]
        self.batches: list[list[Message]] = []
        self.paused: set[tuple[str, int]] = set()
        self.assigned: dict[tuple[str, int], int] = {}
        self.calls: list[str] = []
        self.closed = False

    def consume(self, n: int, timeout: float) -> list[Message]:
        self.calls.append("consume")
        return self.batches.pop(0)[:n] if self.batches else []

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self.assigned[(tp.topic, tp.partition)] = tp.offset

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            del self.assigned[(tp.topic, tp.partition)]

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused.update((tp.topic, tp.partition) for tp in tps)

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused.difference_update((tp.topic, tp.partition) for tp in tps)

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.calls.append(f"commit {offsets[0].partition}@{offsets[0].offset}")

    def get_watermark_offsets(self, tp: TopicPartition, **_: Any) -> tuple[int, int]:
        return 0, 100

    def committed(self, tps: list[TopicPartition], **_: Any) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in tps]

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in tps]

    def close(self) -> None:
        self.closed = True


def records(partition: int, offsets: range, topic: str = "t") -> list[Message]:
    return [Message(topic=topic, partition=partition, offset=o, value=b"{}") for o in offsets]


class Answers:
    def __init__(self) -> None:
        self.got: list[tuple[KafkaError | None, list[tuple[int, int]]]] = []

    def record(self, err: KafkaError | None, tps: list[TopicPartition]) -> None:
        self.got.append((err, [(tp.partition, tp.offset) for tp in tps]))


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> WorkerConsumer:
    monkeypatch.setattr(consumers, "Consumer", ScriptedConsumer)
    return WorkerConsumer({})


def join(worker: WorkerConsumer, partition: int, batch: int = 10) -> Answers:
    answers = Answers()
    worker.join(("t", partition), batch, answers.record)
    worker.assign(TopicPartition("t", partition, 0))
    return answers


def fake(worker: WorkerConsumer) -> ScriptedConsumer:
    return worker.consumer  # type: ignore[return-value]


def test_one_consume_serves_every_partition_in_offset_order(worker):
    a0, a1 = join(worker, 0), join(worker, 1)
    fake(worker).batches = [records(0, range(3)) + records(1, range(2)) + records(0, range(3, 5))]
    assert worker.fill(100, 0) == 7
    assert [m.offset() for m in worker.take(("t", 0), 4)] == [0, 1, 2, 3]
    assert [m.offset() for m in worker.take(("t", 1), 4)] == [0, 1]
    assert [m.offset() for m in worker.take(("t", 0), 4)] == [4]
    assert worker.take(("t", 0), 4) == []
    assert a0.got == a1.got == []


def test_partitions_of_the_same_number_in_two_topics_stay_apart(worker):
    join(worker, 0)
    other = Answers()
    worker.join(("u", 0), 10, other.record)
    mixed = records(0, range(2)) + records(0, range(5, 7), topic="u") + records(0, range(2, 3))
    fake(worker).batches = [mixed]
    worker.fill(100, 0)
    assert [m.offset() for m in worker.take(("t", 0), 10)] == [0, 1, 2]
    assert [m.offset() for m in worker.take(("u", 0), 10)] == [5, 6]


def test_a_long_queue_pauses_its_partition_until_drained(worker):
    join(worker, 0, batch=2), join(worker, 1, batch=2)
    fake(worker).batches = [records(0, range(HIGH_WATER * 2)) + records(1, range(1))]
    worker.fill(100, 0)
    assert fake(worker).paused == {("t", 0)}  # partition 1 is not held back
    worker.take(("t", 0), 2 * HIGH_WATER - 2)
    assert fake(worker).paused == {("t", 0)}  # still a batch queued
    worker.take(("t", 0), 1)
    assert fake(worker).paused == set()


def test_the_owners_pause_outlasts_a_drained_queue(worker):
    join(worker, 0, batch=2)
    fake(worker).batches = [records(0, range(HIGH_WATER * 2))]
    worker.fill(100, 0)
    worker.hold(("t", 0), True)
    worker.take(("t", 0), 100)
    assert fake(worker).paused == {("t", 0)}
    worker.hold(("t", 0), False)
    assert fake(worker).paused == set()


def test_commit_answers_reach_the_partition_they_name(worker):
    a0, a1 = join(worker, 0), join(worker, 1)
    worker.commit(TopicPartition("t", 0, 5))
    worker.commit(TopicPartition("t", 1, 7))
    fake(worker).on_commit(None, [TopicPartition("t", 1, 7)])
    timeout = KafkaError(KafkaError.REQUEST_TIMED_OUT)
    fake(worker).on_commit(timeout, [])  # names no partition: the oldest unanswered, 0's
    assert a0.got == [(timeout, [])]
    assert a1.got == [(None, [(1, 7)])]


def test_an_error_of_no_partition_reaches_every_partition_of_its_topic(worker):
    join(worker, 0), join(worker, 1)
    other = Answers()
    worker.join(("u", 0), 10, other.record)
    topic_error = Message(topic="t", partition=-1, error=KafkaError(KafkaError._UNKNOWN_TOPIC))
    gone = Message(topic="t", partition=9, error=KafkaError(KafkaError._TRANSPORT))
    fake(worker).batches = [[topic_error, gone]]
    worker.fill(100, 0)
    assert worker.take(("t", 0), 10) == worker.take(("t", 1), 10) == [topic_error]
    assert worker.take(("u", 0), 10) == []


def test_the_last_partition_to_leave_closes_the_consumer(worker):
    join(worker, 0), join(worker, 1)
    worker.leave(("t", 0))
    assert fake(worker).assigned == {("t", 1): 0}
    assert not fake(worker).closed
    worker.leave(("t", 1))
    assert fake(worker).closed and worker.closed


def test_a_worker_thread_has_one_consumer_per_configuration(monkeypatch):
    monkeypatch.setattr(consumers, "Consumer", ScriptedConsumer)
    one = consumers.shared({"group.id": "g"})
    answers = Answers()
    one.join(("t", 0), 10, answers.record)  # in use
    assert consumers.shared({"group.id": "g"}) is one
    assert consumers.shared({"group.id": "h"}) is not one
    other: list[WorkerConsumer] = []
    thread = threading.Thread(target=lambda: other.append(consumers.shared({"group.id": "g"})))
    thread.start()
    thread.join()
    assert other[0] is not one
    one.leave(("t", 0))
    assert consumers.shared({"group.id": "g"}) is not one  # closed: a new one


def test_source_partitions_of_one_worker_share_a_consumer_and_read_only_their_own(
    monkeypatch,
):
    monkeypatch.setattr(consumers, "Consumer", ScriptedConsumer)
    monkeypatch.setattr(halt, "HELD", {})
    monkeypatch.setattr(halt, "EXAMINED", {})
    monkeypatch.setattr(shutdown, "_requested", type(shutdown._requested)())
    settings = Settings.load({"KAFKA_TOPICS": "t"})
    p0 = KafkaSourcePartition(settings, "t", 0, None)
    p1 = KafkaSourcePartition(settings, "t", 1, None)
    assert p0._consumer is p1._consumer
    scripted: ScriptedConsumer = p0._consumer  # type: ignore[assignment]
    assert scripted.assigned == {("t", 0): 0, ("t", 1): 0}
    scripted.batches = [records(1, range(3)) + records(0, range(2))]
    got0 = p0.next_batch()
    assert [(m.partition(), m.offset()) for m in got0] == [(0, 0), (0, 1)]
    assert scripted.calls == ["consume"]
    got1 = p1.next_batch()  # already queued: no second consume
    assert [(m.partition(), m.offset()) for m in got1] == [(1, 0), (1, 1), (1, 2)]
    assert scripted.calls == ["consume"]
    p0.close()
    assert not scripted.closed
    p1.close()
    assert scripted.closed
