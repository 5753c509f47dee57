"""`es-sink offsets` against the real broker and flow: a reset to a time sets each
partition to the first offset at or after it; it refuses while an instance holds the
partitions (judged from the group's commits, not the operator's API_PORT), and with
--force the running flow reads from the new offset; with a recovery directory the next
start follows the reset over its snapshot."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from tests.support.flows import (
    committed_offsets,
    create_topic,
    produce,
    run_cli,
    run_flow,
    search_all,
    start_flow,
    wait_for,
)
from tools.chaos.flow import free_ports

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

    # The reset's commits keep the partition count and the owner's generation, name no
    # owner (a flow would take them for its own) and say that the reset made them.
    from flows.kafka.fencing import Owner, Reset

    kept = _metadata(services.kafka, group, topic)
    assert [m.split(" reset-by=")[0] for m in kept] == ["es-sink partitions=2 gen=1"] * 2
    assert all(Reset.parse(m) is not None and Owner.parse(m) is None for m in kept), kept
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


def test_reset_refuses_while_an_idle_flow_holds_the_partition_and_force_is_followed(
    services, es, names, tmp_path
) -> None:
    """The operator's shell has no API_PORT and the flow, caught up, commits nothing: its
    commits' metadata still say that it holds the partitions. With --force the flow reads
    from the new offset at its next check instead of committing its position over it."""
    topic, group = names("off-run"), names("off-run-group")
    create_topic(services.kafka, topic, 2)
    for p in (0, 1):
        produce(services.kafka, topic, [(f"p{p}-{i}".encode(), b'{"n": 1}') for i in range(10)],
                partition=p)  # fmt: skip
    cli_env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": group, "KAFKA_STOP_AT_END": "false"}
    flow_env = {**cli_env, "API_PORT": str(free_ports(1)[0])}
    log = tmp_path / "flow.log"
    flow = start_flow(services, flow_env, log=log)
    try:
        wait_for(lambda: committed_offsets(services.kafka, group, topic) == {0: 10, 1: 10}, 60,
                 "the flow to index and commit everything")  # fmt: skip
        es.indices.refresh(index=topic)
        es.delete(index=topic, id="p1-2", refresh=True)  # the document to bring back
        one = ["--topic", topic, "--partition", "1"]

        refused = run_cli(services, cli_env, "offsets", "reset", "--to", "earliest", *one)
        assert refused.exit_code == 1, refused.stdout
        assert refused.stderr.startswith(
            f"es-sink: KAFKA_GROUP_ID: refusing to move the offsets of group {group}: "
            f"{topic}/1 is held by instance "
        ), refused.stderr
        assert refused.stderr.rstrip().endswith(
            ": its process runs on this host; stop every process first, or pass --force"
        ), refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        assert committed_offsets(services.kafka, group, topic) == {0: 10, 1: 10}

        forced = run_cli(services, cli_env, "offsets", "reset", "--to", "earliest", *one,
                         "--force")  # fmt: skip
        assert forced.exit_code == 0, forced.stderr
        assert forced.stdout.splitlines() == [f"moved {topic}/1: 10 -> 0"]
        assert forced.stderr.startswith(f"es-sink: --force: {topic}/1 held by instance ")
        # It waits for the flow to follow, and says so.
        assert f" reads {topic}/1 from the new offset (committed " in forced.stderr
        # The flow reads partition 1 again from 0: the deleted document comes back, and
        # its commits go back to the end (not its old position written over the reset).
        wait_for(lambda: "p1-2" in search_all(es, topic), 60, "the deleted document to return")
        wait_for(lambda: "moved the group's offset to 0; reading from there" in log.read_text(),
                 30, "the flow's line")  # fmt: skip
        wait_for(lambda: committed_offsets(services.kafka, group, topic) == {0: 10, 1: 10}, 60,
                 "the flow to commit partition 1 again")  # fmt: skip
        (line,) = [x for x in log.read_text().splitlines() if "moved the group's offset" in x]
        assert f"source partition {topic}/1: es-sink offsets reset at " in line
        assert line.endswith(
            "moved the group's offset to 0; reading from there (the position was 10)"
        )
        assert "another tool" not in log.read_text()
    finally:
        flow.send_signal(signal.SIGTERM)
        assert flow.wait(60) == 0
    # Stopped cleanly: released, so a reset needs no --force (and watches no commits).
    run = run_cli(services, cli_env, "offsets", "reset", "--to", "earliest")
    assert run.exit_code == 0, run.stderr
    assert committed_offsets(services.kafka, group, topic) == {0: 0, 1: 0}


def test_a_flow_with_a_recovery_directory_follows_a_reset_over_its_snapshot(
    services, es, names, tmp_path
) -> None:
    """`-r`, as docker-compose.yml and the StatefulSet run it: the reset's commit is newer
    than the snapshot, so the next start reads from it; the start after that resumes from
    its snapshot again."""
    topic, group = names("off-rec"), names("off-rec-group")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, [(f"k{i}".encode(), b'{"n": 1}') for i in range(50)])
    recovery = tmp_path / "recovery"
    recovery.mkdir()
    subprocess.run([sys.executable, "-m", "bytewax.recovery", str(recovery), "1"], check=True,
                   capture_output=True)  # fmt: skip
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": group}
    args = ("-r", str(recovery), "-s", "1", "-b", "0")
    first = run_flow(services, env, *args)
    assert first.returncode == 0, first.output
    assert committed_offsets(services.kafka, group, topic) == {0: 50}
    for doc in ("k3", "k30"):
        es.delete(index=topic, id=doc, refresh=True)
    assert len(search_all(es, topic)) == 48

    reset = run_cli(services, env, "offsets", "reset", "--to", "earliest")
    assert reset.exit_code == 0, reset.stderr
    assert reset.stdout.splitlines() == [f"moved {topic}/0: 50 -> 0"]

    second = run_flow(services, env, *args)
    assert second.returncode == 0, second.output
    starts = [x for x in second.output.splitlines() if "starts at offset" in x]
    assert len(starts) == 1, second.output
    assert (
        f"source partition {topic}/0 starts at offset 0 (group {group} committed offset, "
        "set by es-sink offsets reset at " in starts[0]
    )
    assert starts[0].endswith("not the recovery snapshot's 50); log end 50"), starts[0]
    assert len(search_all(es, topic)) == 50  # k3 and k30 are back
    assert committed_offsets(services.kafka, group, topic) == {0: 50}

    third = run_flow(services, env, *args)
    assert third.returncode == 0, third.output
    (start,) = [x for x in third.output.splitlines() if "starts at offset" in x]
    assert f"source partition {topic}/0 starts at offset 50 (recovery snapshot)" in start
