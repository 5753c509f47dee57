"""`es-sink status` against the real broker, node and flow: `--json` equals what Kafka and
Elasticsearch report (end offsets, committed offsets, lag, documents, dead letters)."""

from __future__ import annotations

import json

import pytest

from tests.support.flows import (
    committed_offsets,
    count_docs,
    create_topic,
    produce,
    run_cli,
    run_flow,
)
from tools.devkit.kafka import end_offsets

pytestmark = pytest.mark.integration


def test_status_json_equals_what_kafka_and_elasticsearch_report(services, names, es) -> None:
    topic, dlq, group = names("st"), names("st-dlq"), names("st-group")
    create_topic(services.kafka, topic, 2)
    create_topic(services.kafka, dlq)
    for p in (0, 1):
        docs = [(f"k{p}-{i}".encode(), json.dumps({"n": i}).encode()) for i in range(10)]
        produce(services.kafka, topic, docs, partition=p)
    produce(services.kafka, topic, [(b"bad", b"{oops")], partition=1)
    env = {"KAFKA_TOPICS": topic, "DLQ_TOPIC": dlq, "ERRORS_TOLERANCE": "all",
           "KAFKA_GROUP_ID": group}  # fmt: skip
    run = run_flow(services, env)
    assert run.returncode == 0, run.output[-2000:]
    produce(services.kafka, topic, [(b"late", b'{"n": 1}')] * 5, partition=0)  # the lag

    assert count_docs(es, topic) == 20  # refreshed: status counts what is searchable
    result = run_cli(services, env, "status", "--json")
    assert result.exit_code == 0, result.stderr
    found = result.json()
    ends, committed = (
        end_offsets(services.kafka, topic),
        committed_offsets(services.kafka, group, topic),
    )
    assert ends == {0: 15, 1: 11} and committed == {0: 10, 1: 11}
    (t,) = found["topics"]
    assert t["topic"] == topic
    shown = [(p["partition"], p["end"], p["committed"], p["committed_lag"], p["lag"])
             for p in t["partitions"]]  # fmt: skip
    assert shown == [(0, 15, 10, 5, None), (1, 11, 11, 0, None)]  # no process: no read lag
    assert (t["end"], t["committed"], t["committed_lag"]) == (26, 21, 5)
    assert found["totals"] == {
        "partitions": 2, "end": 26, "committed_lag": 5, "lag": 0, "uncommitted_partitions": 0
    }  # fmt: skip
    assert found["group"]["id"] == group and found["group"]["state"] == "empty"
    assert found["indices"] == [{"index": topic, "topics": [topic], "docs": 20, "error": None}]
    dl = found["dead_letters"]
    assert dl["topic"] == dlq and dl["records"] == 1
    assert dl["newest"]["source"] == f"{topic}/1@10" and dl["newest"]["stage"] == "deserialize"
    assert found["processes"] == []

    text = run_cli(services, env, "status")
    assert text.exit_code == 0
    assert f"group {group} (empty)" in text.stdout and "deserialize" in text.stdout
    print(text.stdout)


def test_status_names_a_missing_topic(services, names) -> None:
    topic = names("st-missing")
    run = run_cli(services, {"KAFKA_TOPICS": topic}, "status", "--json")
    assert run.exit_code == 1
    assert run.stderr.strip() == f"es-sink: KAFKA_TOPICS: no topic {topic} on {services.kafka}"
