"""One consumer per worker (flows.kafka.consumers): records sorted into their partitions'
queues, consuming only while they hold little, commit answers routed; a fake librdkafka consumer for
fault injection only (the real broker: the integration tests, which all read through it)."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from flows import halt
from flows.config import Settings
from flows.errors import RecordFailedError
from flows.kafka import consumers
from flows.kafka.consumers import BROKERLESS_REPORTS, READY_BATCHES, WorkerConsumer
from flows.kafka.source import KafkaSourcePartition
from flows.runtime import control, shutdown


class ScriptedConsumer:
    """Returns the scripted `batches` one per consume(); records the calls made."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.on_commit = conf["on_commit"]
        self.on_stats = conf["stats_cb"]
        self.batches: list[list[Message]] = []
        self.paused: set[tuple[str, int]] = set()
        self.assigned: dict[tuple[str, int], int] = {}
        self.calls: list[str] = []
        self.positions: dict[tuple[str, int], int] = {}
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

    def commit(
        self, offsets: list[TopicPartition], asynchronous: bool
    ) -> list[TopicPartition] | None:
        self.calls.append(f"commit {offsets[0].partition}@{offsets[0].offset}")
        return None if asynchronous else offsets  # as librdkafka confirms a synchronous one

    def get_watermark_offsets(self, tp: TopicPartition, **_: Any) -> tuple[int, int]:
        return 0, 100

    def committed(self, tps: list[TopicPartition], **_: Any) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in tps]

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        at = self.positions
        return [
            TopicPartition(t.topic, t.partition, at.get((t.topic, t.partition), -1)) for t in tps
        ]

    def close(self) -> None:
        self.closed = True

    def report(self, *sources: str) -> None:
        """A statistics report listing brokers of these sources (librdkafka's JSON)."""
        brokers = {f"b{i}": {"source": src, "state": "DOWN"} for i, src in enumerate(sources)}
        self.on_stats(orjson.dumps({"brokers": brokers}).decode())


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


def test_the_worker_consumes_only_while_its_reading_partitions_hold_little(worker):
    """A slow partition is never paused (that would drop and re-fetch its prefetch):
    consuming stops instead, until the partitions that read have taken their records."""
    join(worker, 0, batch=2), join(worker, 1, batch=2)
    fake(worker).batches = [records(0, range(READY_BATCHES * 2)), records(1, range(1))]
    assert worker.hungry()
    worker.fill(100, 0)
    assert not worker.hungry()
    assert fake(worker).paused == set()
    worker.take(("t", 0), 2)
    assert worker.hungry()


def test_a_held_partition_is_not_fetched_and_its_queue_does_not_stop_the_others(worker):
    join(worker, 0, batch=2), join(worker, 1, batch=2)
    fake(worker).batches = [records(0, range(READY_BATCHES * 2))]
    worker.fill(100, 0)
    worker.hold(("t", 0), True)  # e.g. waiting to own it, or stopping
    assert fake(worker).paused == {("t", 0)}
    assert worker.hungry()  # its records wait outside the count
    worker.hold(("t", 0), False)
    assert fake(worker).paused == set() and not worker.hungry()
    assert [m.offset() for m in worker.take(("t", 0), 100)] == list(range(READY_BATCHES * 2))


def test_a_partition_moved_is_assigned_again_and_stays_held(worker):
    """librdkafka refuses to seek a partition whose position left the log; a new
    assignment restarts its fetching, paused again if it was held."""
    join(worker, 0), join(worker, 1)
    worker.hold(("t", 0), True)
    fake(worker).paused.clear()  # as if the new assignment started unpaused
    worker.move(TopicPartition("t", 0, 1500))
    assert fake(worker).assigned == {("t", 0): 1500, ("t", 1): 0}
    assert fake(worker).paused == {("t", 0)}
    worker.move(TopicPartition("t", 1, 7))
    assert fake(worker).assigned[("t", 1)] == 7 and fake(worker).paused == {("t", 0)}


