"""Elasticsearch faults against a real node of their own: per-item 429s from a tiny write
queue, and the node stopped mid-run and started again."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace

import orjson
import pytest

from tests.support.flows import (
    Services,
    committed_offsets,
    count_docs,
    create_topic,
    produce,
    run_flow,
    start_flow,
    wait_for,
)
from tests.support.stack import stack

pytestmark = [pytest.mark.system, pytest.mark.long]

FAULT_PORT = int(os.environ.get("ES_SINK_TEST_FAULT_ES_PORT", "19201"))
OUTAGE_S = 60
"""How long the outage test keeps Elasticsearch stopped (from the moment it is down)."""


def _stack(action: str) -> None:
    env = {
        "ES_PORT": str(FAULT_PORT),
        "ES_TRANSPORT_PORT": str(FAULT_PORT + 100),
        "STACK_DIR": os.environ.get("ES_SINK_TEST_STACK_DIR", "/var/tmp/es-sink-test") + "-fault",
        # One write thread and a queue of one: concurrent shard writes get 429s.
        "STACK_ES_SETTINGS": "thread_pool.write.size: 1\\nthread_pool.write.queue_size: 1",
    }
    stack(action, env, *([] if action == "clean" else ["es"]))


@pytest.fixture(scope="module")
def fault_node(services: Services) -> Iterator[Services]:
    """A second Elasticsearch node with a tiny write queue that tests may stop and start."""
    _stack("clean")
    _stack("up")
    yield replace(services, es_url=f"http://127.0.0.1:{FAULT_PORT}")
    _stack("down")


@pytest.fixture
def fault_es(fault_node: Services) -> Iterator[object]:
    from elasticsearch import Elasticsearch

    client = Elasticsearch(fault_node.es_url)
    yield client
    client.options(ignore_status=404).indices.delete(index="t-*")
    client.close()


def _fill(services: Services, topic: str, n: int) -> None:
    create_topic(services.kafka, topic, 2)
    produce(services.kafka, topic, ((f"k{i}".encode(), orjson.dumps({"i": i})) for i in range(n)))


def test_per_item_429s_are_retried_until_written(fault_node, fault_es, names, tmp_path):
    topic = names("429")
    _fill(fault_node, topic, 20000)
    # Many shards: one bulk fans out into many shard writes and overflows the queue.
    fault_es.indices.create(index=topic, settings={"number_of_shards": 8, "number_of_replicas": 0})
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "ES_SINK_PARTITIONS": "4",
        "BULK_MAX_ACTIONS": "2000",
        "ES_RETRY_INITIAL_MS": "20",
        "ES_RETRY_MAX_MS": "200",
        "BYTEWAX_DATAFLOW_API_ENABLED": "",
    }
    run = run_flow(fault_node, env, "-w", "2", timeout=300)
    assert run.returncode == 0, run.output[-3000:]
    assert "429 es_rejected_execution_exception" in run.output, (
        "no 429 was provoked, so this run proved nothing about retries"
    )
    assert count_docs(fault_es, topic) == 20000
    assert sum(committed_offsets(fault_node.kafka, topic, topic).values()) == 20000


def test_elasticsearch_stopped_mid_run_then_restarted_loses_nothing(
    fault_node, fault_es, names, tmp_path
):
    topic = names("outage")
    _fill(fault_node, topic, 40000)
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "KAFKA_CONSUME_BATCH_SIZE": "200",
        "BULK_MAX_ACTIONS": "500",
        "ES_RETRY_MAX_MS": "1000",
        "TRANSFORMS": "tests.integration.slow_transforms:pause",
    }
    log = tmp_path / "flow.log"
    proc = start_flow(fault_node, env, log=log)
    try:
        wait_for(lambda: count_docs(fault_es, topic) >= 2000, 120, "the first documents")
        _stack("down")
        down_at = time.monotonic()
        wait_for(lambda: "retrying" in log.read_text(), 60, "the sink to start retrying")
        # While Elasticsearch is away the epoch cannot close, so commits stand still.
        time.sleep(3)
        stalled = committed_offsets(fault_node.kafka, topic, topic)
        assert sum(max(o, 0) for o in stalled.values()) < 40000, "finished before the outage"
        while time.monotonic() - down_at < OUTAGE_S:
            time.sleep(5)
            assert proc.poll() is None, (
                "the flow died during the outage:\n" + (log.read_text()[-3000:])
            )
            assert committed_offsets(fault_node.kafka, topic, topic) == stalled, (
                f"offsets committed {time.monotonic() - down_at:.0f}s into the outage"
            )
        _stack("up")
        assert proc.wait(300) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert count_docs(fault_es, topic) == 40000
    assert sum(committed_offsets(fault_node.kafka, topic, topic).values()) == 40000
