"""Source partition offset bookkeeping, with a fake consumer for fault injection only
(the real broker behaviour is covered by the integration tests)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, KafkaError, Message, TopicPartition

from flows import halt
from flows.config import Settings
from flows.errors import RecordFailedError
from flows.kafka import consumers
from flows.kafka.source import KafkaSourcePartition
from flows.process import Processor
from flows.runtime import shutdown


class FakeConsumer:
    """Serves scripted messages; async commits are answered on the next consume()."""

    end = 3  # the log end the broker reports
    group_offset = -1001  # the group's committed offset at start (none)

    def __init__(self, conf: dict[str, Any]) -> None:
        self.on_commit = conf["on_commit"]
        self.messages: list[Message] = []
        self.fail_next_async = False
        self.broker_committed: int | None = None
        self.answers: list[tuple[KafkaError | None, list[TopicPartition]]] = []
        self.position_offset = -1001
        self.assign([TopicPartition("t", 0, 0)])

    def get_watermark_offsets(self, tp: TopicPartition, **_: Any) -> tuple[int, int]:
        return 0, self.end

    def committed(self, tps: list[TopicPartition], **_: Any) -> list[TopicPartition]:
        return [TopicPartition(tps[0].topic, tps[0].partition, self.group_offset)]

    def assign(self, tps: list[TopicPartition]) -> None:
        """(Tests) the log again, from the offset of `tps[0]`."""
        self.messages = [
            Message(topic=tps[0].topic, partition=0, offset=o, value=b"{}")
            for o in range(tps[0].offset, 3)
        ]

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        """(The source, at its first read) what a test left of the log, from the offset;
        no position until a record is consumed, as librdkafka."""
        self.messages = [m for m in self.messages if m.offset() >= tps[0].offset]
        self.position_offset = -1001

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        self.messages = []

    def pause(self, tps: list[TopicPartition]) -> None:
        pass

    resume = pause

    def consume(self, n: int, timeout: float) -> list[Message]:
        for answer in self.answers:
            self.on_commit(*answer)
        self.answers.clear()
        out, self.messages = self.messages[:n], self.messages[n:]
        if out:
            last = out[-1].offset()  # None: an error without an offset
            self.position_offset = last + 1 if last is not None else self.position_offset
        elif self.position_offset >= 0:  # past what it never delivers (transaction markers)
            self.position_offset = self.end
        return out

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tps[0].topic, tps[0].partition, self.position_offset)]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> Any:
        tp = offsets[0]
        if asynchronous:
            if self.fail_next_async:
                self.fail_next_async = False
                failed = TopicPartition(tp.topic, tp.partition, tp.offset)
                self.answers.append((KafkaError(KafkaError.REQUEST_TIMED_OUT), [failed]))
            else:
                self.broker_committed = tp.offset
                self.answers.append((None, [TopicPartition(tp.topic, tp.partition, tp.offset)]))
            return None
        self.broker_committed = tp.offset
        return [TopicPartition(tp.topic, tp.partition, tp.offset)]

    def close(self) -> None:
        pass


SETTINGS = {"KAFKA_TOPICS": "t"}


def own_consumer(monkeypatch: pytest.MonkeyPatch, fake: type[FakeConsumer]) -> None:
    """Each partition built gets its own `fake` consumer, as if each were alone in its
    worker (the sharing itself: tests/unit/flows/kafka/test_consumers.py)."""
    monkeypatch.setattr(consumers, "Consumer", fake)
    monkeypatch.setattr(consumers, "shared", consumers.WorkerConsumer)


@pytest.fixture
def make(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`make(resume_offset, **env)`: a source partition of t/0 on a FakeConsumer."""
    own_consumer(monkeypatch, FakeConsumer)
    monkeypatch.setattr(halt, "HELD", {})
    monkeypatch.setattr(halt, "EXAMINED", {})
    monkeypatch.setattr(shutdown, "_requested", type(shutdown._requested)())

    def build(resume_offset: int | None = None, **env: str) -> KafkaSourcePartition:
        return KafkaSourcePartition(Settings.load({**SETTINGS, **env}), "t", 0, resume_offset)

    return build


@pytest.fixture
def part(make: Any) -> KafkaSourcePartition:
    return make()  # type: ignore[no-any-return]


def read(part: KafkaSourcePartition) -> list[Message]:
    """One `next_batch()` and the processor's pass over it, as the flow runs them."""
    batch = part.next_batch()
    Processor(Settings.load(SETTINGS), [], 1)(batch)
    return batch


