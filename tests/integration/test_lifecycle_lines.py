"""The last lines of a real flow process: a stop's summary, and a halt's reason after
Bytewax's panic and traceback."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.flows import (
    Services,
    count_docs,
    create_topic,
    numbered,
    produce,
    run_flow,
    start_flow,
    wait_for,
)

pytestmark = pytest.mark.integration


def last_line(output: str) -> str:
    return output.rstrip().splitlines()[-1]


def test_a_stop_at_the_end_says_what_it_wrote_and_committed(
    services: Services, names: Callable[[str], str], es: Any
) -> None:
    topic = names("life-end")
    create_topic(services.kafka, topic, 2)
    produce(services.kafka, topic, numbered(0, 30))
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ES_INDEX": topic}
    run = run_flow(services, env)
    assert run.returncode == 0, run.output[-3000:]
    line = last_line(run.output)
    assert re.search(
        rf"INFO flows.runtime.lifecycle: stopped \(end of the topics, KAFKA_STOP_AT_END\): "
        rf"indexed 30 "
        rf"documents, dead-lettered 0 records; committed {topic}/0@\d+ {topic}/1@\d+; "
        rf"exit status 0$",
        line,
    ), line
    offsets = [int(o) for o in re.findall(rf"{topic}/\d@(\d+)", line)]
    assert sum(offsets) == 30


def test_a_signalled_stop_ends_with_its_summary(
    services: Services, names: Callable[[str], str], es: Any, tmp_path: Path
) -> None:
    topic = names("life-sig")
    create_topic(services.kafka, topic, 1)
    produce(services.kafka, topic, numbered(0, 20))
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ES_INDEX": topic,
           "KAFKA_STOP_AT_END": "false"}  # fmt: skip
    log = tmp_path / "flow.log"
    proc = start_flow(services, env, log=log)
    try:
        wait_for(lambda: count_docs(es, topic) == 20, 90, "every record indexed")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    output = log.read_text()
    # The node answers GET / (server detection) with 405 when it is the integ-test-zip:
    # an answer, not a failure worth a line.
    assert "node_pool" not in output, output
    line = last_line(output)
    assert line.endswith(
        f"INFO flows.runtime.lifecycle: stopped (signal): indexed 20 documents, dead-lettered 0 "
        f"records; committed {topic}/0@20; exit status 0"
    ), line


def test_a_halt_says_its_reason_last(services: Services, names: Callable[[str], str]) -> None:
    topic = names("life-halt")
    create_topic(services.kafka, topic, 1)
    produce(services.kafka, topic, [*numbered(0, 5), (b"bad", b"{oops"), *numbered(5, 5)])
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ES_INDEX": topic,
           "ERRORS_TOLERANCE": "none", "RUST_BACKTRACE": "1"}  # fmt: skip
    run = run_flow(services, env)
    assert run.returncode == 1, run.output[-3000:]
    lines = run.output.rstrip().splitlines()
    stop = next(
        i for i, line in enumerate(lines) if "flows.runtime.lifecycle: stopped (halted)" in line
    )
    # Nothing past the record it stops on is committed (here usually nothing at all).
    committed = re.search(rf"committed {topic}/0@(-|\d+); exit status 1$", lines[stop])
    assert committed and committed.group(1) in ("-", "0", "1", "2", "3", "4", "5"), lines[stop]
    assert "Traceback (most recent call last):" in lines[stop + 1 :]  # Bytewax's, before ours
    assert re.search(
        rf"ERROR flows.runtime.lifecycle: halted: record {topic}/0@5 failed at stage deserialize: ",
        lines[-1],
    ), lines[-1]
