"""ERRORS_TOLERANCE=log end to end (real broker and node): failed records at every stage are
skipped with one log line each, with no dead-letter topic; good records are indexed and
committed; the breaker still stops the flow."""

from __future__ import annotations

import re

import pytest

from tests.support.flows import committed_offsets, create_topic, produce, run_flow, search_all

pytestmark = pytest.mark.integration

SKIP_LINE = re.compile(
    r"skipped a failed record \(ERRORS_TOLERANCE=log\): topic=(\S+) partition=(\d+) "
    r"offset=(\d+) stage=(\w+) error=(\S+): "
)
MARKER = "PRIVATE-VALUE-MARKER"


def skips(output: str) -> list[tuple[str, int, int, str, str]]:
    found = []
    for line in output.splitlines():
        m = SKIP_LINE.search(line)
        if m:
            topic, part, offset, stage, error = m.groups()
            found.append((topic, int(part), int(offset), stage, error))
    return found


def test_failed_records_at_every_stage_are_logged_and_skipped(services, es, names, tmp_path):
    topic = names("errlog")
    create_topic(services.kafka, topic, partitions=2)
    es.indices.create(index=topic, mappings={"properties": {"n": {"type": "integer"}}})
    records = {
        0: [
            (b"a", b'{"body": {"n": 1}}'),
            (b"bad-json", b'{"body": {"n": 2, "m": "' + MARKER.encode() + b'"'),  # deserialize
            (b"no-body", b'{"other": {"n": 3}}'),  # transform: extract finds no body
            (b"b", b'{"body": {"n": 4}}'),
        ],
        1: [
            (b"c", b'{"body": {"n": 10}}'),
            (b"x" * 600, b'{"body": {"n": 11}}'),  # index (processor): id over 512 bytes
            (b"mapping", b'{"body": {"n": "not a number"}}'),  # index (Elasticsearch)
            (b"d", b'{"body": {"n": 13}}'),
        ],
    }
    for partition, recs in records.items():
        produce(services.kafka, topic, recs, partition=partition)
    config = tmp_path / "sink.yaml"
    config.write_text("transforms:\n  - {type: extract, field: body}\n")
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "ERRORS_TOLERANCE": "log",
        "ES_SINK_CONFIG": str(config),
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output

    assert search_all(es, topic) == {
        k: {"n": n} for k, n in (("a", 1), ("b", 4), ("c", 10), ("d", 13))
    }
    found = skips(run.output)
    assert sorted(f[:4] for f in found) == [
        (topic, 0, 1, "deserialize"),
        (topic, 0, 2, "transform"),
        (topic, 1, 1, "index"),
        (topic, 1, 2, "index"),
    ]  # one line per record
    errors = {(p, o): e for _, p, o, _, e in found}
    assert errors[0, 1] == "flows.decode.DecodeError"
    assert errors[0, 2] == "builtins.ValueError"
    assert errors[1, 1] == "sinks.actions.ActionError"
    assert "parsing_exception" in errors[1, 2]
    assert MARKER not in run.output  # values are not logged without ERRORS_LOG_VALUES
    assert committed_offsets(services.kafka, topic, topic) == {0: 4, 1: 4}


def test_values_are_logged_only_when_asked(services, es, names):
    topic = names("errlog-values")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, [(b"k", b'{"n": "' + MARKER.encode() + b'"'), (b"g", b"{}")])
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ERRORS_TOLERANCE": "log"}
    run = run_flow(services, {**env, "ERRORS_LOG_VALUES": "true"})
    assert run.returncode == 0, run.output
    (line,) = [x for x in run.output.splitlines() if "skipped a failed record" in x]
    assert f"key=b'k' value=b'{{\"n\": \"{MARKER}\"'" in line
    assert search_all(es, topic) == {"g": {}}


def test_the_breaker_still_stops_the_flow(services, es, names):
    topic = names("errlog-breaker")
    create_topic(services.kafka, topic)
    good = [(f"g{i}".encode(), b'{"n": 1}') for i in range(3)]
    bad = [(f"b{i}".encode(), b"not json") for i in range(5)]
    produce(services.kafka, topic, good + bad + good)
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "ERRORS_TOLERANCE": "log",
        "DLQ_MAX_CONSECUTIVE": "3",
    }
    run = run_flow(services, env)
    assert run.returncode > 0, run.output
    assert "4 records in a row failed (DLQ_MAX_CONSECUTIVE=3)" in run.output
    assert [f[2] for f in skips(run.output)] == [3, 4, 5]  # the fourth stops the flow
    committed = committed_offsets(services.kafka, topic, topic)[0]
    assert committed == -1001 or 0 <= committed <= 3, committed
