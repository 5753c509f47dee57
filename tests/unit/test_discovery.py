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
