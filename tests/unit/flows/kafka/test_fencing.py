"""Fencing's metadata, ordering and the source partition's announce/wait/check/release,
on a fake broker shared by two "instances" (fault injection only; the real overlap is
tests/integration/test_fencing.py)."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import time
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from flows import halt
from flows.config import Settings
from flows.kafka import fencing
from flows.kafka.fencing import Owner, metadata_fields
from flows.kafka.source import KafkaSourcePartition
from flows.runtime import control, shutdown
from sinks.elasticsearch import tasks
from tests.unit.flows.kafka.test_source import FakeConsumer, own_consumer


class Broker:
    """The group's committed offset and metadata of partition t/0."""

    def __init__(self) -> None:
        self.offset = -1001
        self.metadata: str | None = None
        self.commits: list[tuple[int, str]] = []
        self.fail_committed = False
        self.reads = 0


BROKER = Broker()


class GroupConsumer(FakeConsumer):
    """FakeConsumer whose commits, with their metadata, go to the shared BROKER."""

    def committed(self, tps: list[TopicPartition], **_: Any) -> list[TopicPartition]:
        BROKER.reads += 1
        if BROKER.fail_committed:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        if BROKER.metadata is None:
            return [TopicPartition("t", 0, BROKER.offset)]
        return [TopicPartition("t", 0, BROKER.offset, BROKER.metadata)]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> Any:
        tp = offsets[0]
        BROKER.offset, BROKER.metadata = tp.offset, tp.metadata
        BROKER.commits.append((tp.offset, tp.metadata))
        return super().commit(offsets, asynchronous)


class Fenced(Exception):
    pass


class TaskList:
    """Elasticsearch's `GET _tasks`, listing a bulk task for each X-Opaque-Id in `listed`."""

    def __init__(self) -> None:
        self.listed: list[str] = []

    def options(self, **_: Any) -> TaskList:
        return self

    @property
    def tasks(self) -> TaskList:
        return self

    def list(self, **_: Any) -> Any:
        return SimpleNamespace(
            body={"tasks": [{"headers": {"X-Opaque-Id": v}} for v in self.listed]}
        )


ES = TaskList()


