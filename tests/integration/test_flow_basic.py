"""The flow end to end against the real broker and node: ids, sources, offsets, scaling."""

from __future__ import annotations

import orjson
import pytest

from tests.support.flows import committed_offsets, create_topic, produce, run_flow, search_all

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def _records(n: int) -> list[tuple[bytes | None, bytes]]:
    out: list[tuple[bytes | None, bytes]] = []
    for i in range(n):
        key = None if i % 10 == 0 else f"k{i}".encode()
        out.append((key, orjson.dumps({"n": i, "name": f"item {i}", "tags": ["a", "b"]})))
    return out


def test_every_record_indexed_with_deterministic_id(services, es, names):
    topic = names("basic")
    create_topic(services.kafka, topic, partitions=3)
    records = _records(300)
    for i, rec in enumerate(records):
        produce(services.kafka, topic, [rec], partition=i % 3)

    run = run_flow(services, {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic})
    assert run.returncode == 0, run.output

    docs = search_all(es, topic)
    assert len(docs) == 300
    for i, (key, value) in enumerate(records):
        doc_id = key.decode() if key else f"{topic}-{i % 3}-{i // 3}"
        assert docs[doc_id] == orjson.loads(value), doc_id
    # Offsets are committed to the group only once durable: at the end, all of them.
    assert committed_offsets(services.kafka, topic, topic) == {0: 100, 1: 100, 2: 100}


@pytest.mark.parametrize("layout", [["-w", "2"]], ids=["2-workers"])
def test_runs_with_several_workers(services, es, names, layout):
    topic = names("workers")
    create_topic(services.kafka, topic, partitions=4)
    produce(
        services.kafka, topic, [(f"k{i}".encode(), orjson.dumps({"i": i})) for i in range(2000)]
    )

    run = run_flow(services, {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic}, *layout)
    assert run.returncode == 0, run.output
    docs = search_all(es, topic)
    assert {int(k[1:]) for k in docs} == set(range(2000))


def test_second_run_resumes_from_committed_offsets(services, es, names):
    topic = names("resume")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, [(f"a{i}".encode(), b'{"round": 1}') for i in range(50)])
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic}
    assert run_flow(services, env).returncode == 0
    produce(services.kafka, topic, [(f"b{i}".encode(), b'{"round": 2}') for i in range(30)])
    es.indices.delete(index=topic)

    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    docs = search_all(es, topic)
    # Only the second round is read again: the group's offsets say where the first ended.
    assert sorted(docs) == sorted(f"b{i}" for i in range(30))
    assert committed_offsets(services.kafka, topic, topic) == {0: 80}


def test_missing_setting_fails_with_one_line(services):
    run = run_flow(services, {"KAFKA_TOPICS": ""})
    assert run.returncode != 0
    assert "KAFKA_TOPICS: required" in run.output
    assert "Traceback" not in run.output
