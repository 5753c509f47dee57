"""`es-sink status` without servers: the partition table and `--watch` into a pipe."""

from __future__ import annotations

from typing import Any

import pytest

from flows.cli import common, status


def found(position: int | None) -> dict[str, Any]:
    """What `collect` finds for t/0 with a log end of 50 and nothing committed; a process
    reads it at `position` (None: no process answers)."""
    partition = {"partition": 0, "low": 0, "end": 50, "committed": None, "committed_lag": None}
    processes = []
    if position is not None:
        part = {"topic": "t", "partition": 0, "lag": 50 - position}
        processes.append({"url": "http://p0", "status": {"partitions": [part]}, "error": None})
    return {
        "group": {"id": "g", "state": "empty", "members": 0},
        "topics": [
            {"topic": "t", "partitions": [partition], "end": 50, "committed": 0, "committed_lag": 0}
        ],
        "totals": {"partitions": 1, "end": 50, "committed_lag": 0, "uncommitted_partitions": 1},
        "indices": [],
        "dead_letters": None,
        "processes": processes,
    }


def text(found: dict[str, Any]) -> str:
    with common.out.capture() as captured:
        common.out.print(status.render(found))
    return captured.get()


def test_read_lag_comes_from_the_process_and_committed_lag_from_kafka() -> None:
    everything_read = found(position=50)
    status.add_read_lag(everything_read)
    (p,) = everything_read["topics"][0]["partitions"]
    assert (p["lag"], p["committed_lag"]) == (0, None)
    row = next(line for line in text(everything_read).splitlines() if "│ t " in line)
    assert [c.strip() for c in row.split("│")[1:-1]] == ["t", "0", "50", "-", "-", "0"]
    nobody = found(position=None)
    status.add_read_lag(nobody)
    assert nobody["topics"][0]["partitions"][0]["lag"] is None


def test_watch_into_a_pipe_prints_every_report(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKA_TOPICS", "t")
    monkeypatch.setattr(status, "collect", lambda settings, api: found(position=None))
    naps: list[float] = []

    def sleep(s: float) -> None:
        naps.append(s)
        if len(naps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(status.time, "sleep", sleep)
    with pytest.raises(KeyboardInterrupt):
        status.status(json_out=False, watch=True, interval=1.0, api=None)
    assert capsys.readouterr().out.count("group g (empty)") == 2
