"""Pause, resume, stop and restart without a flow behind them: the pause a commit records
(flows.runtime.control), what a source partition commits for it (flows.kafka.source), the
operator's stop and restart (flows.runtime.shutdown, flows.kafka.discovery) and what `es-sink
stop` and `es-sink restart` conclude from the status API's answers (flows.cli.control)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from flows import halt
from flows.cli.control import Answer, Restarted, Stopped, missing_processes
from flows.config import Settings
from flows.kafka import discovery
from flows.runtime import control, lifecycle, shutdown
from tests.unit.flows.kafka.test_source import FakeConsumer, own_consumer, read


@pytest.fixture(autouse=True)
def reading() -> Iterator[None]:
    control.resume()
    yield
    control.resume()


# -- the pause a commit records


def test_a_pause_is_recorded_as_metadata_words_and_read_back() -> None:
    assert control.marker() == ""
    assert control.pause("alice@host-1")
    assert not control.pause("bob@elsewhere"), "a second pause changes nothing"
    pause = control.current()
    assert pause is not None and pause.by == "alice@host-1"
    assert control.marker() == f"paused={pause.since_ms} paused_by=alice@host-1"
    meta = f"es-sink partitions=4 {control.marker()} owner=5f0c9a1e2b7d gen=3 released"
    assert control.recorded(meta) == pause
    assert control.resume("alice@host-1")
    assert control.current() is None and control.marker() == ""


@pytest.mark.parametrize(
    "metadata",
    [None, "", "es-sink partitions=4", "es-sink paused=soon paused_by=x", "other paused=1"],
)
def test_metadata_without_an_es_sink_pause_records_none(metadata: str | None) -> None:
    assert control.recorded(metadata) is None


def test_who_paused_is_one_safe_word() -> None:
    assert control.who("alice@host-1") == "alice@host-1"
    assert control.who("eve paused=1 x") == "eve_paused_1_x"
    assert control.who(None) == control.who("  ") == "unknown"
    assert len(control.who("x" * 500)) == control.MAX_BY


def test_a_start_is_paused_by_the_earliest_pause_recorded_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metadata = [
        "es-sink partitions=2 owner=a gen=1",
        "es-sink partitions=2 paused=1767225600000 paused_by=bob@b owner=a gen=1",
        "es-sink paused=1767225500000 paused_by=alice@a",
        None,
    ]
    with caplog.at_level(logging.INFO, logger="flows.runtime.control"):
        restored = control.restore(metadata, "orders-group")
    assert restored == control.Pause(1767225500000, "alice@a")
    assert control.paused and control.current() == restored
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == (
        "starting paused: group orders-group was paused since 2025-12-31T23:58:20Z by alice@a "
        "(recorded in its committed offsets); nothing is read until `es-sink resume` "
        "(PUT /resume on every process)"
    )


def test_a_start_without_a_recorded_pause_reads() -> None:
    assert control.restore(["es-sink partitions=1", None], "g") is None
    assert not control.paused


def test_every_partition_of_the_topics_is_asked_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only this process's partitions: a cluster paused in another layout pauses all."""
    asked: list[list[tuple[str, int]]] = []

    class Group:
        def __init__(self, conf: dict[str, Any]) -> None:
            pass

        def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
            asked.append([(tp.topic, tp.partition) for tp in tps])
            meta = {1: "es-sink paused=5 paused_by=ops@h"}
            return [
                TopicPartition(tp.topic, tp.partition, 3, meta.get(tp.partition, "")) for tp in tps
            ]

        def close(self) -> None:
            pass

    monkeypatch.setattr(discovery, "Consumer", Group)
    discovery.restore_pause(Settings.load({"KAFKA_TOPICS": "t"}), {"t": [0, 1, 2]})
    assert asked == [[("t", 0), ("t", 1), ("t", 2)]]
    assert control.current() == control.Pause(5, "ops@h")


# -- what a source partition commits


class MetadataConsumer(FakeConsumer):
    """A FakeConsumer that keeps the metadata of every commit."""

    metadata: list[tuple[int, str]]

    def __init__(self, conf: dict[str, Any]) -> None:
        super().__init__(conf)
        self.metadata = []

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> Any:
        self.metadata.append((offsets[0].offset, offsets[0].metadata or ""))
        return super().commit(offsets, asynchronous)


@pytest.fixture
def source(monkeypatch: pytest.MonkeyPatch) -> Any:
    from flows.kafka.source import KafkaSourcePartition

    own_consumer(monkeypatch, MetadataConsumer)
    monkeypatch.setattr(halt, "HELD", {})
    monkeypatch.setattr(halt, "EXAMINED", {})
    monkeypatch.setattr(shutdown, "_requested", threading.Event())

    def build(**env: str) -> KafkaSourcePartition:
        return KafkaSourcePartition(Settings.load({"KAFKA_TOPICS": "t", **env}), "t", 0, None)

    return build


