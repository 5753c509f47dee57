"""Shared fixtures. Integration fixtures talk to the real Kafka broker and Elasticsearch node
that scripts/test starts (ES_SINK_TEST_KAFKA, ES_SINK_TEST_ES); if those do not answer, the
tests fail, they are never skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KAFKA = os.environ.get("ES_SINK_TEST_KAFKA", "127.0.0.1:19092")
ES_URL = os.environ.get("ES_SINK_TEST_ES", "http://127.0.0.1:19200")


@dataclass
class Services:
    """Where the real Kafka and Elasticsearch of this test run listen."""

    kafka: str
    es_url: str


@pytest.fixture(scope="session")
def services() -> Services:
    from confluent_kafka.admin import AdminClient
    from elasticsearch import Elasticsearch

    try:
        AdminClient({"bootstrap.servers": KAFKA}).list_topics(timeout=20)
    except Exception as e:
        pytest.fail(f"Kafka at {KAFKA} does not answer ({e}); run the tests with scripts/test")
    try:
        Elasticsearch(ES_URL).cluster.health(wait_for_status="yellow", timeout="30s")
    except Exception as e:
        pytest.fail(
            f"Elasticsearch at {ES_URL} does not answer ({e}); run the tests with scripts/test"
        )
    return Services(KAFKA, ES_URL)


@pytest.fixture
def es(services: Services) -> Iterator[object]:
    from elasticsearch import Elasticsearch

    client = Elasticsearch(services.es_url)
    yield client
    client.close()


@pytest.fixture
def names(services: Services) -> Iterator[Callable[[str], str]]:
    """Unique lower-case names for topics and indices; all of them are deleted afterwards."""
    from confluent_kafka.admin import AdminClient
    from elasticsearch import Elasticsearch

    made: list[str] = []
    run = uuid.uuid4().hex[:8]

    def make(prefix: str) -> str:
        name = f"t-{prefix}-{run}-{len(made)}"
        made.append(name)
        return name

    yield make
    admin = AdminClient({"bootstrap.servers": services.kafka})
    existing = admin.list_topics(timeout=20).topics
    doomed = [n for n in made if n in existing]
    if doomed:
        for fut in admin.delete_topics(doomed).values():
            fut.result(30)
    client = Elasticsearch(services.es_url)
    client.options(ignore_status=404).indices.delete(index=f"t-*-{run}-*")
    client.close()


def create_topic(kafka: str, topic: str, partitions: int = 1) -> None:
    """Create a topic and wait until every partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            meta
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise AssertionError(f"topic {topic} has no leaders after 30s")


Message = (
    tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]
)


def produce(
    kafka: str, topic: str, messages: Iterable[Message], partition: int | None = None
) -> int:
    """Produce (key, value[, headers]) tuples, in order, and wait for every delivery."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5, "message.max.bytes": 16777216})
    errors: list[object] = []
    n = 0
    for m in messages:
        kwargs = {"key": m[0], "value": m[1]}
        if len(m) > 2:
            kwargs["headers"] = m[2]  # type: ignore[misc]
        if partition is not None:
            kwargs["partition"] = partition
        producer.produce(topic, on_delivery=lambda err, _m: err and errors.append(err), **kwargs)
        producer.poll(0)
        n += 1
    assert producer.flush(30) == 0
    assert not errors, errors
    return n


def consume_all(kafka: str, topic: str, timeout: float = 20.0) -> list[object]:
    """Every message of `topic` from the beginning (stops at the end offsets)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    meta = (
        AdminClient({"bootstrap.servers": kafka}).list_topics(topic, timeout=10).topics.get(topic)
    )
    if meta is None or meta.error is not None:
        return []
    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"check-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    out: list[object] = []
    try:
        for p in meta.partitions:
            tp = TopicPartition(topic, p)
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            deadline = time.monotonic() + timeout
            got = 0
            while got < high - low and time.monotonic() < deadline:
                for m in consumer.consume(500, 0.5):
                    if m.error() is None:
                        out.append(m)
                        got += 1
    finally:
        consumer.close()
    return out


def committed_offsets(kafka: str, group: str, topic: str) -> dict[int, int]:
    """The consumer group's committed offset per partition (-1001 when none)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": kafka}).list_topics(topic, timeout=10).topics[topic]
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in meta.partitions], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in tps}


@dataclass
class FlowRun:
    """A finished flow process."""

    returncode: int
    output: str


def flow_command(
    services: Services, env: dict[str, str], *args: str, module: str = "flows.es_sink"
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a flow run (hermetic: host settings dropped)."""
    full_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "ES_", "DLQ_"))},
        "KAFKA_BOOTSTRAP_SERVERS": services.kafka,
        "ES_HOSTS": services.es_url,
        "KAFKA_STOP_AT_END": "true",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    if "-s" not in args:
        args = ("-s", "1", *args)
    return [sys.executable, "-m", "bytewax.run", module, *args], full_env


def run_flow(
    services: Services,
    env: dict[str, str],
    *args: str,
    timeout: float = 180.0,
    module: str = "flows.es_sink",
) -> FlowRun:
    """Run `python -m bytewax.run <module> <args>` to completion with the given settings."""
    cmd, full_env = flow_command(services, env, *args, module=module)
    proc = subprocess.run(
        cmd, env=full_env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    return FlowRun(proc.returncode, proc.stdout + proc.stderr)


def start_flow(
    services: Services, env: dict[str, str], *args: str, log: Path, module: str = "flows.es_sink"
) -> subprocess.Popen[bytes]:
    """Start a flow in the background, its output going to `log`."""
    cmd, full_env = flow_command(services, env, *args, module=module)
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, env=full_env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `condition` until true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def count_docs(es: object, index: str) -> int:
    """Documents in `index` after a refresh (0 if it does not exist yet)."""
    if not es.indices.exists(index=index):  # type: ignore[attr-defined]
        return 0
    es.indices.refresh(index=index)  # type: ignore[attr-defined]
    return int(es.count(index=index)["count"])  # type: ignore[attr-defined]


def search_all(es: object, index: str) -> dict[str, dict]:
    """Every document of `index` (after a refresh), by id."""
    from elasticsearch.helpers import scan

    es.indices.refresh(index=index)  # type: ignore[attr-defined]
    return {h["_id"]: h["_source"] for h in scan(es, index=index, size=5000)}  # type: ignore[arg-type]
