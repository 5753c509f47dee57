"""Rescaling over a recovery store, partitions and topics that appear while the flow runs,
and VERSION=offset where only Kafka shows the offsets stopped ordering a document's writes,
against the real broker and node."""

from __future__ import annotations

import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.support.es_proxy import EsProxy
from tests.support.flows import (
    ROOT,
    Services,
    committed_offsets,
    count_docs,
    create_topic,
    produce,
    run_flow,
    search_all,
    start_flow,
    wait_for,
)

pytestmark = pytest.mark.integration

RECOVERY = ("-s", "1", "-b", "0")


def _recovery_dir(tmp_path: Path, partitions: int = 2) -> Path:
    path = tmp_path / "recovery"
    path.mkdir()
    cmd = [sys.executable, "-m", "bytewax.recovery", str(path), str(partitions)]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return path


def _stored_keys(path: Path) -> set[str]:
    """Every state key in the store, read with sqlite directly (not with the code under test)."""
    keys: set[str] = set()
    for part in path.glob("part-*.sqlite3"):
        conn = sqlite3.connect(part)
        keys.update(k for (k,) in conn.execute("SELECT DISTINCT state_key FROM snaps"))
        conn.close()
    return keys


def _records(prefix: str, n: int, start: int = 0) -> list[tuple[bytes, bytes]]:
    return [(f"{prefix}{i}".encode(), orjson.dumps({"i": i})) for i in range(start, start + n)]


def _leaders(kafka: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": kafka})

    def ready() -> bool:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        parts = meta.partitions.values() if meta is not None and meta.error is None else []
        return len(parts) == total and all(p.leader >= 0 for p in parts)

    wait_for(ready, 30, f"{topic} to have {total} partitions with leaders")


def _add_partitions(kafka: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(30)
    _leaders(kafka, topic, total)


def _stop(proc: subprocess.Popen[bytes], timeout: float = 90) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)


# -- a store resumes with fewer workers, processes and topics


def test_store_of_10_workers_resumes_with_1_worker(services, es, names, tmp_path):
    topic = names("shrink")
    create_topic(services.kafka, topic, partitions=4)
    produce(services.kafka, topic, _records("k", 400))
    recovery = _recovery_dir(tmp_path)
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic}

    first = run_flow(services, env, "-w", "10", "-r", str(recovery), *RECOVERY)
    assert first.returncode == 0, first.output
    # ES_SINK_PARTITIONS' default, max(8, workers), gave 10 sink partitions to this store.
    assert {"es-0008", "es-0009"} <= _stored_keys(recovery)
    produce(services.kafka, topic, _records("k", 100, start=400))

    second = run_flow(services, env, "-r", str(recovery), *RECOVERY)  # 1 worker: 8 partitions
    assert second.returncode == 0, second.output
    assert set(search_all(es, topic)) == {f"k{i}" for i in range(500)}
    assert sum(committed_offsets(services.kafka, topic, topic).values()) == 500