def test_a_pause_and_a_resume_are_committed_at_once_without_moving_the_offset(source) -> None:
    part = source()
    consumer: MetadataConsumer = part._consumer
    assert len(read(part)) == 3
    assert part.snapshot() == 3
    read(part)  # the epoch's commit: 3
    control.pause("ops@h")
    mark = control.marker()
    read(part)  # the pause is seen: committed at the next read
    read(part)
    assert consumer.metadata[-1][0] == 3 and mark in consumer.metadata[-1][1]
    assert "owner=" in consumer.metadata[-1][1]
    count = len(consumer.metadata)
    read(part)
    assert len(consumer.metadata) == count, "committed once, not on every read"
    control.resume("ops@h")
    read(part)
    read(part)
    assert consumer.metadata[-1][0] == 3 and "paused" not in consumer.metadata[-1][1]


def test_a_paused_stop_releases_its_partition_with_the_pause(source) -> None:
    control.pause("ops@h")
    part = source()
    consumer: MetadataConsumer = part._consumer
    assert "paused=" in consumer.metadata[0][1], "the announcement at start records it"
    assert read(part) == []
    shutdown.request()
    with pytest.raises(StopIteration):
        part.next_batch()
    last = consumer.metadata[-1][1]
    assert last.endswith("released") and control.marker() in last


def test_a_pause_before_any_read_keeps_the_commit_unread(source) -> None:
    """Under KAFKA_AUTO_OFFSET_RESET=latest an owner's announcement is no sign of a read
    (`discovery.earliest_reason`): a commit that only records a pause is none either."""
    part = source()
    consumer: MetadataConsumer = part._consumer
    assert consumer.metadata[0][1].endswith(" unread")
    control.pause("ops@h")
    part.next_batch()
    part.next_batch()
    assert consumer.metadata[-1][0] == 0 and "paused=" in consumer.metadata[-1][1]
    assert " unread" in consumer.metadata[-1][1]


def test_without_fencing_a_partition_never_committed_records_the_pause_unread(source) -> None:
    part = source(FENCING="false")
    consumer: MetadataConsumer = part._consumer
    assert consumer.metadata == []
    control.pause("ops@h")
    part.next_batch()
    part.next_batch()
    assert consumer.metadata == [(0, f"es-sink {control.marker()} unread")]


def test_a_commit_that_failed_to_record_the_pause_is_made_again_next_epoch(source) -> None:
    part = source()
    consumer: MetadataConsumer = part._consumer
    read(part)
    part.snapshot()
    read(part)
    control.pause("ops@h")
    consumer.fail_next_async = True
    read(part)  # sent, refused
    read(part)  # the refusal is served
    count = len(consumer.metadata)
    read(part)
    assert len(consumer.metadata) == count, "no commit on every read while Kafka refuses"
    part.snapshot()
    read(part)
    assert len(consumer.metadata) == count + 1 and "paused=" in consumer.metadata[-1][1]


# -- stop and restart


