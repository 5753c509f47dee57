"""The metadata watcher's diffing and the decision a process takes once its dataflow ended."""

from __future__ import annotations

import pytest

from flows.kafka.discovery import Change, diff, exit_action


def test_diff_reports_new_partitions_and_new_topics_only():
    listed = {"a": [0, 1], "b": [0]}
    live = {"a": [0, 1, 2, 3], "b": [0], "c": [0, 1, 2]}
    change = diff(listed, live)
    assert change == Change(topics={"c": [0, 1, 2]}, partitions={"a": [2, 3]})
    assert change.describe() == "partitions 2, 3 of topic a; topic c (partitions 0-2)"


def test_diff_ignores_what_disappeared_and_what_is_unchanged():
    assert not diff({"a": [0, 1], "b": [0]}, {"a": [1, 0]})
    assert not diff({"a": [0]}, {"a": [0]})
    assert diff({}, {"a": [0]}) == Change(topics={"a": [0]})


@pytest.mark.parametrize(
    ("failed", "signalled", "restart", "fatal", "expected"),
    [
        (False, False, True, False, "restart"),  # the watcher drained for new partitions
        (True, False, True, False, "exit"),  # the flow failed: keep its status, never re-exec
        (False, True, True, False, "exit"),  # SIGTERM during the restart's drain: stop
        (False, False, False, False, "exit"),  # an ordinary end (KAFKA_STOP_AT_END, SIGTERM)
        (False, False, False, True, "fail"),  # VERSION=offset and partitions were added
        (False, True, False, True, "fail"),
        (True, False, False, True, "exit"),  # the traceback already says why
    ],
)
def test_exit_action(failed, signalled, restart, fatal, expected):
    assert exit_action(failed=failed, signalled=signalled, restart=restart, fatal=fatal) == expected


class _Committed:
    """A consumer stand-in for the start check: committed offsets with their metadata."""

    def __init__(self, committed: dict[int, tuple[int, str]], high: int = 100) -> None:
        self._committed = committed
        self._high = high

    def committed(self, tps, timeout):
        from confluent_kafka import TopicPartition

        out = []
        for tp in tps:
            offset, meta = self._committed.get(tp.partition, (-1001, ""))
            out.append(TopicPartition(tp.topic, tp.partition, offset, meta))
        return out

    def get_watermark_offsets(self, tp, timeout):
        return 0, self._high


def _settings(**env: str):
    from flows.config import Settings

    return Settings.load({"KAFKA_TOPICS": "t", "VERSION": "offset", **env})


def test_version_offset_start_refuses_a_topic_of_more_than_one_partition():
    """Whatever the group committed: a key written to two partitions compares offsets
    that do not order its writes."""
    from flows.errors import ConfigError
    from flows.kafka.discovery import offsets_comparable

    with pytest.raises(ConfigError, match=r"^VERSION: topic t has 2 partitions and VERSION=offset"):
        offsets_comparable(_settings(), {"t": [0, 1]})


def test_version_offset_with_ids_per_partition_accepts_many_partitions_and_added_ones(
    monkeypatch,
):
    """DOC_ID=coordinates: a document per record, whose versions come from one partition."""
    from flows.kafka import discovery

    checked: list[object] = []
    monkeypatch.setattr(discovery, "Consumer", lambda conf: _Closing(checked))
    settings = _settings(DOC_ID="coordinates")
    discovery.offsets_comparable(settings, {"t": [0, 1, 2]})
    assert checked == ["closed"]  # the log-end check still ran
    assert not discovery.offsets_compared_across_partitions(settings)
    assert discovery.offsets_compared_across_partitions(_settings())


class _Closing(_Committed):
    def __init__(self, log: list[object]) -> None:
        super().__init__({})
        self._log = log

    def close(self) -> None:
        self._log.append("closed")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (Change(partitions={"t": [1]}), "partitions were added to topic t"),
        (Change(topics={"u": [0, 1]}), "topic u appeared with 2 partitions"),  # regex
    ],
)
def test_version_offset_stops_the_flow_when_a_topic_spreads_over_partitions_while_running(
    monkeypatch, change, named
):
    from flows.kafka import discovery
    from flows.runtime import shutdown

    requested: list[str] = []
    monkeypatch.setattr(shutdown, "request", lambda why, **_: requested.append(why))
    monkeypatch.setattr(discovery, "restart_argv", lambda: ["flow"])
    ex = discovery._Execution()
    assert discovery._act(_settings(), ex, change)
    assert ex.fatal == f"VERSION=offset: {named}; {discovery.VERSION_FIX}"
    assert requested == [f"{ex.fatal}; stopping"] and not ex.restart