def test_store_resumes_without_a_topic_and_keeps_its_offset(services, es, names, tmp_path):
    kept, dropped = names("kept"), names("dropped")
    for t in (kept, dropped):
        create_topic(services.kafka, t)
        produce(services.kafka, t, _records(f"{t}-", 20))
    recovery = _recovery_dir(tmp_path)
    both = {"KAFKA_TOPICS": f"{kept},{dropped}", "KAFKA_GROUP_ID": kept}

    first = run_flow(services, both, "-r", str(recovery), *RECOVERY)
    assert first.returncode == 0, first.output
    assert f"{dropped}/0" in _stored_keys(recovery)
    produce(services.kafka, kept, _records(f"{kept}-", 10, start=20))
    produce(services.kafka, dropped, _records(f"{dropped}-", 5, start=20))

    one = {**both, "KAFKA_TOPICS": kept}
    second = run_flow(services, one, "-r", str(recovery), *RECOVERY)
    assert second.returncode == 0, second.output
    assert count_docs(es, kept) == 30
    assert count_docs(es, dropped) == 20  # not read, and its offset is not committed either
    assert committed_offsets(services.kafka, kept, dropped) == {0: 20}
    assert f"source partition {dropped}/0: in the recovery store" in second.output

    # The topic comes back: it resumes at the offset the store kept, not from its start.
    es.indices.delete(index=dropped)
    third = run_flow(services, both, "-r", str(recovery), *RECOVERY)
    assert third.returncode == 0, third.output
    assert set(search_all(es, dropped)) == {f"{dropped}-{i}" for i in range(20, 25)}


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def test_store_of_2_processes_resumes_in_1_process(services, es, names, tmp_path):
    topic = names("procs")
    create_topic(services.kafka, topic, partitions=4)
    produce(services.kafka, topic, _records("k", 400))
    recovery = _recovery_dir(tmp_path)
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic}
    addresses = ";".join(f"127.0.0.1:{p}" for p in _free_ports(2))

    procs = [
        start_flow(
            services,
            env,
            "-w",
            "5",
            "-i",
            str(i),
            "-a",
            addresses,
            "-r",
            str(recovery),
            *RECOVERY,
            log=tmp_path / f"p{i}.log",
        )
        for i in range(2)
    ]
    try:
        for i, proc in enumerate(procs):
            assert proc.wait(180) == 0, (tmp_path / f"p{i}.log").read_text()
    finally:
        for proc in procs:
            _kill(proc)
    assert {"es-0008", "es-0009"} <= _stored_keys(recovery)  # 2 x 5 workers: 10 partitions
    produce(services.kafka, topic, _records("k", 100, start=400))

    run = run_flow(services, env, "-r", str(recovery), *RECOVERY)
    assert run.returncode == 0, run.output
    assert set(search_all(es, topic)) == {f"k{i}" for i in range(500)}


# -- partitions and topics that appear while running


def _live(env: dict[str, str]) -> dict[str, str]:
    return {
        **env,
        "KAFKA_STOP_AT_END": "false",
        "KAFKA_AUTO_OFFSET_RESET": "latest",
        "KAFKA_METADATA_REFRESH_S": "1",
    }


def _started(log: Path, partitions: int) -> bool:
    return log.exists() and log.read_text().count("starts at offset") >= partitions