def test_a_failed_async_commit_is_retried_and_the_final_commit_lands(part):
    consumer: FakeConsumer = part._consumer  # type: ignore[assignment]
    assert len(read(part)) == 3
    assert part.snapshot() == 3
    consumer.fail_next_async = True
    read(part)  # commits 3 asynchronously; Kafka will refuse it
    read(part)  # the refusal is served here
    assert consumer.broker_committed == 0  # the owner announced at its start, no more
    assert part.snapshot() == 3  # still not confirmed: queued again
    shutdown.request()
    with pytest.raises(StopIteration):
        part.next_batch()  # the final, synchronous commit
    assert consumer.broker_committed == 3


def test_commits_only_what_a_snapshot_named(part):
    consumer: FakeConsumer = part._consumer  # type: ignore[assignment]
    read(part)
    read(part)
    assert consumer.broker_committed == 0  # the owner announced at its start; no epoch closed
    part.snapshot()
    read(part)
    assert consumer.broker_committed == 3


def test_a_snapshot_never_passes_a_batch_the_processor_has_not_examined(part):
    """Bytewax may snapshot in the activation that emitted a batch, before the processor
    sees it (review F1): the snapshot, and the commit that follows it, stay before it."""
    consumer: FakeConsumer = part._consumer  # type: ignore[assignment]
    batch = part.next_batch()
    assert len(batch) == 3
    assert part.snapshot() == 0  # not examined yet
    part.next_batch()
    assert consumer.broker_committed == 0
    Processor(Settings.load(SETTINGS), [], 1)(batch)
    assert part.snapshot() == 3
    part.next_batch()
    assert consumer.broker_committed == 3


def test_a_failure_in_a_batch_snapshotted_before_it_was_examined_is_resumed_at(part):
    """The batch 0..2 with a bad record at 1 is snapshotted before the processor sees it:
    the snapshot stays at 0 (a crash now resumes before the failure, not past it), then at
    the failed record once it is held."""
    consumer: FakeConsumer = part._consumer  # type: ignore[assignment]
    consumer.messages[1] = Message(topic="t", partition=0, offset=1, value=b'{"n": ')
    batch = part.next_batch()
    assert part.snapshot() == 0
    part.next_batch()
    Processor(Settings.load(SETTINGS), [], 1)(batch)
    assert halt.held("t", 0) is not None
    assert part.snapshot() == 1
    with pytest.raises(RecordFailedError, match="t/0@1"):
        part.next_batch()
    assert consumer.broker_committed == 0


def test_stop_at_end_finishes_past_offsets_never_delivered(make):
    """The log ends with a transaction marker at offset 3: the consumer returns 0..2 and
    its position moves to 4 (review F9)."""
    FakeConsumer.end = 4
    try:
        part = make(KAFKA_STOP_AT_END="true")
        consumer: FakeConsumer = part._consumer
        assert len(read(part)) == 3
        for _ in range(3):  # an epoch: idle reads, then the snapshot
            assert read(part) == []
        assert part.snapshot() == 4
        with pytest.raises(StopIteration):
            part.next_batch()  # the final commit, then the end
        assert consumer.broker_committed == 4
    finally:
        FakeConsumer.end = 3


def test_a_final_commit_below_the_group_offset_is_confirmed(make):
    """Resuming from a recovery snapshot (0) behind the group's offset (10): Kafka confirms
    the lower commits, and the graceful stop ends at once (review F12)."""
    FakeConsumer.group_offset = 10
    try:
        part = make(0)
        consumer: FakeConsumer = part._consumer
        assert len(read(part)) == 3
        assert part.snapshot() == 3
        shutdown.request()
        with pytest.raises(StopIteration):
            part.next_batch()
        assert consumer.broker_committed == 3
    finally:
        FakeConsumer.group_offset = -1001


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
    halt.EXAMINED[("t", 0)] = 2
    consumer.messages = [Message(topic="t", partition=0, offset=2, value=b"{}")]
    assert part.next_batch() == []  # the epoch goes on: records before 1 are being written
    assert part.snapshot() == 1
    with pytest.raises(RecordFailedError) as info:
        part.next_batch()
    assert info.value is error
    assert consumer.broker_committed == 0  # the owner announced at its start, no more
    assert len(consumer.messages) == 1  # never consumed


def test_a_held_failure_in_another_partition_does_not_stop_this_one(part):
    halt.hold("t", 1, 0, RecordFailedError("t/1@0", "deserialize", "bad"))
    assert len(read(part)) == 3
    assert part.snapshot() == 3
    part.next_batch()
    assert part._consumer.broker_committed == 3  # type: ignore[attr-defined]


