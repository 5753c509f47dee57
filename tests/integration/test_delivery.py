"""At-least-once delivery against the real broker and node: kill -9 with a recovery
directory, commits never ahead of Elasticsearch, SIGTERM, and two processes."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import orjson
import pytest

from tests.support.flows import (
    ROOT,
    committed_offsets,
    count_docs,
    create_topic,
    produce,
    run_flow,
    search_all,
    start_flow,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.compat("elasticsearch")]


def _fill(services, topic: str, partitions: int, per_partition: int) -> None:
    create_topic(services.kafka, topic, partitions)
    for p in range(partitions):
        produce(
            services.kafka,
            topic,
            (
                (f"k{p}-{o}".encode(), orjson.dumps({"p": p, "o": o, "pad": "x" * 100}))
                for o in range(per_partition)
            ),
            partition=p,
        )


def _init_recovery(path) -> None:
    subprocess.run([sys.executable, "-m", "bytewax.recovery", str(path), "1"], check=True, cwd=ROOT)


def test_kill_9_then_rerun_with_recovery_directory_loses_nothing(services, es, names, tmp_path):
    topic = names("kill")
    _fill(services, topic, 2, 15000)
    recovery = tmp_path / "recovery"
    recovery.mkdir()
    _init_recovery(recovery)
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "BULK_MAX_ACTIONS": "500"}
    args = ("-r", str(recovery), "-s", "1", "-b", "0")

    proc = start_flow(services, env, *args, log=tmp_path / "run1.log")
    try:
        wait_for(lambda: count_docs(es, topic) >= 2000, 120, "the first documents")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    first = count_docs(es, topic)
    assert first < 30000, "the flow finished before it was killed; the test proves nothing"

    run = run_flow(services, env, *args)
    assert run.returncode == 0, run.output
    docs = search_all(es, topic)
    assert len(docs) == 30000
    assert all(docs[f"k{p}-{o}"]["o"] == o for p in range(2) for o in range(0, 15000, 997))
    assert committed_offsets(services.kafka, topic, topic) == {0: 15000, 1: 15000}


def test_committed_offsets_never_ahead_of_elasticsearch(services, es, names, tmp_path):
    topic = names("commits")
    _fill(services, topic, 2, 20000)
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "KAFKA_CONSUME_BATCH_SIZE": "200",
        "BULK_MAX_ACTIONS": "300",
        "TRANSFORMS": "tests.integration.slow_transforms:pause",
    }
    proc = start_flow(services, env, "-s", "1", log=tmp_path / "flow.log")
    checks = 0
    try:
        while proc.poll() is None:
            committed = committed_offsets(services.kafka, topic, topic)
            es.indices.refresh(index=topic) if es.indices.exists(index=topic) else None
            for p, c in committed.items():
                if c <= 0:
                    continue
                # Every record below the committed offset must already be searchable.
                n = es.count(index=topic, query={"bool": {"filter": [
                    {"term": {"p": p}}, {"range": {"o": {"lt": c}}}]}})["count"]  # fmt: skip
                assert n == c, f"partition {p}: committed {c} but only {n} documents below it"
                checks += 1
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (tmp_path / "flow.log").read_text()[-3000:]
    assert checks >= 3, "too few commits observed during the run to prove anything"
    assert committed_offsets(services.kafka, topic, topic) == {0: 20000, 1: 20000}


def test_sigterm_flushes_commits_and_exits_zero(services, es, names, tmp_path):
    topic = names("sigterm")
    _fill(services, topic, 1, 30000)
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "KAFKA_STOP_AT_END": "false",
           "KAFKA_CONSUME_BATCH_SIZE": "100"}  # fmt: skip
    log = tmp_path / "flow.log"
    proc = start_flow(services, env, "-s", "1", log=log)
    wait_for(lambda: count_docs(es, topic) >= 1000, 120, "the first documents")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, log.read_text()[-3000:]
    committed = committed_offsets(services.kafka, topic, topic)[0]
    indexed = count_docs(es, topic)
    assert 0 < committed <= indexed
    # Nothing was lost: a second run picks up at the commit and finishes the topic.
    run = run_flow(services, {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic})
    assert run.returncode == 0, run.output
    assert count_docs(es, topic) == 30000


def test_two_processes_share_the_partitions(services, es, names, tmp_path):
    topic = names("procs")
    _fill(services, topic, 4, 2500)
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic}
    addresses = "127.0.0.1:2301;127.0.0.1:2302"
    procs = [
        start_flow(services, env, "-i", str(i), "-a", addresses, log=tmp_path / f"p{i}.log")
        for i in range(2)
    ]
    for i, proc in enumerate(procs):
        assert proc.wait(180) == 0, (tmp_path / f"p{i}.log").read_text()[-3000:]
    # Each process read some of the partitions.
    for i in range(2):
        assert "starts at offset" in (tmp_path / f"p{i}.log").read_text()
    assert count_docs(es, topic) == 10000
    assert committed_offsets(services.kafka, topic, topic) == {p: 2500 for p in range(4)}


def test_deleted_recovery_directory_falls_back_to_committed_offsets(services, es, names, tmp_path):
    topic = names("lostrecovery")
    _fill(services, topic, 1, 500)
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic}
    recovery = tmp_path / "recovery"
    recovery.mkdir()
    _init_recovery(recovery)
    args = ("-r", str(recovery), "-s", "1", "-b", "0")
    assert run_flow(services, env, *args).returncode == 0

    produce(services.kafka, topic, [(f"new-{i}".encode(), b'{"o": -1}') for i in range(300)])
    es.indices.delete(index=topic)
    shutil.rmtree(recovery)  # lost with its volume, say
    recovery.mkdir()
    _init_recovery(recovery)

    run = run_flow(services, env, *args)
    assert run.returncode == 0, run.output
    assert "no recovery snapshot although a recovery directory is set" in run.output
    # Only what came after the committed offset is read again.
    docs = search_all(es, topic)
    assert sorted(docs) == sorted(f"new-{i}" for i in range(300))