@pytest.fixture
def make(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`make(**env)`: a new "instance" (its own token) reading t/0 against BROKER."""
    global BROKER, ES
    BROKER = Broker()
    ES = TaskList()
    monkeypatch.setattr(fencing, "_es", lambda settings: ES)
    monkeypatch.setattr(tasks, "POLL_S", 0.01)
    own_consumer(monkeypatch, GroupConsumer)
    monkeypatch.setattr(halt, "HELD", {})
    monkeypatch.setattr(halt, "EXAMINED", {})
    monkeypatch.setattr(shutdown, "_requested", type(shutdown._requested)())

    def stop(topic: str, partition: int, newer: Owner) -> None:
        raise Fenced(newer.token)

    monkeypatch.setattr(fencing, "stop", stop)

    def build(resume: int | None = None, **env: str) -> KafkaSourcePartition:
        """`resume`: the offset of a recovery snapshot."""
        monkeypatch.setattr(fencing, "_process", None)  # a new process: a new token
        settings = Settings.load({"KAFKA_TOPICS": "t", **env})
        return KafkaSourcePartition(settings, "t", 0, resume)

    return build


def owner(part: KafkaSourcePartition) -> Owner:
    assert part._fence is not None
    return part._fence.current()


def epoch(part: KafkaSourcePartition) -> list[Any]:
    """End an epoch (the processor saw everything read) and read once, as Bytewax does."""
    halt.EXAMINED[("t", 0)] = part._emitted
    part.snapshot()
    return part.next_batch()


def test_the_metadata_keeps_the_partition_count_readable() -> None:
    me = dataclasses.replace(fencing._me(), gen=3, lease_s=80.0)
    meta = f"es-sink partitions=4 {me.words()}"
    assert metadata_fields(meta)["partitions"] == "4"
    assert Owner.parse(meta) == me
    assert Owner.parse(f"{meta} released") == dataclasses.replace(me, released=True)
    assert Owner.parse("es-sink partitions=4") is None  # committed before fencing
    for lease in ("inf", "nan", "1e12", "0", "-5"):  # garbled or foreign: no owner to wait on
        assert Owner.parse(meta.replace("lease=", f"lease={lease} old=")) is None, lease
    assert metadata_fields("something else") == {}


def test_owners_are_ordered_by_generation_then_start_then_token() -> None:
    a = Owner("aaa", 2, 5_000, 10.0)
    assert Owner("zzz", 3, 1_000, 10.0).outranks(a)
    assert not Owner("zzz", 1, 9_000, 10.0).outranks(a)
    assert Owner("bbb", 2, 5_001, 10.0).outranks(a)
    assert Owner("bbb", 2, 5_000, 10.0).outranks(a)
    assert not a.outranks(a)


def test_only_a_process_gone_from_this_host_is_known_stopped() -> None:
    me = fencing._me()
    assert not me.known_stopped()  # alive
    child = subprocess.Popen(["sleep", "30"])
    started = fencing._started(child.pid)
    assert started is not None
    other = dataclasses.replace(me, pid=child.pid, start=started)
    assert not other.known_stopped()
    child.kill()
    child.wait()
    assert other.known_stopped()  # gone (and reaped)
    assert dataclasses.replace(me, start=me.start + 1).known_stopped()  # its pid was reused
    assert not dataclasses.replace(other, node="elsewhere").known_stopped()  # cannot tell
    assert not dataclasses.replace(other, node="").known_stopped()


def test_a_new_group_announces_itself_at_its_start_and_waits_for_nobody(make: Any) -> None:
    """The first owner commits its name at the start offset before it reads: a successor
    restarted after it crashed then knows whose bulks may still run in Elasticsearch."""
    part = make()
    assert BROKER.commits == [(0, f"es-sink {owner(part).words()} unread")]
    assert len(part.next_batch()) == 3  # no previous owner to wait for
    epoch(part)  # commits 3 under its name
    assert BROKER.commits[-1] == (3, f"es-sink {owner(part).words()}")
    assert owner(part).gen == 1


def test_an_owner_that_did_not_release_is_waited_for_then_taken_over(make: Any) -> None:
    older = make()
    older.next_batch()
    epoch(older)  # older commits 3, generation 1
    newer = make(FENCE_WAIT_S="0.3")
    assert owner(newer).gen == 2
    assert BROKER.commits[-1] == (3, f"es-sink {owner(newer).words()}")  # the announcement
    BROKER.offset = 0  # so that the newer one has something to read
    newer._next = newer._emitted = 0
    newer._consumer.assign([TopicPartition("t", 0, 0)])
    assert newer.next_batch() == []  # waiting
    commits = len(BROKER.commits)
    assert epoch(older) == []  # the older one's next epoch: it holds, committing nothing
    assert len(BROKER.commits) == commits
    assert epoch(newer) == []  # the newer one's: it announces itself again
    assert epoch(older) == []  # which shows it runs: the older one goes on holding
    assert len(BROKER.commits) == commits + 1  # the re-announcement only
    time.sleep(0.3)
    reads = BROKER.reads
    assert len(newer.next_batch()) == 3  # the wait is over; checked once more, then reads
    assert BROKER.reads == reads + 1
    assert BROKER.commits[-1] == (0, f"es-sink {owner(newer).words()}")  # no longer waiting
    assert "waiting" not in BROKER.commits[-1][1]
    with pytest.raises(Fenced, match=owner(newer).token):
        epoch(older)  # the newer one reads: the older one stops before committing


def test_an_older_commit_over_the_announcement_is_overwritten_and_waited_for_again(
    make: Any,
) -> None:
    older = make()
    older.next_batch()
    epoch(older)
    older_meta = BROKER.metadata
    newer = make(FENCE_WAIT_S="600")
    BROKER.metadata = older_meta  # the older one's commit raced the announcement
    deadline = newer._fence._deadline  # type: ignore[union-attr]
    assert epoch(newer) == []
    assert BROKER.commits[-1] == (3, f"es-sink {owner(newer).words()}")  # committed again
    assert newer._fence._deadline > deadline  # type: ignore[union-attr,operator]


def test_an_unanswered_check_reads_and_commits_nothing(make: Any) -> None:
    part = make()
    part.next_batch()
    halt.EXAMINED[("t", 0)] = 3
    part.snapshot()
    BROKER.fail_committed = True
    commits = list(BROKER.commits)
    assert part.next_batch() == []
    assert part.next_batch() == []
    assert BROKER.commits == commits
    BROKER.fail_committed = False
    part.next_batch()
    assert BROKER.commits[-1][0] == 3


def test_an_unanswered_check_does_not_hold_a_stop(make: Any) -> None:
    part = make(KAFKA_STOP_AT_END="true")
    part.next_batch()
    halt.EXAMINED[("t", 0)] = 3
    part.snapshot()
    BROKER.fail_committed = True  # the check cannot read; the final commit decides
    with pytest.raises(StopIteration):
        part.next_batch()
    assert BROKER.commits[-1][0] == 3


def test_another_tools_commit_is_overwritten_with_a_warning(
    make: Any, caplog: pytest.LogCaptureFixture
) -> None:
    part = make()
    part.next_batch()
    epoch(part)  # commits 3 under its name
    BROKER.offset, BROKER.metadata = 0, ""  # e.g. kafka-consumer-groups --reset-offsets
    with caplog.at_level(logging.WARNING, logger="flows.kafka.fencing"):
        epoch(part)
    assert BROKER.commits[-1] == (3, f"es-sink {owner(part).words()}")
    (line,) = [r.getMessage() for r in caplog.records if "another tool" in r.getMessage()]
    assert "t/0: offset 0 was committed" in line and "stop every process" in line


def test_a_clean_end_releases_the_partition(make: Any) -> None:
    part = make(KAFKA_STOP_AT_END="true")
    part.next_batch()
    halt.EXAMINED[("t", 0)] = 3
    part.snapshot()
    with pytest.raises(StopIteration):
        part.next_batch()  # the final commit, released
    assert BROKER.commits[-1] == (3, f"es-sink {owner(part).words()} released")
    restarted = make(FENCE_WAIT_S="600")
    assert not restarted._fence.waiting()  # type: ignore[union-attr]


def test_fencing_off_names_no_owner_and_checks_nothing(make: Any) -> None:
    part = make(FENCING="false")
    part.next_batch()
    epoch(part)
    assert BROKER.commits == [(3, "")]
    assert BROKER.reads == 1  # the start position only


def test_stop_says_who_took_over_in_one_line_and_exits_3(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    exits: list[int] = []
    monkeypatch.setattr(fencing.os, "_exit", exits.append)
    monkeypatch.setattr("sinks.failing._failing", type(shutdown._requested)())
    newer = Owner("5f0c9a1e2b7d", 4, 1_767_225_600_000, 80.0, "host-b", 7)
    with caplog.at_level(logging.ERROR):
        fencing.stop("orders", 2, newer)
    assert exits == [fencing.FENCED_EXIT_STATUS] == [3]
    assert caplog.messages == [
        "fenced: partition orders/2 is owned by a newer instance 5f0c9a1e2b7d (host host-b, "
        "pid 7, generation 4) since 2026-01-01T00:00:00+00:00; this instance stops without "
        "committing"
    ]


def more(part: KafkaSourcePartition) -> None:
    """(Tests) one more record in the log of `part`'s consumer."""
    part._consumer.messages.append(Message(topic="t", partition=0, offset=3, value=b"{}"))
    part._consumer.end = 4  # type: ignore[misc]


def test_a_newer_owner_that_released_the_partition_is_taken_back_with_one_warning(
    make: Any, caplog: pytest.LogCaptureFixture
) -> None:
    older = make()
    older.next_batch()
    epoch(older)  # older owns t/0, generation 1
    newer = make(FENCE_WAIT_S="0.05")
    time.sleep(0.1)
    assert newer.next_batch() == []  # waited, then read (nothing new)
    shutdown._requested.set()  # stopped (an aborted rollout)
    with pytest.raises(StopIteration):
        epoch(newer)
    shutdown._requested.clear()
    assert BROKER.metadata is not None and BROKER.metadata.endswith(" released")
    assert "waiting" not in BROKER.metadata
    more(older)
    with caplog.at_level(logging.WARNING, logger="flows.kafka.fencing"):
        assert len(epoch(older)) == 1  # takes it back under its name and reads on
        assert BROKER.commits[-1] == (3, f"es-sink {owner(older).words()}")
        epoch(older)
        assert BROKER.commits[-1] == (4, f"es-sink {owner(older).words()}")
    (line,) = [m for m in caplog.messages if "newer instance" in m]
    assert f"newer instance {owner(newer).token}" in line
    assert line.endswith("released it (it stopped cleanly); taking the partition back")


def test_a_newer_owner_gone_before_reading_is_taken_back_after_its_lease(
    make: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    older = make()
    older.next_batch()
    epoch(older)
    monkeypatch.setattr(fencing, "lease_s", lambda settings: 0.3)
    newer = make(FENCE_WAIT_S="600")  # announces itself, then crashes: never beats
    commits = list(BROKER.commits)
    more(older)
    with caplog.at_level(logging.WARNING, logger="flows.kafka.fencing"):
        assert epoch(older) == []  # held: reads and commits nothing
        assert older.next_batch() == []
        assert BROKER.commits == commits
        time.sleep(0.3)
        assert len(epoch(older)) == 1  # its lease passed without a beat: taken back, read
        assert BROKER.commits[-1] == (3, f"es-sink {owner(older).words()}")
        epoch(older)
    held, back = [m for m in caplog.messages if "newer instance" in m]
    assert f"newer instance {owner(newer).token}" in held and "announced itself" in held
    assert back.endswith(
        "did not re-announce itself within its lease of 0.3s (gone); taking the partition back"
    )


def test_a_waiting_newer_owner_that_re_announces_itself_stops_the_older_one(
    make: Any,
) -> None:
    older = make()
    older.next_batch()
    epoch(older)
    newer = make(FENCE_WAIT_S="0.3")
    assert epoch(older) == []  # held
    epoch(newer)  # its next epoch: announces itself again
    assert BROKER.metadata is not None and BROKER.metadata.endswith(" beat=1 waiting")
    assert epoch(older) == []  # it runs: still held
    time.sleep(0.3)
    epoch(newer)  # reads
    with pytest.raises(Fenced, match=owner(newer).token):
        epoch(older)


def test_a_held_partition_stops_without_committing(make: Any) -> None:
    older = make()
    older.next_batch()
    epoch(older)
    make(FENCE_WAIT_S="600")
    assert epoch(older) == []  # held
    commits = list(BROKER.commits)
    shutdown._requested.set()
    with pytest.raises(StopIteration):
        older.next_batch()
    assert BROKER.commits == commits


def test_after_a_crash_on_this_host_the_dead_owners_bulks_are_waited_for(make: Any) -> None:
    dead = make()
    dead.next_batch()
    epoch(dead)
    gone = dataclasses.replace(owner(dead), start=owner(dead).start + 1)  # no such process
    BROKER.metadata = f"es-sink {gone.words()}"
    ES.listed = [tasks.opaque_id(gone.token, "es-0003"), "es-sink/someone-else/es-0003", "x"]
    restarted = make(FENCE_WAIT_S="600")  # no lease to wait: it is known to be gone
    restarted._next = restarted._emitted = 0
    restarted._consumer.assign([TopicPartition("t", 0, 0)])
    for _ in range(5):
        assert restarted.next_batch() == []  # its bulk still runs in Elasticsearch
        time.sleep(0.02)
    ES.listed = ES.listed[1:]  # done (another owner's bulk does not matter)
    time.sleep(0.05)
    assert len(restarted.next_batch()) == 3


def test_the_wait_for_a_dead_owners_bulks_is_bounded_by_its_lease(make: Any) -> None:
    dead = make()
    dead.next_batch()
    epoch(dead)
    gone = dataclasses.replace(owner(dead), start=owner(dead).start + 1, lease_s=0.2)
    BROKER.metadata = f"es-sink {gone.words()}"
    ES.listed = [tasks.opaque_id(gone.token, "es-0000")]  # never done
    restarted = make()
    restarted._next = restarted._emitted = 0
    restarted._consumer.assign([TopicPartition("t", 0, 0)])
    assert restarted.next_batch() == []
    time.sleep(0.3)
    assert len(restarted.next_batch()) == 3


def test_a_released_partition_waits_for_no_bulk(make: Any) -> None:
    part = make(KAFKA_STOP_AT_END="true")
    part.next_batch()
    halt.EXAMINED[("t", 0)] = 3
    part.snapshot()
    with pytest.raises(StopIteration):
        part.next_batch()
    ES.listed = [tasks.opaque_id(owner(part).token, "es-0000")]  # would hold a restart
    restarted = make()
    assert not restarted._fence.waiting()  # type: ignore[union-attr]


def test_a_restart_after_a_crash_while_waiting_waits_too(make: Any, monkeypatch: Any) -> None:
    """A newer instance announced itself, waited for the older one, and crashed on this host;
    its restart must wait as well: the older one may still run and write."""
    older = make()
    older.next_batch()
    epoch(older)
    newer = make(FENCE_WAIT_S="600")  # announces, waits; then crashes on this host
    monkeypatch.setattr(
        fencing.Owner, "known_stopped", lambda self: self.token == owner(newer).token
    )
    again = make(FENCE_WAIT_S="600")  # the supervisor restarts it on the same host
    assert again._fence.waiting()
    assert again.next_batch() == []


def test_a_stop_while_waiting_releases_nothing_and_the_next_owner_waits_as_it_did(
    make: Any, monkeypatch: Any
) -> None:
    """A releasing stop in the middle of the wait let the next instance read at once: a
    dead owner's bulk still queued in Elasticsearch landed after its newer writes, and a
    live older owner wrote beside it until its next check."""
    dead = make()
    dead.next_batch()
    epoch(dead)  # crashed (killed) with a bulk still queued in Elasticsearch
    ES.listed = [tasks.opaque_id(owner(dead).token, "es-0001")]
    waiting = make(FENCE_WAIT_S="600")
    commits = list(BROKER.commits)
    assert f" after={owner(dead).token}" in commits[-1][1]
    assert waiting.next_batch() == []  # waiting
    shutdown._requested.set()  # stopped while it waits (a re-rolled rollout)
    with pytest.raises(StopIteration):
        waiting.next_batch()
    shutdown._requested.clear()
    assert BROKER.commits == commits  # not released
    monkeypatch.setattr(fencing.Owner, "known_stopped", lambda self: True)  # both gone
    third = make(FENCE_WAIT_S="0")
    third._next = third._emitted = 0
    third._consumer.assign([TopicPartition("t", 0, 0)])
    for _ in range(5):
        assert third.next_batch() == []  # the first owner's bulk still runs
        time.sleep(0.02)
    ES.listed = []
    time.sleep(0.05)
    assert len(third.next_batch()) == 3


def test_an_older_owner_holds_while_the_newer_one_beats_and_takes_back_when_it_falls_silent(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopping at the newer one's first re-announcement left nothing consuming when the
    newer one was then stopped or crashed during the rest of its wait."""
    older = make()
    older.next_batch()
    epoch(older)
    monkeypatch.setattr(fencing, "lease_s", lambda settings: 0.3)
    newer = make(FENCE_WAIT_S="600")
    assert epoch(older) == []  # held
    epoch(newer)  # beat=1
    assert epoch(older) == []  # still held: the newer one runs, but reads nothing yet
    commits = list(BROKER.commits)  # then the newer one crashes: no more beats
    more(older)
    time.sleep(0.35)
    assert len(epoch(older)) == 1  # its lease passed without a beat: taken back, read
    assert BROKER.commits[len(commits)][1] == f"es-sink {owner(older).words()}"


def test_taking_back_below_the_own_position_reads_again_from_the_release(
    make: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The newer owner re-wrote offsets 0..2 after the older one had written up to 3, and
    released at 3: reading on from 4 left a document written in both ranges at the older
    write."""
    older = make()
    older.next_batch()
    more(older)
    epoch(older)
    epoch(older)  # durable and committed at 4
    assert BROKER.offset == 4
    newer = make(FENCE_WAIT_S="0.05")
    newer._next = newer._emitted = 0  # (a Kafka-side cut kept the group at 0 meanwhile)
    newer._consumer.assign([TopicPartition("t", 0, 0)])
    time.sleep(0.1)
    assert len(newer.next_batch()) == 3  # reads offsets 0..2
    shutdown._requested.set()
    with pytest.raises(StopIteration):
        epoch(newer)
    shutdown._requested.clear()
    assert BROKER.offset == 3 and BROKER.metadata is not None
    assert BROKER.metadata.endswith(" released")
    with caplog.at_level(logging.WARNING, logger="flows.kafka.source"):
        assert epoch(older) == []  # (the fake consumer serves nothing after a move)
    assert older._next == older._emitted == 3
    assert older._shared._assigned[("t", 0)] == 3  # fetched again from 3
    assert BROKER.commits[-1] == (3, f"es-sink {owner(older).words()}")
    assert any("released it at offset 3, below this instance's 4" in m for m in caplog.messages)


def test_a_bulk_listed_before_the_task_list_failed_is_still_listed_at_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A timed-out request seen queued, then the listing itself timed out (the same
    overload): treated as gone, it was sent again while it could still land last."""
    from elasticsearch import ConnectionTimeout

    answers: list[Any] = [1, 1]

    def running(client: Any, owner: str, partition: str | None = None) -> int:
        if answers:
            return int(answers.pop(0))
        raise ConnectionTimeout("listing timed out")

    monkeypatch.setattr(tasks, "running", running)
    monkeypatch.setattr(tasks, "POLL_S", 0.01)
    assert tasks.wait_gone(object(), "o", "p", 0.1, None) is tasks.Gone.BOUND  # type: ignore[arg-type]
    answers[:] = []
    assert tasks.wait_gone(object(), "o", "p", 0.05, None) is tasks.Gone.UNLISTED  # type: ignore[arg-type]


# -- es-sink offsets reset: its commit, and the partitions that find it

RESET = fencing.Reset(1_767_225_600_000, "ops1")
RESET_WORDS = "reset-by=es-sink reset-at=1767225600000 reset-host=ops1"


class LogConsumer(GroupConsumer):
    """GroupConsumer whose partition, assigned again (`WorkerConsumer.move`), serves its
    log from the new offset."""

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        if self.messages:  # the source's first read: what the test left
            return super().incremental_assign(tps)
        self.messages = [
            Message(topic="t", partition=0, offset=o, value=b"{}")
            for o in range(tps[0].offset, self.end)
        ]
        return None


def reset_commit(offset: int) -> None:
    """What `es-sink offsets reset` commits over the group's current commit."""
    BROKER.offset, BROKER.metadata = offset, fencing.reset_metadata(BROKER.metadata, RESET)


def test_a_resets_commit_names_no_owner_and_keeps_the_count_and_the_generation() -> None:
    me = dataclasses.replace(fencing._me(), gen=3, lease_s=80.0)
    meta = fencing.reset_metadata(f"es-sink partitions=4 {me.words()} released", RESET)
    assert meta == f"es-sink partitions=4 gen=3 {RESET_WORDS}"
    assert Owner.parse(meta) is None  # no instance takes it for its own
    assert fencing.Reset.parse(meta) == RESET
    assert fencing.Reset.parse(f"es-sink partitions=4 {me.words()}") is None
    assert fencing.reset_metadata("", RESET) == f"es-sink {RESET_WORDS}"  # another tool's
    assert fencing.Reset.parse("es-sink reset-by=someone reset-at=1") is None
    assert RESET.describe() == "es-sink offsets reset at 2026-01-01T00:00:00+00:00 on host ops1"


def test_who_holds_a_partition_for_a_tool_that_would_move_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    me = dataclasses.replace(fencing._me(), gen=1, lease_s=80.0, at_ms=1_000_000)
    now = 1_000_000 + 10_000
    assert fencing.holds(me, now) == "its process runs on this host"
    assert fencing.holds(dataclasses.replace(me, waiting=True), now) is not None
    assert fencing.holds(dataclasses.replace(me, released=True), now) is None
    assert fencing.holds(dataclasses.replace(me, start=me.start + 1), now) is None  # crashed
    assert fencing.holds(None, now) is None
    elsewhere = dataclasses.replace(me, node="another-host")
    why = fencing.holds(elsewhere, now)
    assert why is not None and why.startswith("it has not released it and committed last at ")
    assert why.endswith("a running instance commits at least every 3600 s")
    # A running instance commits at least every RECOMMIT_S: older than that and its lease,
    # it no longer runs.
    gone_at = 1_000_000 + int((fencing.RECOMMIT_S + 80.0) * 1000)
    assert fencing.holds(elsewhere, gone_at - 1) is not None
    assert fencing.holds(elsewhere, gone_at) is None
    earlier_version = dataclasses.replace(elsewhere, at_ms=0)  # no commit time to judge by
    assert fencing.holds(earlier_version, gone_at) == "it has not released it"


def test_every_commit_names_its_time(make: Any) -> None:
    before = int(time.time() * 1000)
    make()
    found = Owner.parse(BROKER.metadata)
    assert found is not None and before <= found.at_ms <= int(time.time() * 1000)


def test_a_running_partition_follows_a_reset_and_commits_it_under_its_name(
    make: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    own_consumer(monkeypatch, LogConsumer)
    part = make()
    assert len(part.next_batch()) == 3
    epoch(part)  # commits 3 under its name
    gen = owner(part).gen
    reset_commit(1)  # es-sink offsets reset --force, while it runs
    with caplog.at_level(logging.WARNING):
        batch = epoch(part)
    assert [m.offset() for m in batch] == [1, 2]  # read again from the reset's offset
    (line,) = [m for m in caplog.messages if "offsets reset" in m]
    assert line == (
        "source partition t/0: es-sink offsets reset at 2026-01-01T00:00:00+00:00 on host "
        "ops1 moved the group's offset to 1; reading from there (the position was 3)"
    )
    assert not [m for m in caplog.messages if "another tool" in m]
    # Committed under its name at once, the reset's fields kept until a snapshot from the
    # reset's offset on is durable (the second's commit).
    assert BROKER.commits[-1] == (1, f"es-sink {RESET_WORDS} {owner(part).words()}")
    assert owner(part).gen == gen
    epoch(part)  # the first snapshot's commit
    assert BROKER.commits[-1] == (3, f"es-sink {RESET_WORDS} {owner(part).words()}")
    epoch(part)  # the second's
    assert BROKER.commits[-1] == (3, f"es-sink {owner(part).words()}")
    assert len([m for m in caplog.messages if "offsets reset" in m]) == 1


def test_a_reset_found_before_the_processor_caught_up_moves_once_it_has(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    own_consumer(monkeypatch, LogConsumer)
    part = make()
    part.next_batch()
    epoch(part)
    reset_commit(0)
    part.snapshot()
    # The epoch's first read finds the reset while a batch emitted is not examined yet.
    halt.EXAMINED[("t", 0)] = 2
    assert part.next_batch() == []
    assert part.snapshot() == 2  # the old position, never committed
    commits = len(BROKER.commits)
    assert part.next_batch() == []
    assert len(BROKER.commits) == commits
    halt.EXAMINED[("t", 0)] = 3
    assert [m.offset() for m in part.next_batch()] == [0, 1, 2]
    assert BROKER.commits[-1][0] == 0


def test_a_reset_is_followed_over_the_recovery_snapshot_once(
    make: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With a recovery directory, a start after `es-sink offsets reset` reads from the
    reset's offset, not from its snapshot; once a snapshot from there on is durable, a
    restart resumes from its snapshot again."""
    first = make(KAFKA_STOP_AT_END="true")
    first.next_batch()
    halt.EXAMINED[("t", 0)] = 3
    first.snapshot()
    with pytest.raises(StopIteration):
        first.next_batch()  # committed 3, released
    reset_commit(0)  # es-sink offsets reset --to earliest
    with caplog.at_level(logging.INFO, logger="flows.kafka.source"):
        again = make(3)  # its recovery snapshot says 3
    assert again._next == 0
    (line,) = [m for m in caplog.messages if "starts at" in m]
    assert line == (
        "source partition t/0 starts at offset 0 (group es-sink committed offset, set by "
        "es-sink offsets reset at 2026-01-01T00:00:00+00:00 on host ops1, not the recovery "
        "snapshot's 3); log end 3"
    )
    assert BROKER.commits[-1] == (0, f"es-sink {RESET_WORDS} {owner(again).words()}")
    # Stopped (or crashed) before a snapshot from 0 on is durable: it still starts at 0.
    # (FENCE_WAIT_S=0: every "instance" here is this process, which runs.)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="flows.kafka.source"):
        assert make(3, FENCE_WAIT_S="0")._next == 0
    (line,) = [m for m in caplog.messages if "starts at" in m]
    assert "(group es-sink committed offset, following es-sink offsets reset at " in line
    part = make(3, FENCE_WAIT_S="0")
    part._consumer.assign([TopicPartition("t", 0, 0)])
    time.sleep(0.05)  # the previous owner's bulks: none
    assert len(part.next_batch()) == 3
    epoch(part)
    epoch(part)
    assert RESET_WORDS not in (BROKER.metadata or "")
    assert make(2, FENCE_WAIT_S="0")._next == 2  # the snapshot: the reset is not followed twice


def test_a_followed_reset_whose_snapshot_resumes_where_the_group_is_overrides_nothing(
    make: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A clean stop soon after following a reset leaves its fields in the last commit;
    a snapshot at that same offset resumes as usual and the next commit drops them."""
    reset_commit(0)
    part = make(3, KAFKA_STOP_AT_END="true")
    part._consumer.assign([TopicPartition("t", 0, 0)])
    part.next_batch()
    halt.EXAMINED[("t", 0)] = 3
    part.snapshot()
    with pytest.raises(StopIteration):
        part.next_batch()
    assert BROKER.commits[-1] == (3, f"es-sink {RESET_WORDS} {owner(part).words()} released")
    with caplog.at_level(logging.INFO, logger="flows.kafka.source"):
        again = make(3)
    (line,) = [m for m in caplog.messages if "starts at" in m]
    assert line == "source partition t/0 starts at offset 3 (recovery snapshot); log end 3"
    assert BROKER.commits[-1] == (3, f"es-sink {owner(again).words()}")


def test_a_reset_is_followed_without_fencing_too(make: Any) -> None:
    BROKER.offset, BROKER.metadata = 3, "es-sink partitions=1"
    reset_commit(1)
    part = make(3, FENCING="false")
    assert part._next == 1
    part._consumer.assign([TopicPartition("t", 0, 1)])
    part.next_batch()
    epoch(part)
    assert BROKER.commits[-1] == (3, f"es-sink {RESET_WORDS}")
    epoch(part)
    assert BROKER.commits[-1] == (3, "")


def test_a_reset_over_a_crashed_owner_still_makes_the_next_owner_wait_for_its_bulks(
    make: Any,
) -> None:
    """The reset's commit named no owner, so the next start waited for nobody: a bulk the
    crashed process left queued in Elasticsearch landed after the new run's newer write."""
    dead = make()
    dead.next_batch()
    epoch(dead)  # crashed (on this host) with a bulk still queued
    gone = dataclasses.replace(owner(dead), start=owner(dead).start + 1)  # no such process
    assert fencing.holds(gone, int(time.time() * 1000)) is None  # a reset needs no --force
    ES.listed = [tasks.opaque_id(gone.token, "es-0002")]
    BROKER.offset = 0
    BROKER.metadata = fencing.reset_metadata(f"es-sink {gone.words()}", fencing.Reset(1, "ops"))
    assert f"reset-after={gone.token}" in BROKER.metadata
    restarted = make(FENCE_WAIT_S="600")
    restarted._consumer.assign([TopicPartition("t", 0, 0)])
    for _ in range(5):
        assert restarted.next_batch() == []  # the dead owner's bulk still runs
        time.sleep(0.02)
    assert f" after={gone.token}" in BROKER.commits[-1][1]  # passed on while it waits
    ES.listed = []
    time.sleep(0.05)
    assert len(restarted.next_batch()) == 3


def test_a_reset_keeps_a_recorded_pause() -> None:
    """The README's backfill recipe (pause, stop, reset, start) started unpaused."""
    paused = "es-sink partitions=2 gen=1 paused=1700000000000 paused_by=alice@ops"
    after = fencing.reset_metadata(paused, fencing.Reset(1, "ops"))
    pause = control.recorded(after)
    assert pause is not None and (pause.since_ms, pause.by) == (1700000000000, "alice@ops")
