"""The last lines of a flow process, without a flow: their wording and their order."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from flows import halt
from flows.config import Settings
from flows.errors import RecordFailedError
from flows.runtime import lifecycle, shutdown

Exit = tuple[Callable[..., Any], tuple[Any, ...]]


@pytest.fixture
def exiting(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Exit]]:
    """`lifecycle.install` without a real exit: the atexit callbacks it registers are kept."""
    registered: list[Exit] = []
    halt.clear()  # the partitions other tests' flows read
    monkeypatch.setattr(lifecycle.atexit, "register", lambda f, *a: registered.append((f, a)))
    monkeypatch.setattr(sys, "excepthook", lambda *a: None)
    monkeypatch.setattr(lifecycle, "_error", [])
    monkeypatch.setattr(lifecycle, "committed_offsets", lambda s, keys: {k: 7 for k in keys})
    yield registered
    halt.clear()
    shutdown._requested.clear()


def run_exit(registered: list[Exit]) -> None:
    for f, args in registered:
        f(*args)


def test_a_stop_line_names_the_commits_and_the_status() -> None:
    committed = {("t", p): (None if p == 1 else 10 * p) for p in range(10)}
    line = lifecycle.stop_line(" (signal)", 120, 3, committed, 0)
    assert line == (
        "stopped (signal): indexed 120 documents, dead-lettered 3 records; committed t/0@0 "
        "t/1@- t/2@20 t/3@30 t/4@40 t/5@50 t/6@60 t/7@70 and 2 more; exit status 0"
    )
    assert "committed unknown (Kafka: down); exit status 1" in lifecycle.stop_line(
        "", 0, 0, "unknown (Kafka: down)", 1
    )


def test_a_halt_says_its_reason_after_the_stop_line(
    exiting: list[Exit], caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings.load({"KAFKA_TOPICS": "t"})
    lifecycle.install(settings)
    halt.start("t", 0, 0)
    error = RecordFailedError("t/0@5", "deserialize", "invalid JSON")
    halt.hold("t", 0, 5, error)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="flows.runtime.lifecycle"):
        try:
            raise RuntimeError("error calling `StatefulSourcePartition.next_batch`") from error
        except RuntimeError as e:
            sys.excepthook(type(e), e, e.__traceback__)  # the traceback comes after its line
        run_exit(exiting)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("stopped (halted): indexed ")
    assert lines[0].endswith("; committed t/0@7; exit status 1")
    assert lines[-1] == f"halted: {error}"


def test_a_halt_names_an_earlier_record_elasticsearch_refused_meanwhile(
    exiting: list[Exit], caplog: pytest.LogCaptureFixture
) -> None:
    """Offset 5 failed to decode and was held; offset 4, still in a sink buffer, was then
    refused: the flow stops on 4, and the last line used to name 5."""
    from sinks.dead_letter.config import ErrorTolerance
    from sinks.dead_letter.policy import ErrorPolicy
    from sinks.elasticsearch import refusals
    from sinks.model import DeadLetter, Record

    lifecycle.install(Settings.load({"KAFKA_TOPICS": "t"}))
    halt.start("t", 0, 0)
    halt.hold("t", 0, 5, RecordFailedError("t/0@5", "deserialize", "invalid JSON"))
    record = Record("t", 0, 4, 0, b"k", b"{}")
    letter = DeadLetter(record, "index", "elasticsearch.document_parsing_exception", "n")
    policy = ErrorPolicy(ErrorTolerance(False, 0, 0.0, 0), "sink partition es-0000")
    refusals.register([letter], policy)
    try:
        with caplog.at_level(logging.INFO, logger="flows.runtime.lifecycle"):
            run_exit(exiting)
    finally:
        refusals.clear_refusals()
    last = [r.getMessage() for r in caplog.records][-1]
    assert last.startswith("halted: record t/0@4 failed at stage index"), last


def test_a_clean_stop_is_status_0_and_one_line(
    exiting: list[Exit], caplog: pytest.LogCaptureFixture
) -> None:
    lifecycle.install(Settings.load({"KAFKA_TOPICS": "t", "KAFKA_STOP_AT_END": "true"}))
    with caplog.at_level(logging.INFO, logger="flows.runtime.lifecycle"):
        run_exit(exiting)
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("stopped (end of the topics, KAFKA_STOP_AT_END): ")
    assert line.endswith("committed no partition; exit status 0")
