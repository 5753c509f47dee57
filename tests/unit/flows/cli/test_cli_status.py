"""`es-sink status` without servers: the partition table and `--watch` into a pipe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from flows.cli import common, status
from tests.support.paths import ROOT


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
    status.status(json_out=False, watch=True, interval=1.0, api=None)  # Ctrl-C ends it: no error
    assert capsys.readouterr().out.count("group g (empty)") == 2


WATCH = """
import sys
from flows.cli import main, status
from tests.unit.flows.cli.test_cli_status import found
from tests.support.paths import ROOT
status.collect = lambda settings, api: found(position=None)
sys.argv = ["es-sink", "status", "--watch", "--interval", "0.5", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("json_out", [False, True])
def test_watch_into_a_file_ends_cleanly_on_sigterm(tmp_path: Path, json_out: bool) -> None:
    """`timeout 60 es-sink status --watch > watch.out`: every report is in the file as it
    comes, and SIGTERM (or SIGINT) ends the watch with status 0 and nothing on stderr."""
    out = tmp_path / "watch.out"
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-c", WATCH, *(["--json"] if json_out else [])],
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "KAFKA_TOPICS": "t", "COLUMNS": "100"},
        )
        deadline = time.monotonic() + 30
        while out.read_text().count('"g"' if json_out else "group g") < 2:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert (proc.returncode, err) == (0, "")
    if json_out:  # one document a line
        lines = out.read_text().splitlines()
        assert len(lines) >= 2 and all(json.loads(line)["group"]["id"] == "g" for line in lines)
    else:  # each report under its time (the last one may have been stopped after it)
        text = out.read_text()
        assert text.count("status at 20") - text.count("group g") in (0, 1)
