"""The line a failed recovery-store write ends the process with (flows.runtime.recovery_failure)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from flows.runtime import recovery_failure
from flows.runtime.args import RunArgs

PANIC = (
    "(src/run.rs:167:13) called `Result::unwrap()` on an `Err` value: SqliteFailure(Error "
    '{ code: DiskFull, extended_code: 13 }, Some("database or disk is full"))'
)


def test_a_full_store_is_named_with_its_directory_and_space(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    args = RunArgs(1, 1, True, recovery_dir=tmp_path)
    monkeypatch.setattr(recovery_failure, "run_args", lambda: args)
    line = recovery_failure.describe(RuntimeError(PANIC))
    assert line is not None
    assert line.startswith(
        f"recovery directory {tmp_path}: database or disk is full (SQLite DiskFull, "
    )
    assert line.endswith("free space there and start it again, it resumes from there")
    read_only = PANIC.replace("DiskFull", "ReadOnly").replace(
        "database or disk is full", "attempt to write a readonly database"
    )
    assert "make it writable" in str(recovery_failure.describe(RuntimeError(read_only)))
    assert recovery_failure.describe(RuntimeError("Send thread panic")) is None


def test_the_hook_adds_the_line_after_the_traceback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    seen: list[BaseException] = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, error, tb: seen.append(error))
    args = RunArgs(1, 1, True, recovery_dir=tmp_path)
    monkeypatch.setattr(recovery_failure, "run_args", lambda: args)
    recovery_failure.install()
    error = RuntimeError(PANIC)
    with caplog.at_level(logging.ERROR):
        sys.excepthook(RuntimeError, error, None)
        sys.excepthook(ValueError, ValueError("other"), None)
    assert len(seen) == 2  # the default hook still prints both tracebacks
    assert [r.message.split(":")[0] for r in caplog.records] == [f"recovery directory {tmp_path}"]