def test_partition_added_while_running_is_read_without_a_restart_by_hand(
    services, es, names, tmp_path
):
    topic = names("grow")
    create_topic(services.kafka, topic)
    log = tmp_path / "flow.log"
    proc = start_flow(services, _live({"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic}), log=log)
    try:
        wait_for(lambda: _started(log, 1), 60, "the flow to start")
        produce(services.kafka, topic, _records("a", 20), partition=0)
        wait_for(lambda: count_docs(es, topic) == 20, 60, "the first 20 documents")

        _add_partitions(services.kafka, topic, 2)
        produce(services.kafka, topic, _records("b", 10), partition=1)
        wait_for(lambda: count_docs(es, topic) == 30, 90, "the 10 records of the new partition")
        assert proc.poll() is None, log.read_text()  # the same process (pid) still runs
        text = log.read_text()
        assert f"partitions 1 of topic {topic} appeared; restarting" in text
        assert f"{topic}/1 starts at offset 0 (earliest, not auto.offset.reset=latest" in text

        assert _stop(proc) == 0, log.read_text()
    finally:
        _kill(proc)
    assert committed_offsets(services.kafka, topic, topic) == {0: 20, 1: 10}


def test_every_process_of_a_cluster_restarts_for_a_new_partition(services, es, names, tmp_path):
    topic = names("growcluster")
    create_topic(services.kafka, topic, partitions=2)
    env = _live({"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic})
    addresses = ";".join(f"127.0.0.1:{p}" for p in _free_ports(2))
    logs = [tmp_path / f"p{i}.log" for i in range(2)]
    procs = [
        start_flow(services, env, "-i", str(i), "-a", addresses, log=logs[i]) for i in range(2)
    ]
    try:
        wait_for(lambda: sum(_started(log, 1) for log in logs) == 2, 60, "both processes")
        produce(services.kafka, topic, _records("a", 20))
        wait_for(lambda: count_docs(es, topic) == 20, 60, "the first 20 documents")

        _add_partitions(services.kafka, topic, 3)
        produce(services.kafka, topic, _records("b", 10), partition=2)
        wait_for(lambda: count_docs(es, topic) == 30, 120, "the records of the new partition")
        for proc, log in zip(procs, logs, strict=True):
            assert proc.poll() is None, log.read_text()
            assert "restarting the flow with the same command line" in log.read_text()

        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc, log in zip(procs, logs, strict=True):
            assert proc.wait(90) == 0, log.read_text()
    finally:
        for proc in procs:
            _kill(proc)
    assert sum(committed_offsets(services.kafka, topic, topic).values()) == 30
    assert committed_offsets(services.kafka, topic, topic)[2] == 10


def test_topic_matching_the_regex_created_while_running_is_read(services, es, names, tmp_path):
    first = names("rx")
    create_topic(services.kafka, first)
    regex = re.escape(first.rsplit("-", 1)[0]) + r"-\d+"
    env = _live({"KAFKA_TOPICS_REGEX": regex, "KAFKA_GROUP_ID": first})
    log = tmp_path / "flow.log"
    proc = start_flow(services, env, log=log)
    try:
        wait_for(lambda: _started(log, 1), 60, "the flow to start")
        produce(services.kafka, first, _records("a", 5))
        wait_for(lambda: count_docs(es, first) == 5, 60, "the first topic's documents")

        second = names("rx")
        create_topic(services.kafka, second, partitions=2)
        produce(services.kafka, second, _records("b", 10))
        wait_for(lambda: count_docs(es, second) == 10, 90, "the new topic's documents")
        assert proc.poll() is None, log.read_text()
        assert f"topic {second} (partitions 0, 1) appeared; restarting" in log.read_text()

        assert _stop(proc) == 0, log.read_text()
    finally:
        _kill(proc)
    assert sum(committed_offsets(services.kafka, first, second).values()) == 10
    assert committed_offsets(services.kafka, first, first) == {0: 5}


def test_keys_moved_by_added_partitions_end_at_their_newest_write(services, es, names, tmp_path):
    """Partitions added while the flow lags move about half of the keys (murmur2, Kafka's
    default partitioner): their older writes wait in the old partition's backlog, the newer
    ones go to the new partition. Read side by side, the older write landed last."""
    topic = names("movedkeys")
    create_topic(services.kafka, topic)
    keys = [f"k{i}" for i in range(100)]
    old = [(k.encode(), orjson.dumps({"v": f"old-{n}"})) for n in range(8) for k in keys]
    produce(services.kafka, topic, old)
    env = {
        **_live({"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic}),
        "KAFKA_AUTO_OFFSET_RESET": "earliest",
        # One sink partition, bulks of 10 records, 0.1 s each: about 70 records/s.
        "KAFKA_CONSUME_BATCH_SIZE": "10",
        "ES_SINK_PARTITIONS": "1",
        "BULK_MAX_ACTIONS": "10",
        "ES_MAX_IN_FLIGHT": "1",
        "API_PORT": str(_free_ports(1)[0]),
    }
    log = tmp_path / "flow.log"
    with EsProxy(services.es_url) as proxy:
        proxy.rule = lambda call: call.hold(0.1)  # a slow node: the flow lags
        # Two workers, a consumer each: the new partition is read beside the old one's backlog
        # (one consumer would return its prefetched backlog first).
        proc = start_flow(services, {**env, "ES_HOSTS": proxy.url}, "-w", "2", log=log)
        try:
            wait_for(
                lambda: 0 < committed_offsets(services.kafka, topic, topic)[0] < len(old) / 2,
                60,
                "the flow to commit part of the backlog",
            )
            _add_partitions(services.kafka, topic, 2)
            new = [(k.encode(), orjson.dumps({"v": "new"})) for k in keys]
            produce(services.kafka, topic, new, config={"partitioner": "murmur2_random"})
            assert committed_offsets(services.kafka, topic, topic)[0] < len(old)  # lagging
            assert _ends(services.kafka, topic)[1] > 0  # keys moved to the new partition
            held: list[bool] = []

            def caught_up() -> bool:
                held.append(_held(env["API_PORT"], topic, 1))
                return committed_offsets(services.kafka, topic, topic) == _ends(
                    services.kafka, topic
                )

            wait_for(caught_up, 180, "the flow to catch up")
            assert _stop(proc) == 0, log.read_text()[-3000:]
        finally:
            _kill(proc)
    stale = {k: d["v"] for k, d in search_all(es, topic).items() if d["v"] != "new"}
    assert stale == {}, f"{len(stale)} keys end at an older write"
    assert any(held)  # GET /status said why the new partition read nothing
    text = log.read_text()
    assert text.count(f"source partition {topic}/1: added to its topic while the group") == 1


def _held(port: str, topic: str, partition: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as resp:
            status = orjson.loads(resp.read())
    except OSError:  # not serving yet, or restarting
        return False
    why = f"new partition: waiting for the older partitions to reach {topic}/0@"
    return any(
        p["partition"] == partition and (p.get("held") or "").startswith(why)
        for p in status["partitions"]
    )


def _ends(kafka: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": topic})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in sorted(meta.partitions)
        }
    finally:
        consumer.close()


# -- VERSION=offset where Kafka shows that offsets no longer order a document's writes


def _versions(n: int, start: int = 1) -> list[tuple[bytes, bytes]]:
    return [(b"x", orjson.dumps({"v": v})) for v in range(start, start + n)]


def test_version_offset_stops_when_partitions_are_added_while_running(
    services, es, names, tmp_path
):
    topic = names("voff")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, _versions(100))
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "VERSION": "offset"}
    log = tmp_path / "flow.log"
    proc = start_flow(services, {**_live(env), "KAFKA_AUTO_OFFSET_RESET": "earliest"}, log=log)
    try:
        wait_for(
            lambda: count_docs(es, topic) == 1 and search_all(es, topic)["x"]["v"] == 100,
            60,
            "x at v100",
        )
        _add_partitions(services.kafka, topic, 2)
        produce(services.kafka, topic, _versions(1, start=101), partition=1)
        assert proc.wait(90) != 0
    finally:
        _kill(proc)
    text = log.read_text()
    assert f"VERSION=offset: partitions were added to topic {topic}; offsets of" in text
    assert committed_offsets(services.kafka, topic, topic) == {0: 100, 1: -1001}

    # Nor does it start again until VERSION changes.
    run = run_flow(services, env)
    assert run.returncode != 0
    assert f"VERSION: topic {topic} has 2 partitions and VERSION=offset" in run.output
    assert "Traceback" not in run.output
    assert run_flow(services, {**env, "VERSION": "none"}).returncode == 0
    assert search_all(es, topic)["x"]["v"] == 101


def test_version_offset_stops_when_a_topic_of_two_partitions_appears_while_running(
    services, es, names, tmp_path
):
    """KAFKA_TOPICS_REGEX: a new topic of several partitions, which the start refuses
    under VERSION=offset with DOC_ID=key, was read after the restart as if it had one."""
    first = names("voffrx")
    create_topic(services.kafka, first)
    produce(services.kafka, first, _versions(5))
    env = {
        "KAFKA_TOPICS_REGEX": re.escape(first[:-1]) + r"\d+",
        "KAFKA_GROUP_ID": first,
        "ES_INDEX": "{topic}",
        "VERSION": "offset",
    }
    log = tmp_path / "flow.log"
    proc = start_flow(services, {**_live(env), "KAFKA_AUTO_OFFSET_RESET": "earliest"}, log=log)
    try:
        wait_for(lambda: count_docs(es, first) == 1, 60, "the first topic's document")
        second = names("voffrx")
        create_topic(services.kafka, second, partitions=2)
        try:
            status = proc.wait(90)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running, reading {second}\n{log.read_text()[-3000:]}")
    finally:
        _kill(proc)
    assert status != 0
    assert f"VERSION=offset: topic {second} appeared with 2 partitions; offsets of" in (
        log.read_text()
    )


def test_version_offset_refuses_a_topic_that_got_partitions_while_stopped(services, es, names):
    # From the outside: x -> v1..v100, 2 partitions, x -> v101 on partition 1.
    topic = names("voffstop")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, _versions(100))
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "VERSION": "offset"}
    assert run_flow(services, env).returncode == 0
    _add_partitions(services.kafka, topic, 2)
    produce(services.kafka, topic, _versions(1, start=101), partition=1)

    run = run_flow(services, env)
    assert run.returncode != 0, run.output  # before: exit 0 with x at v100, the 409 "done"
    assert f"VERSION: topic {topic} has 2 partitions and VERSION=offset" in run.output
    assert "Traceback" not in run.output
    assert search_all(es, topic)["x"]["v"] == 100


def test_version_offset_refuses_a_group_offset_above_the_log_end(services, es, names):
    # Offsets restored or translated onto a new topic (a mirror, a recreated topic).
    topic = names("voffahead")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, _versions(3))
    consumer = Consumer({"bootstrap.servers": services.kafka, "group.id": topic})
    consumer.commit(offsets=[TopicPartition(topic, 0, 50)], asynchronous=False)
    consumer.close()

    run = run_flow(services, {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "VERSION": "offset"})
    assert run.returncode != 0, run.output
    assert (
        f"VERSION: topic {topic} partition 0: the group {topic} committed offset 50 is above"
        in (run.output)
    )
    assert "Traceback" not in run.output


def _recreate(kafka: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 60
    while True:
        try:
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            break
        except Exception:  # still being deleted
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    _leaders(kafka, topic, 1)


def test_version_offset_refuses_a_recreated_topic_behind_its_snapshot(
    services: Services, es, names, tmp_path
):
    # Kafka drops a deleted topic's group offsets; the recovery snapshot still has them.
    topic = names("voffrecreate")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, _versions(10))
    recovery = _recovery_dir(tmp_path)
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "VERSION": "offset"}
    assert run_flow(services, env, "-r", str(recovery), *RECOVERY).returncode == 0
    _recreate(services.kafka, topic)
    produce(services.kafka, topic, _versions(3, start=11))

    run = run_flow(services, env, "-r", str(recovery), *RECOVERY)
    assert run.returncode != 0, run.output  # before: exit 0 with x at v10, v11..v13 "done"
    assert f"VERSION: topic {topic} partition 0: the recovery snapshot 10 is above" in run.output
    assert search_all(es, topic)["x"]["v"] == 10


def test_a_recreated_topic_behind_its_snapshot_is_read_from_its_beginning(
    services: Services, es, names, tmp_path
):
    """A start offset above the log end (the topic was recreated or truncated) used to be
    kept: under KAFKA_STOP_AT_END the run ended at once and committed past the new records."""
    topic = names("recreate")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, _versions(10))
    recovery = _recovery_dir(tmp_path)
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic}
    assert run_flow(services, env, "-r", str(recovery), *RECOVERY).returncode == 0
    _recreate(services.kafka, topic)
    produce(services.kafka, topic, _versions(3, start=11))

    run = run_flow(services, env, "-r", str(recovery), *RECOVERY)
    assert run.returncode == 0, run.output[-3000:]
    assert "is above the log end 3" in run.output
    assert search_all(es, topic)["x"]["v"] == 13
    assert committed_offsets(services.kafka, topic, topic) == {0: 3}