class RetentionConsumer(FakeConsumer):
    """Its log can lose its head (retention, DeleteRecords) or its tail (truncation)
    while the partition is not fetched: `leave_log` sets what the broker then holds, and
    the next fetch answers as librdkafka does under auto.offset.reset=error."""

    low = 0

    def __init__(self, conf: dict[str, Any]) -> None:
        super().__init__(conf)
        self.conf = conf

    def get_watermark_offsets(self, tp: TopicPartition, **_: Any) -> tuple[int, int]:
        return self.low, self.end

    def leave_log(self, low: int, end: int, position: int) -> None:
        self.low, self.end = low, end
        error = KafkaError(KafkaError._AUTO_OFFSET_RESET, "Broker: Offset out of range")
        self.messages.append(Message(topic="t", partition=0, offset=position, error=error))

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        """Assigned again (`WorkerConsumer.move`): the log from the new offset."""
        if self.messages:  # the source's first read: what the test left
            return super().incremental_assign(tps)
        start = tps[0].offset
        self.messages = [
            Message(topic="t", partition=0, offset=o, value=b"{}") for o in range(start, self.end)
        ]


@pytest.fixture
def retention(monkeypatch: pytest.MonkeyPatch, make: Any) -> Any:
    own_consumer(monkeypatch, RetentionConsumer)
    return make


def _deleted_unread() -> float:
    from prometheus_client import REGISTRY

    labels = {"topic": "t", "partition": "0"}
    return REGISTRY.get_sample_value("es_sink_offsets_deleted_unread_total", labels) or 0.0


def test_a_position_the_broker_deleted_reads_on_from_the_log_start_never_its_end(retention, caplog):
    """KAFKA_AUTO_OFFSET_RESET=latest chooses where a new group starts, never where a
    running partition goes: librdkafka's reset would jump to the log end and skip
    offsets 10 to 12, which the broker still holds."""
    part = retention(0, KAFKA_AUTO_OFFSET_RESET="latest")  # a snapshot at 0
    consumer: RetentionConsumer = part._consumer  # type: ignore[assignment]
    assert consumer.conf["auto.offset.reset"] == "error"
    assert [m.offset() for m in read(part)] == [0, 1, 2]
    before = _deleted_unread()
    consumer.leave_log(low=10, end=13, position=3)
    assert read(part) == []  # the broker's answer
    assert [m.offset() for m in read(part)] == [10, 11, 12]
    assert part.snapshot() == 13
    assert "the broker deleted offsets 3 to 9 (retention, DeleteRecords) before they" in (
        caplog.text
    )
    assert _deleted_unread() - before == 7


def test_a_position_out_of_the_log_moves_only_once_the_processor_caught_up(retention):
    """The snapshot follows the new position: records emitted before the broker's answer
    must be examined first, or a snapshot could pass a failure about to be held."""
    part = retention()
    consumer: RetentionConsumer = part._consumer  # type: ignore[assignment]
    consumer.leave_log(low=10, end=12, position=3)
    batch = part.next_batch()
    assert [m.offset() for m in batch] == [0, 1, 2]  # the answer came after them
    assert part.next_batch() == []
    assert part.snapshot() == 0  # not examined, not moved
    Processor(Settings.load(SETTINGS), [], 1)(batch)
    assert [m.offset() for m in read(part)] == [10, 11]
    assert halt.EXAMINED[("t", 0)] == 12
    assert part.snapshot() == 12


def test_a_position_above_the_log_end_reads_from_its_start_or_stops_under_version_offset(
    retention,
):
    """A truncated log (unclean leader election) re-uses offsets: what it holds now is
    new. Under VERSION=offset those offsets would lose to the versions already indexed."""
    from flows.errors import ConfigError

    part = retention()
    consumer: RetentionConsumer = part._consumer  # type: ignore[assignment]
    read(part)
    consumer.leave_log(low=0, end=2, position=3)
    assert read(part) == []
    assert [m.offset() for m in read(part)] == [0, 1]

    part = retention(VERSION="offset")
    consumer = part._consumer  # type: ignore[assignment]
    read(part)
    consumer.leave_log(low=0, end=2, position=3)
    read(part)
    with pytest.raises(ConfigError, match="read position 3 is above the log end 2"):
        read(part)


def test_a_log_cut_back_below_the_position_is_read_again_from_its_start(retention):
    """librdkafka detects a log cut back below the position (an unclean leader election)
    and reports it with no offset: where the logs diverged is unknown, and the new leader
    may already hold new records below the position, so the partition is read from its
    earliest offset again (or the flow stops under VERSION=offset), never on from the
    position."""
    from flows.errors import ConfigError

    for version in ("none", "offset"):
        part = retention(VERSION=version)
        consumer: RetentionConsumer = part._consumer  # type: ignore[assignment]
        assert [m.offset() for m in read(part)] == [0, 1, 2]
        consumer.leave_log(low=0, end=6, position=OFFSET_INVALID)  # diverged at 1
        assert read(part) == []
        if version == "none":
            assert [m.offset() for m in read(part)] == [0, 1, 2, 3, 4, 5]
        else:
            with pytest.raises(ConfigError, match="cut back"):
                read(part)


# ------------------------------------------- a partition added to a topic (flows.kafka.discovery)


