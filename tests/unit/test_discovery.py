"""The metadata watcher's diffing and the decision a process takes once its dataflow ended."""

from __future__ import annotations

import pytest

from flows.discovery import Change, diff, exit_action


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


def test_version_offset_start_refuses_partitions_added_since_the_last_commit():
    from flows.discovery import _check_offsets
    from flows.errors import ConfigError

    consumer = _Committed({0: (10, "es-sink partitions=1")})
    with pytest.raises(ConfigError, match="has 2 partitions, 1 when group g last committed"):
        _check_offsets(consumer, "g", {"t": [0, 1]})


def test_version_offset_start_accepts_an_offset_that_expired_or_was_never_committed():
    """A partition idle past offsets.retention.minutes has no offset any more: that is not
    a partition added (review of issue 9: it used to refuse every start from then on)."""
    from flows.discovery import _check_offsets

    _check_offsets(_Committed({0: (10, "es-sink partitions=2")}), "g", {"t": [0, 1]})
    _check_offsets(_Committed({0: (10, "")}), "g", {"t": [0, 1]})  # commits without a count
    _check_offsets(_Committed({}), "g", {"t": [0, 1]})


def test_version_offset_start_refuses_an_offset_above_the_log_end():
    from flows.discovery import _check_offsets
    from flows.errors import ConfigError

    consumer = _Committed({0: (500, "es-sink partitions=1")}, high=10)
    with pytest.raises(ConfigError, match="committed offset 500 is above the log end 10"):
        _check_offsets(consumer, "g", {"t": [0]})