@pytest.fixture
def armed(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    grace: list[float] = []
    monkeypatch.setattr(shutdown, "_requested", threading.Event())
    monkeypatch.setattr(shutdown, "_signals_seen", 0)
    monkeypatch.setattr(shutdown, "_for_good", False)
    monkeypatch.setattr(shutdown, "_cause", "requested")
    monkeypatch.setattr(shutdown, "_arm_timeout", grace.append)
    return grace


def test_an_operators_stop_is_for_good_and_named(armed: list[float]) -> None:
    assert shutdown.stop("PUT /stop by ops@h", cause="PUT /stop")
    assert shutdown.requested() and shutdown.wanted_gone() and not shutdown.signalled()
    assert shutdown.cause() == "PUT /stop" and armed == [0.0]
    assert not shutdown.stop("PUT /stop by ops@h", cause="PUT /stop")
    assert armed == [0.0], "asked twice: one bound"


def test_a_stop_during_a_restart_drain_ends_the_process_within_the_timeout_alone(
    armed: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(discovery, "restart_argv", lambda: ["python", "-m", "bytewax.run"])
    monkeypatch.setattr(discovery, "_restart_asked", False)
    monkeypatch.setattr(discovery, "_exit_hook", True)
    assert discovery.request_restart("PUT /restart", "PUT /restart", 10.0) is None
    assert not shutdown.wanted_gone() and armed == [10.0]
    assert not shutdown.stop("PUT /stop", cause="PUT /stop")
    assert shutdown.wanted_gone() and armed == [10.0, 0.0]
    assert (
        discovery.exit_action(
            failed=False, signalled=shutdown.wanted_gone(), restart=True, fatal=False
        )
        == "exit"
    )


def test_a_restart_is_refused_when_the_process_cannot_execute_itself_or_stops(
    armed: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(discovery, "_restart_asked", False)
    monkeypatch.setattr(discovery, "_exit_hook", True)
    monkeypatch.setattr(discovery, "restart_argv", lambda: None)
    refused = discovery.request_restart("PUT /restart", "PUT /restart", 0.0)
    assert refused is not None and "not started by `python -m bytewax.run`" in refused
    assert not shutdown.requested()
    monkeypatch.setattr(discovery, "restart_argv", lambda: ["python"])
    shutdown.request("SIGTERM")
    assert discovery.request_restart("PUT /restart", "PUT /restart", 0.0) == (
        "a stop is under way already"
    )
    assert not discovery._restart_asked


def test_a_restart_ends_its_stop_line_with_restarting() -> None:
    line = lifecycle.stop_line(" (PUT /restart)", 5, 0, {("t", 0): 5}, None)
    assert line == (
        "stopped (PUT /restart): indexed 5 documents, dead-lettered 0 records; committed "
        "t/0@5; restarting"
    )


# -- what es-sink stop and restart conclude


def status(pid: int = 7, started: str = "T1", state: str = "running", **more: Any) -> Any:
    process = {
        "id": 0,
        "processes": 1,
        "pid": pid,
        "started_at": started,
        "group": "g",
        "starting": False,
    }
    return {"state": state, "process": {**process, **more.pop("process", {})}, **more}


def test_a_cluster_named_in_part_is_found_out() -> None:
    one = status(process={"id": 1, "processes": 3})
    assert missing_processes([one]) == [0, 2]
    assert missing_processes([status(process={"id": i, "processes": 2}) for i in (0, 1)]) == []
    assert missing_processes([status()]) == []


def test_a_stop_says_what_the_group_committed() -> None:
    parts = [
        {"topic": "t", "partition": 0, "position": 20, "committed": 10, "held": None},
        {"topic": "t", "partition": 1, "position": 5, "committed": 5, "held": None},
    ]
    stopped = Stopped("http://h:8080", status(partitions=parts), 2.04)
    stopped.committed = {("t", 0): 20, ("t", 1): 5}
    assert stopped.ok()
    assert stopped.line() == "http://h:8080: stopped in 2.0s (pid 7); committed t/0@20 t/1@5"


def test_a_stop_that_left_records_uncommitted_says_so() -> None:
    parts = [
        {"topic": "t", "partition": 0, "position": 20, "committed": 10, "held": None},
        {"topic": "t", "partition": 1, "position": 0, "committed": None, "held": "new"},
    ]
    stopped = Stopped("http://h:8080", status(partitions=parts, process={"processes": 2}), 31.0)
    stopped.committed = {("t", 0): 10, ("t", 1): None}
    assert not stopped.ok()
    assert stopped.line() == (
        "http://h:8080: stopped in 31.0s (process 0 of 2, pid 7); committed t/0@10 t/1@-; "
        "NOT everything read was committed (t/0 committed 10 of 20 read): the stop did not "
        "finish (its log says why); the next start reads them again"
    )


def test_a_stop_without_kafka_reports_the_last_status_and_says_so() -> None:
    parts = [{"topic": "t", "partition": 0, "position": 20, "committed": 20, "held": None}]
    stopped = Stopped("http://h:8080", status(partitions=parts), 1.0, kafka_error="down")
    assert stopped.ok()
    assert stopped.line().endswith(
        "committed t/0@20 (its last /status; Kafka did not answer: down)"
    )


def test_a_process_that_still_answers_did_not_stop() -> None:
    stopped = Stopped("http://h:8080", status(state="stopping"), None)
    assert not stopped.ok()
    assert stopped.line() == "http://h:8080: still answering (pid 7, state stopping); not stopped"


def test_a_restart_is_done_once_a_new_start_reads_or_is_paused() -> None:
    r = Restarted("http://h:8080", status())
    assert not r.see(Answer("http://h:8080", status(state="stopping")), 0.5)
    assert not r.see(Answer("http://h:8080", None, "no answer: refused"), 1.0)
    assert not r.see(Answer("http://h:8080", status(started="T2", state="halted")), 1.5)
    starting = status(started="T2", process={"starting": True})  # a pause may follow
    assert not r.see(Answer("http://h:8080", starting), 1.7)
    assert r.see(Answer("http://h:8080", status(started="T2", state="paused")), 2.0)
    assert r.ok()
    assert r.line() == "http://h:8080: restarted in 2.0s (pid 7, started T2); paused"


def test_a_restart_that_never_came_back_says_what_was_seen_last() -> None:
    r = Restarted("http://h:8080", status())
    r.see(Answer("http://h:8080", None, "no answer: refused"), 60.0)
    assert not r.ok()
    assert r.line() == (
        "http://h:8080: not restarted in time: its API does not answer again (no answer: refused)"
    )
    r = Restarted("http://h:8080", status())
    r.see(Answer("http://h:8080", status(pid=9, started="T2")), 3.0)
    assert "a new process, not pid 7: it exited and was started again" in r.line()