class GrownConsumer(FakeConsumer):
    """Topic t got partition 1 while the group had read t/0 only to offset 40 of 100: the
    group's committed offsets (`group`) and the log ends are the broker's, shared by every
    consumer (the flow's and `flows.kafka.discovery`'s)."""

    group: dict[int, tuple[int, str]] = {}
    ends = {0: 100, 1: 3}

    def __init__(self, conf: dict[str, Any]) -> None:
        super().__init__({"on_commit": conf.get("on_commit")})
        self.messages = [Message(topic="t", partition=1, offset=o, value=b"{}") for o in range(3)]

    def get_watermark_offsets(self, tp: TopicPartition, **_: Any) -> tuple[int, int]:
        return 0, self.ends[tp.partition]

    def committed(self, tps: list[TopicPartition], **_: Any) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition, *self.group.get(tp.partition, (-1001, "")))
            for tp in tps
        ]

    def offsets_for_times(self, tps: list[TopicPartition], **_: Any) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.ends[tp.partition]) for tp in tps]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> Any:
        tp = offsets[0]
        self.group[tp.partition] = (tp.offset, tp.metadata or "")
        return super().commit(offsets, asynchronous)


@pytest.fixture
def grown(monkeypatch: pytest.MonkeyPatch, make: Any) -> Any:
    """t/1, built the way the flow builds it: listed (`check_start` looks at the group's
    offsets), then built, on GrownConsumers."""
    from flows.kafka import discovery, source

    own_consumer(monkeypatch, GrownConsumer)
    monkeypatch.setattr(discovery, "Consumer", GrownConsumer)
    monkeypatch.setattr(source, "find_topics", lambda settings: {"t": [0, 1]})
    monkeypatch.setattr(GrownConsumer, "group", {0: (40, "es-sink partitions=1")})
    settings = Settings.load({**SETTINGS, "KAFKA_METADATA_REFRESH_S": "0"})
    flow = source.KafkaSource(settings)
    assert flow.list_parts() == ["t/0", "t/1"]
    return flow.build_part("kafka_in", "t/1", None)


def test_a_partition_added_while_the_older_one_lags_reads_once_it_reached_its_end(grown, caplog):
    """Keys that moved to t/1 have older writes in t/0's backlog: t/1 reads and commits
    nothing until the group's offset of t/0 reaches 100, t/0's end when the run started."""
    consumer: GrownConsumer = grown._consumer
    assert read(grown) == []
    assert grown.view().held == "new partition: waiting for the older partitions to reach t/0@100"
    assert grown.snapshot() == 0
    GrownConsumer.group[0] = (99, "es-sink partitions=2")
    assert read(grown) == []
    assert consumer.broker_committed is None  # a restart finds it new again
    assert grown.snapshot() == 0
    GrownConsumer.group[0] = (100, "es-sink partitions=2")
    assert [m.offset() for m in read(grown)] == [0, 1, 2]
    assert consumer.broker_committed == 0
    assert grown.view().held is None
    said = [r.getMessage() for r in caplog.get_records("setup") + caplog.get_records("call")]
    assert sum("source partition t/1: added to its topic while the group" in m for m in said) == 1
    assert "source partition t/1: the older partitions of its topic reached" in caplog.text


def test_a_stop_while_a_new_partition_waits_commits_nothing(grown):
    """A commit would make it an older partition at the next start: the hold would end."""
    assert read(grown) == []
    grown.snapshot()
    shutdown.request()
    with pytest.raises(StopIteration):
        grown.next_batch()
    assert grown._consumer.broker_committed is None


def test_a_new_group_under_latest_starts_every_partition_at_its_end(
    monkeypatch: pytest.MonkeyPatch, make: Any
) -> None:
    """The first partition built announces its owner at its start offset; that commit is
    marked unread, so the next partition built does not take it for the group's history
    and start at its earliest offset."""
    from flows.kafka import discovery, source

    own_consumer(monkeypatch, GrownConsumer)
    monkeypatch.setattr(discovery, "Consumer", GrownConsumer)
    monkeypatch.setattr(source, "find_topics", lambda settings: {"t": [0, 1]})
    monkeypatch.setattr(GrownConsumer, "group", {})  # a new group: nothing committed
    monkeypatch.setattr(GrownConsumer, "ends", {0: 100, 1: 100})
    settings = Settings.load(
        {**SETTINGS, "KAFKA_METADATA_REFRESH_S": "0", "KAFKA_AUTO_OFFSET_RESET": "latest"}
    )
    flow = source.KafkaSource(settings)
    flow.list_parts()
    first = flow.build_part("kafka_in", "t/0", None)
    second = flow.build_part("kafka_in", "t/1", None)
    assert (first._next, second._next) == (100, 100)
    assert GrownConsumer.group[0][0] == 100 and GrownConsumer.group[0][1].endswith(" unread")
