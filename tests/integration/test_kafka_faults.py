"""Kafka faults against a broker of their own: the broker stopped mid-run and started again.

The flow reads from a second, restartable broker (ES_SINK_TEST_FAULT_KAFKA_PORT, 19094;
STACK_DIR <ES_SINK_TEST_STACK_DIR>-kafkafault) and writes to the suite's Elasticsearch.
Stopping the broker must stall the flow, not kill it; once the broker is back the flow must
finish with every record indexed and the end offsets committed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace

import orjson
import pytest

from flows.record import Doc
from tests.support.flows import (
    Services,
    committed_offsets,
    count_docs,
    create_topic,
    produce,
    search_all,
    start_flow,
    wait_for,
)
from tests.support.stack import stack

pytestmark = pytest.mark.system

KAFKA_FAULT_PORT = int(os.environ.get("ES_SINK_TEST_FAULT_KAFKA_PORT", "19094"))
STACK_DIR = os.environ.get(
    "ES_SINK_TEST_KAFKA_FAULT_DIR",
    os.environ.get("ES_SINK_TEST_STACK_DIR", "/var/tmp/es-sink-test") + "-kafkafault",
)
OUTAGE_S = 10
"""Seconds from the broker's stop to the start of its restart; it answers again a few
seconds later (the start takes 3-15 s here), so it is away for about 13-25 s."""


def throttle(doc: Doc) -> Doc:
    """A transform for the flow under test: 1 ms per record, so a run lasts long enough to
    take the broker away in the middle of it."""
    time.sleep(0.001)
    return doc


def _stack(action: str) -> None:
    env = {
        "KAFKA_PORT": str(KAFKA_FAULT_PORT),
        "KAFKA_CONTROLLER_PORT": str(KAFKA_FAULT_PORT + 1),
        "STACK_DIR": STACK_DIR,
    }
    stack(action, env, *([] if action == "clean" else ["kafka"]))


@pytest.fixture(scope="module")
def kafka_node(services: Services) -> Iterator[Services]:
    """A second Kafka broker that tests may stop and start, with the suite's Elasticsearch."""
    _stack("clean")
    _stack("up")
    try:
        yield replace(services, kafka=f"127.0.0.1:{KAFKA_FAULT_PORT}")
    finally:
        _stack("down")


def _fill(node: Services, topic: str, n: int, pad: str = "x" * 150) -> None:
    create_topic(node.kafka, topic, 2)
    produce(
        node.kafka,
        topic,
        ((f"k{i}".encode(), orjson.dumps({"i": i, "pad": pad})) for i in range(n)),
    )


def _env(topic: str, **extra: str) -> dict[str, str]:
    return {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "KAFKA_CONSUME_BATCH_SIZE": "200",
        "BULK_MAX_ACTIONS": "500",
        "TRANSFORMS": "tests.integration.test_kafka_faults:throttle",
        "BYTEWAX_DATAFLOW_API_ENABLED": "",
        **extra,
    }


def _check_complete(node: Services, es: object, topic: str, n: int) -> None:
    assert count_docs(es, topic) == n
    assert set(search_all(es, topic)) == {f"k{i}" for i in range(n)}
    assert committed_offsets(node.kafka, topic, topic) == _end_offsets(node, topic)


def test_kafka_broker_restarted_mid_run_loses_nothing(kafka_node, es, names, tmp_path):
    topic = names("kafka-restart")
    n = 20000
    _fill(kafka_node, topic, n)
    # Small fetches and a small prefetch queue, so that while the broker is away the flow
    # really runs dry (by default librdkafka would have fetched whole partitions already).
    env = _env(
        topic,
        KAFKA_CONFIG_MAX_PARTITION_FETCH_BYTES="16384",
        KAFKA_CONFIG_QUEUED_MAX_MESSAGES_KBYTES="64",
    )
    log = tmp_path / "flow.log"
    proc = start_flow(kafka_node, env, log=log)
    try:

        def started() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            return count_docs(es, topic) >= 2000

        wait_for(started, 120, "the first documents")
        before = committed_offsets(kafka_node.kafka, topic, topic)
        assert sum(max(o, 0) for o in before.values()) < n, "finished before the outage"
        down_at = time.monotonic()
        _stack("down")
        stalled_docs = None
        while time.monotonic() - down_at < OUTAGE_S:
            assert proc.poll() is None, (
                "the flow died without its broker:\n" + (log.read_text()[-3000:])
            )
            stalled_docs = count_docs(es, topic)
            time.sleep(1)
        _stack("up")
        outage = time.monotonic() - down_at
        assert outage >= 10, f"the broker was away for only {outage:.0f}s"
        assert stalled_docs is not None and stalled_docs < n, "the flow never needed the broker"
        assert proc.wait(240) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    _check_complete(kafka_node, es, topic, n)


def test_kafka_broker_down_while_the_flow_finishes_commits_the_end_offsets(
    kafka_node, es, names, tmp_path
):
    """The broker goes away while the flow still works through records it already fetched
    (librdkafka's default fetch sizes prefetch a whole partition here), so the epochs that
    close during the outage cannot commit, and the flow reaches the end before the broker is
    back."""
    topic = names("kafka-tail")
    n = 12000
    _fill(kafka_node, topic, n, pad="")  # ~240 KB a partition: one fetch
    log = tmp_path / "flow.log"
    proc = start_flow(kafka_node, _env(topic), log=log)
    try:

        def started() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            return count_docs(es, topic) >= 2000

        wait_for(started, 120, "the first documents")
        _stack("down")
        # Until everything prefetched is indexed, or the flow waits: a partition that
        # reached its end blocks in its final (synchronous) commit until the broker is back.
        seen: list[int] = []

        def drained() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            seen.append(count_docs(es, topic))
            return seen[-1] == n or (len(seen) > 25 and seen[-1] == seen[-25])

        wait_for(drained, 90, "the prefetched records indexed")
        _stack("up")
        assert proc.wait(240) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    _check_complete(kafka_node, es, topic, n)


def _end_offsets(node: Services, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": node.kafka, "group.id": "kafka-faults-watermarks"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in (0, 1)
        }
    finally:
        consumer.close()
