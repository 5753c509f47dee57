"""Kafka set-up and checks: topics with leaders, confirmed produce, read back, offsets."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

# (key, value) or (key, value, headers)
Message = (
    tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]
)


def wait_leaders(admin: Any, topic: str, partitions: int, timeout: float = 30.0) -> None:
    """Wait until `topic` has `partitions` partitions, each with a leader (TimeoutError)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return
        time.sleep(0.2)
    msg = f"topic {topic} has no {partitions} partitions with leaders after {timeout:.0f}s"
    raise TimeoutError(msg)


def create_topic(
    bootstrap: str, topic: str, partitions: int = 1, config: Mapping[str, str] | None = None
) -> None:
    """Create `topic` (replication 1, topic settings `config`) and wait until every
    partition has a leader, so the first produce or assignment does not race the
    controller."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, 1, config=dict(config or {}))
    admin.create_topics([new])[topic].result(30)
    wait_leaders(admin, topic, partitions)


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    """Grow `topic` to `total` partitions and wait until each has a leader."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(30)
    wait_leaders(admin, topic, total)


def produce(
    bootstrap: str,
    topic: str,
    messages: Iterable[Message],
    partition: int | None = None,
    *,
    config: Mapping[str, Any] | None = None,
    flush_timeout: float = 30.0,
) -> int:
    """Produce (key, value[, headers]) tuples in order and wait for every delivery; returns
    how many. AssertionError unless all were confirmed within `flush_timeout` s. `config`
    adds to (or overrides) the producer settings."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "message.max.bytes": 16777216,
            **(config or {}),
        }
    )
    errors: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    n = 0
    for m in messages:
        kwargs: dict[str, Any] = {"key": m[0], "value": m[1], "on_delivery": on_delivery}
        if len(m) > 2:
            kwargs["headers"] = m[2]
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        n += 1
    left = producer.flush(flush_timeout)
    if left:
        raise AssertionError(
            f"{left} of {n} messages to {topic} unconfirmed after {flush_timeout}s"
        )
    if errors:
        raise AssertionError(f"{len(errors)} of {n} messages to {topic} failed: {errors[:3]}")
    return n


def partitions_of(bootstrap: str, topic: str, timeout: float = 10.0) -> list[int]:
    """The partition numbers of `topic`, sorted ([] if it does not exist)."""
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=timeout)
    info = meta.topics.get(topic)
    if info is None or info.error is not None:
        return []
    return sorted(info.partitions)


def _watermarks(consumer: Any, topic: str, partitions: list[int], timeout: float) -> dict[int, Any]:
    from confluent_kafka import TopicPartition

    return {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
        for p in partitions
    }


def end_offsets(bootstrap: str, topic: str, timeout: float = 10.0) -> dict[int, int]:
    """High watermark per partition ({} if the topic does not exist)."""
    from confluent_kafka import Consumer

    parts = partitions_of(bootstrap, topic, timeout)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}"})
    try:
        return {p: high for p, (_low, high) in _watermarks(consumer, topic, parts, timeout).items()}
    finally:
        consumer.close()


def consume_all(
    bootstrap: str, topic: str, timeout: float = 20.0, *, strict: bool = False
) -> list[Any]:
    """Every message of `topic` from the low to the current high watermarks, all partitions
    at once ([] if it does not exist). After `timeout` s: what was read, or TimeoutError
    with `strict`."""
    from confluent_kafka import Consumer, TopicPartition

    parts = partitions_of(bootstrap, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    out: list[Any] = []
    try:
        marks = _watermarks(consumer, topic, parts, 10.0)
        todo = {p: high for p, (low, high) in marks.items() if high > low}
        position = {p: marks[p][0] for p in todo}
        consumer.assign([TopicPartition(topic, p, position[p]) for p in todo])
        deadline = time.monotonic() + timeout
        while any(position[p] < todo[p] for p in todo):
            if time.monotonic() > deadline:
                if strict:
                    msg = f"reading {topic} took over {timeout:.0f}s: at {position} of {todo}"
                    raise TimeoutError(msg)
                break
            for m in consumer.consume(1000, 0.5):
                if m.error() is None:
                    out.append(m)
                    position[int(m.partition() or 0)] = int(m.offset() or 0) + 1
    finally:
        consumer.close()
    return out


def committed_offsets(
    bootstrap: str, group: str, topic: str, timeout: float = 10.0
) -> dict[int, int]:
    """The group's committed offset per partition (negative, -1001, when none)."""
    found = committed(bootstrap, group, topic, timeout=timeout)
    return {tp.partition: tp.offset for tp in found}


def committed(
    bootstrap: str, group: str, topic: str, partitions: int | None = None, timeout: float = 10.0
) -> list[Any]:
    """The group's commits (offset and metadata) of the topic's partitions (the first
    `partitions` of them, or all). Retries for up to `timeout` what a fresh broker answers
    while it creates or loads the group's coordinator (NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS: retriable errors)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from flows.kafka.topics import COORDINATOR_LOADING  # the flow's own list of those answers

    if partitions is None:
        partitions = len(partitions_of(bootstrap, topic, timeout))
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                return list(consumer.committed(tps, timeout=timeout))
            except KafkaException as e:
                err = e.args[0]
                waiting = err.retriable() or err.code() in COORDINATOR_LOADING
                if not waiting or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()
