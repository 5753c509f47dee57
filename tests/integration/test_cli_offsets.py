"""`es-sink offsets` against the real broker and flow: a reset to a time sets each
partition to the first offset at or after it; it refuses while the flow runs."""

from __future__ import annotations

import json
import signal
import threading
import time
from datetime import UTC, datetime

import pytest

from tests.conftest import committed_offsets, create_topic, run_cli, run_flow, start_flow

pytestmark = pytest.mark.integration

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _produce_at(kafka: str, topic: str, partition: int, stamps: list[int]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
    for i, ts in enumerate(stamps):
        value = json.dumps({"n": i}).encode()
        producer.produce(topic, key=f"{partition}-{i}".encode(), value=value, partition=partition,
                         timestamp=ts)  # fmt: skip
    assert producer.flush(30) == 0


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def test_reset_to_a_time_sets_the_first_offset_at_or_after_it(services, names) -> None:
    topic, group = names("off"), names("off-group")
    create_topic(services.kafka, topic, 2)
    _produce_at(services.kafka, topic, 0, [T0 + i * 1000 for i in range(10)])  # 0 s .. 9 s
    _produce_at(services.kafka, topic, 1, [T0 + i * 2000 for i in range(5)])  # 0 s .. 8 s
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": group}
    assert run_flow(services, env).returncode == 0
    assert committed_offsets(services.kafka, group, topic) == {0: 10, 1: 5}

    at = _iso(T0 + 4500)  # partition 0: offset 5 (5 s); partition 1: offset 3 (6 s)
    dry = run_cli(services, env, "offsets", "reset", "--to", at, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    assert [(c["partition"], c["from"], c["to"]) for c in dry.json()["changes"]] == [
        (0, 10, 5), (1, 5, 3)
    ]  # fmt: skip
    assert committed_offsets(services.kafka, group, topic) == {0: 10, 1: 5}  # unchanged

    done = run_cli(services, env, "offsets", "reset", "--to", at, "--probe-s", "1")
    assert done.exit_code == 0, done.stderr
    assert done.stdout.splitlines() == [f"moved {topic}/0: 10 -> 5", f"moved {topic}/1: 5 -> 3"]
    assert committed_offsets(services.kafka, group, topic) == {0: 5, 1: 3}

    after_all = _iso(T0 + 60_000)  # later than every record: the end
    run_cli(services, env, "offsets", "reset", "--to", after_all, "--probe-s", "0")
    assert committed_offsets(services.kafka, group, topic) == {0: 10, 1: 5}
    one = ["--topic", topic, "--partition", "1", "--probe-s", "0"]
    assert run_cli(services, env, "offsets", "reset", "--to", "earliest", *one).exit_code == 0
    assert committed_offsets(services.kafka, group, topic) == {0: 10, 1: 0}
    assert run_cli(services, env, "offsets", "reset", "--to", "99", *one).exit_code == 0
    assert committed_offsets(services.kafka, group, topic) == {0: 10, 1: 5}  # within the log

    # The metadata the flow commits with its offsets (partition count, owner) survives a reset.
    kept = _metadata(services.kafka, group, topic)
    assert [m.split(" owner=")[0] for m in kept] == ["es-sink partitions=2"] * 2
    assert all(m.endswith(" released") for m in kept), kept
    shown = run_cli(services, env, "offsets", "show", "--json").json()
    assert [(p["partition"], p["committed"], p["committed_lag"]) for p in shown["partitions"]] == [
        (0, 10, 0), (1, 5, 0)
    ]  # fmt: skip
    assert run_cli(services, env, "offsets", "reset", "--to", "soon").exit_code == 2
    bad = run_cli(services, env, "offsets", "reset", "--to", "earliest", "--topic", "other")
    assert bad.exit_code == 2 and bad.stderr.startswith("es-sink: --topic: other is not")


def _metadata(kafka: str, group: str, topic: str) -> list[str]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
        return [tp.metadata for tp in tps]
    finally:
        c.close()


def test_reset_refuses_while_the_flow_runs(services, names, tmp_path) -> None:
    from devkit.kafka import produce

    topic, group = names("off-run"), names("off-run-group")
    create_topic(services.kafka, topic)
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": group, "KAFKA_STOP_AT_END": "false"}
    flow = start_flow(services, env, log=tmp_path / "flow.log")
    stop = threading.Event()

    def keep_producing() -> None:  # a flow with records to read commits each epoch
        n = 0
        while not stop.is_set():
            produce(services.kafka, topic, [(f"k{n}".encode(), b'{"n": 1}')])
            n += 1
            time.sleep(0.1)

    feeder = threading.Thread(target=keep_producing, daemon=True)
    feeder.start()
    try:
        deadline = time.monotonic() + 60
        while committed_offsets(services.kafka, group, topic).get(0, -1) < 0:
            assert time.monotonic() < deadline, (tmp_path / "flow.log").read_text()[-2000:]
            time.sleep(0.5)
        before = committed_offsets(services.kafka, group, topic)
        run = run_cli(services, env, "offsets", "reset", "--to", "earliest", "--probe-s", "3")
        assert run.exit_code == 1
        assert run.stderr.startswith(
            f"es-sink: KAFKA_GROUP_ID: refusing to move the offsets of group {group}: "
            "a flow of it is running (its committed offsets moved within 3 s"
        ), run.stderr
        assert committed_offsets(services.kafka, group, topic)[0] >= before[0]  # not moved
    finally:
        stop.set()
        feeder.join()
        flow.send_signal(signal.SIGTERM)
        assert flow.wait(60) == 0
    run = run_cli(services, env, "offsets", "reset", "--to", "earliest", "--probe-s", "2")
    assert run.exit_code == 0, run.stderr
    assert committed_offsets(services.kafka, group, topic) == {0: 0}