def test_version_offset_with_ids_per_partition_restarts_for_added_partitions(monkeypatch):
    from flows.kafka import discovery
    from flows.runtime import shutdown

    monkeypatch.setattr(shutdown, "request", lambda why, **_: None)
    monkeypatch.setattr(discovery, "restart_argv", lambda: ["flow"])
    ex = discovery._Execution()
    assert discovery._act(_settings(DOC_ID="coordinates"), ex, Change(partitions={"t": [1]}))
    assert ex.fatal is None and ex.restart


# -- partitions added to a topic the group already read


class _Broker:
    """A consumer stand-in for `find_grown`: the group's committed offsets (with their
    metadata) and the log ends of topic t."""

    committed_at: dict[int, tuple[int, str]] = {}
    ends: dict[int, int] = {}
    made = 0

    def __init__(self, conf: dict[str, object]) -> None:
        type(self).made += 1

    def committed(self, tps, timeout):
        from confluent_kafka import TopicPartition

        return [
            TopicPartition(
                tp.topic, tp.partition, *self.committed_at.get(tp.partition, (-1001, ""))
            )
            for tp in tps
        ]

    def offsets_for_times(self, tps, timeout):
        from confluent_kafka import OFFSET_END, TopicPartition

        assert all(tp.offset == OFFSET_END for tp in tps)
        return [TopicPartition(tp.topic, tp.partition, self.ends[tp.partition]) for tp in tps]

    def close(self) -> None:
        pass


def _grown(monkeypatch, committed_at, ends, partitions=None):
    from flows.kafka import discovery

    monkeypatch.setattr(_Broker, "committed_at", committed_at)
    monkeypatch.setattr(_Broker, "ends", ends)
    monkeypatch.setattr(_Broker, "made", 0)
    monkeypatch.setattr(discovery, "Consumer", _Broker)
    found = {"t": partitions if partitions is not None else sorted(ends)}
    return discovery.find_grown(_settings(VERSION="none"), found)


def test_a_partition_added_while_the_older_one_lags_waits_for_its_end_at_start(monkeypatch):
    grown = _grown(monkeypatch, {0: (40, "es-sink partitions=1 owner=a gen=1")}, {0: 100, 1: 7})
    assert grown == {("t", 1): {0: 100}}


def test_a_partition_added_once_the_older_ones_are_read_to_their_end_reads_at_once(monkeypatch):
    assert _grown(monkeypatch, {0: (100, "es-sink partitions=1")}, {0: 100, 1: 7}) == {}


def test_partitions_added_at_once_wait_only_for_the_older_ones_behind(monkeypatch):
    """4 -> 8: every new partition waits for the lagging old ones, never for another new one
    (those would be read one after another)."""
    old = {p: (50, "es-sink partitions=4") for p in range(4)}
    old[2] = (100, "es-sink partitions=4")  # read to its end
    grown = _grown(monkeypatch, old, dict.fromkeys(range(8), 100))
    assert grown == {("t", p): {0: 100, 1: 100, 3: 100} for p in range(4, 8)}


def test_a_partition_added_while_an_earlier_new_one_is_held_waits_for_it_too(monkeypatch):
    """1 -> 2, and 2 -> 3 while t/1 still waits (it committed nothing): keys moved from
    t/1 to t/2 have their older writes in t/1. The group's last commits name 2 partitions."""
    grown = _grown(monkeypatch, {0: (40, "es-sink partitions=2")}, {0: 100, 1: 7, 2: 3})
    assert grown == {("t", 1): {0: 100}, ("t", 2): {0: 100, 1: 7}}


def test_nothing_is_held_for_a_new_group_nor_a_topic_of_one_partition(monkeypatch):
    assert _grown(monkeypatch, {}, {0: 100, 1: 7}) == {}  # nothing read yet: no older writes
    assert _grown(monkeypatch, {}, {0: 100}) == {}
    assert _Broker.made == 0  # one partition: nothing asked