def test_commit_answers_reach_the_partition_they_name(worker):
    a0, a1 = join(worker, 0), join(worker, 1)
    worker.commit(TopicPartition("t", 0, 5))
    worker.commit(TopicPartition("t", 1, 7))
    fake(worker).on_commit(None, [TopicPartition("t", 1, 7)])
    timeout = KafkaError(KafkaError.REQUEST_TIMED_OUT)
    fake(worker).on_commit(timeout, [TopicPartition("t", 0, 5)])
    fake(worker).on_commit(timeout, [])  # names nobody: logged
    assert a0.got == [(timeout, [(0, 5)])]
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
    a0, a1 = join(worker, 0), join(worker, 1)
    worker.leave(("t", 0), a0.record)
    assert fake(worker).assigned == {("t", 1): 0}
    assert not fake(worker).closed
    worker.leave(("t", 1), a1.record)
    assert fake(worker).closed and worker.closed


def test_an_owner_taken_over_does_not_unregister_the_new_one(worker):
    old = join(worker, 0)
    new = join(worker, 0)  # the old one never closed (its worker failed)
    worker.leave(("t", 0), old.record)
    assert fake(worker).assigned == {("t", 0): 0} and not worker.closed
    worker.leave(("t", 0), new.record)
    assert worker.closed


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
    one.leave(("t", 0), answers.record)
    assert consumers.shared({"group.id": "g"}) is not one  # closed: a new one


@pytest.fixture
def two(monkeypatch: pytest.MonkeyPatch) -> tuple[KafkaSourcePartition, KafkaSourcePartition]:
    """Source partitions t/0 and t/1 of one worker, on one ScriptedConsumer."""
    monkeypatch.setattr(consumers, "Consumer", ScriptedConsumer)
    monkeypatch.setattr(halt, "HELD", {})
    monkeypatch.setattr(halt, "EXAMINED", {})
    monkeypatch.setattr(shutdown, "_requested", type(shutdown._requested)())
    settings = Settings.load({"KAFKA_TOPICS": "t"})
    return (
        KafkaSourcePartition(settings, "t", 0, None),
        KafkaSourcePartition(settings, "t", 1, None),
    )


def test_source_partitions_of_one_worker_share_a_consumer_and_read_only_their_own(two):
    p0, p1 = two
    assert p0._consumer is p1._consumer
    scripted: ScriptedConsumer = p0._consumer  # type: ignore[assignment]
    assert scripted.assigned == {}  # at the first read: look-ups do not queue behind fetches
    scripted.batches = [records(1, range(3)) + records(0, range(2))]
    got0 = p0.next_batch()
    assert scripted.assigned == {("t", 0): 0}
    assert [(m.partition(), m.offset()) for m in got0] == [(0, 0), (0, 1)]
    # Each owner announced itself at its start offset when built; then one fetch for both.
    assert scripted.calls == ["commit 0@0", "commit 1@0", "consume"]
    got1 = p1.next_batch()  # what p0's consume queued for it
    assert [(m.partition(), m.offset()) for m in got1] == [(1, 0), (1, 1), (1, 2)]
    p0.close()
    assert not scripted.closed
    p1.close()
    assert scripted.closed


def test_an_idle_partition_passes_transaction_markers_while_the_others_read(two):
    """Its queue is empty, so the consumer's position is all it was given: the markers
    past it are skipped even though each consume brings the other partition's records."""
    p0, _ = two
    scripted: ScriptedConsumer = p0._consumer  # type: ignore[assignment]
    scripted.positions[("t", 0)] = 5  # offsets 0..4: an aborted transaction and markers
    scripted.batches = [records(1, range(3))]
    assert p0.next_batch() == []
    assert p0.view().position == 5


def test_a_paused_partition_goes_on_serving_commit_answers(two, monkeypatch):
    p0, _ = two
    scripted: ScriptedConsumer = p0._consumer  # type: ignore[assignment]
    scripted.batches = [records(0, range(3))]
    monkeypatch.setattr(control, "paused", True)
    assert p0.next_batch() == []
    assert scripted.paused == {("t", 0)}
    assert p0._shared.queued(("t", 0)) == 3  # kept for the resume
    calls = scripted.calls.count("consume")
    assert p0.next_batch() == []
    assert scripted.calls.count("consume") == calls + 1  # commit answers come this way
    monkeypatch.setattr(control, "paused", False)
    assert [m.offset() for m in p0.next_batch()] == [0, 1, 2]
    assert scripted.paused == set()


def test_a_held_partition_stops_being_fetched_and_the_others_go_on(two):
    p0, p1 = two
    scripted: ScriptedConsumer = p0._consumer  # type: ignore[assignment]
    halt.hold("t", 0, 0, RecordFailedError("t/0@0", "deserialize", "bad"))
    assert p0.next_batch() == []
    assert scripted.paused == {("t", 0)}
    scripted.batches = [records(1, range(2))]
    assert [m.offset() for m in p1.next_batch()] == [0, 1]


def test_waiting_for_commit_answers_fetches_nothing_meanwhile(worker):
    """The worker is blocked in one partition's final commit: nobody takes records, so
    none may pile up in the queues (a broker slow to answer commits)."""
    join(worker, 0), join(worker, 1)
    worker.hold(("t", 1), True)
    with worker.answers_only():
        assert fake(worker).paused == {("t", 0), ("t", 1)}
    assert fake(worker).paused == {("t", 1)}  # held before: still held


def test_a_consumer_that_knows_no_broker_is_replaced_and_reads_on_after_its_queues(worker):
    """librdkafka #5301: statistics that list no configured or learned broker. The new
    consumer starts each partition after the last record queued (its old position), with
    the same partitions paused; queued records stay; unanswered commits fail."""
    a0, a1 = join(worker, 0), join(worker, 1)
    worker.join(("t", 2), 10, Answers().record)
    worker.assign(TopicPartition("t", 2, 7))  # nothing read yet: its assigned offset
    old = fake(worker)
    old.batches = [records(0, range(5)) + records(1, range(3))]
    worker.fill(100, 0)
    old.positions = {("t", 0): 5, ("t", 1): 3}
    assert [m.offset() for m in worker.take(("t", 0), 2)] == [0, 1]
    worker.hold(("t", 1), True)
    worker.commit(TopicPartition("t", 0, 2))
    for _ in range(BROKERLESS_REPORTS):
        worker.tend()
        assert fake(worker) is old
        old.report("logical", "internal")
    worker.tend()
    new = fake(worker)
    assert new is not old and worker.renewals == 1
    assert new.assigned == {("t", 0): 5, ("t", 1): 3, ("t", 2): 7}
    assert new.paused == {("t", 1)}
    assert [m.offset() for m in worker.take(("t", 0), 10)] == [2, 3, 4]
    assert [(err is not None, tps) for err, tps in a0.got] == [(True, [(0, -1001)])]
    assert worker.inflight(("t", 0)) == 0 and a1.got == []
    old.on_commit(None, [TopicPartition("t", 0, 2)])  # the retired consumer's late answer
    old.report("logical")
    assert len(a0.got) == 1
    worker.tend()
    assert fake(worker) is new
    for _ in range(50):  # closed on a thread of its own: it can take ~45 s
        if old.closed:
            break
        threading.Event().wait(0.01)
    assert old.closed


def test_an_outage_or_one_brokerless_report_replaces_nothing(worker):
    """In an outage the brokers are still listed (down); a re-bootstrap lists the
    configured ones again: only consecutive brokerless reports count."""
    join(worker, 0)
    old = fake(worker)
    for _ in range(2 * BROKERLESS_REPORTS):
        old.report("learned", "logical")
        worker.tend()
    for _ in range(3):
        for _ in range(BROKERLESS_REPORTS - 1):
            old.report("logical")
        old.report("configured", "logical")
        worker.tend()
    old.on_stats("not json")
    worker.tend()
    assert fake(worker) is old and worker.renewals == 0


def test_tend_serves_callbacks_when_nothing_consumed_for_a_while(worker, monkeypatch):
    join(worker, 0)
    calls = fake(worker).calls
    worker.tend()
    assert calls == []
    monkeypatch.setattr(consumers, "SERVE_EVERY_S", 0.0)
    worker.tend()
    assert calls == ["consume"]
