"""The source's guarantees against the real broker and node (review F1, F9, F10, F12):
never resume past a record the processor has not examined, finish KAFKA_STOP_AT_END on
transactional topics, never read the dead-letter topic or internal topics, and stop
gracefully when the group's offset is ahead of the recovery snapshot."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from flows.config import Settings
from flows.kafka.source import find_topics
from tests.support.flows import (
    ROOT,
    committed_offsets,
    consume_all,
    count_docs,
    create_topic,
    produce,
    run_flow,
    search_all,
    start_flow,
    wait_for,
)

pytestmark = pytest.mark.integration

HOLD_LINE = "stopping once the records before it are written"


def _init_recovery(path: Path) -> None:
    path.mkdir()
    subprocess.run([sys.executable, "-m", "bytewax.recovery", str(path), "1"], check=True, cwd=ROOT)


def _records(first: int, last: int) -> list[tuple[bytes, bytes]]:
    return [(f"k{i}".encode(), orjson.dumps({"n": i})) for i in range(first, last)]


def _end_offset(kafka: str, topic: str) -> int:
    """Partition 0's end as a read_committed consumer sees it (the last stable offset)."""
    tp = TopicPartition(topic, 0)
    admin = AdminClient({"bootstrap.servers": kafka})
    futures = admin.list_offsets(
        {tp: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED
    )
    return int(futures[tp].result(30).offset)


# ------------------------------------------------------------------------------ F1


@pytest.mark.parametrize("attempt", range(3))  # the window depends on timing
def test_a_crash_after_a_failure_never_resumes_past_the_failed_record(
    services, es, names, tmp_path, attempt
):
    """ERRORS_TOLERANCE=none with a recovery directory. A batch takes 2.5 s (5 records at
    0.5 s), longer than the 2 s epoch, so each batch is emitted in the activation that
    snapshots, before the processor sees it. The bad record at offset 10 is held; the run
    is killed during the next epoch. The rerun must stop on offset 10 again, not resume past
    it (which skipped 10..14 without a word)."""
    topic = names("f1")
    create_topic(services.kafka, topic)
    records = _records(0, 20)
    records[10] = (b"k10", b'{"n": ')
    produce(services.kafka, topic, records)
    recovery = tmp_path / "recovery"
    _init_recovery(recovery)
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "KAFKA_CONSUME_BATCH_SIZE": "5",
        "KAFKA_STOP_AT_END": "false",
        "TRANSFORMS": "tests.integration.slow_transforms:half_second",
    }
    log = tmp_path / "run1.log"
    args = ("-r", str(recovery), "-s", "2", "-b", "0")
    proc = start_flow(services, env, *args, log=log)
    try:
        wait_for(lambda: HOLD_LINE in log.read_text(), 90, "the held failure")
        time.sleep(0.5)
    finally:
        proc.kill()
        proc.wait(30)
    assert f"{topic}/0@10" in log.read_text()

    rerun = run_flow(services, {**env, "KAFKA_STOP_AT_END": "true"}, *args)
    assert rerun.returncode != 0, rerun.output[-3000:]
    assert f"{topic}/0@10" in rerun.output, rerun.output[-3000:]
    assert committed_offsets(services.kafka, topic, topic)[0] <= 10
    docs = search_all(es, topic)
    assert {f"k{i}" for i in range(10)} <= set(docs)
    assert not {f"k{i}" for i in range(10, 20)} & set(docs)


# ------------------------------------------------------------------------------ F9


@pytest.mark.parametrize("tail", ["committed", "aborted", "open"])
def test_stop_at_end_finishes_on_a_transactional_topic(services, es, names, tail):
    """100 records in a committed transaction; then, per `tail`, nothing more, an aborted
    transaction or one still open. The log ends with offsets never delivered (markers,
    aborted records): the run must still exit 0 at the end it had at start."""
    topic = names(f"tx-{tail}")
    create_topic(services.kafka, topic)
    producer = Producer({"bootstrap.servers": services.kafka, "transactional.id": topic})
    producer.init_transactions(60)
    producer.begin_transaction()
    for key, value in _records(0, 100):
        producer.produce(topic, key=key, value=value)
    producer.commit_transaction(60)
    if tail != "committed":
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, key=f"aborted{i}".encode(), value=b'{"aborted": true}')
        producer.flush(30)
        if tail == "aborted":
            producer.abort_transaction(60)
    try:
        # The transaction calls return once the coordinator logged the outcome; it writes the
        # partition's marker after, so the last stable offset reaches its value a moment later:
        # past the commit marker (101), past the abort marker too (107), or at the open one (101).
        end = 107 if tail == "aborted" else 101
        wait_for(lambda: _end_offset(services.kafka, topic) == end, 30, "the markers")
        started = time.monotonic()
        run = run_flow(services, {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic}, timeout=60)
        assert run.returncode == 0, run.output[-3000:]
        assert time.monotonic() - started < 60
    finally:
        if tail == "open":
            producer.abort_transaction(60)
    docs = search_all(es, topic)
    assert set(docs) == {f"k{i}" for i in range(100)}
    assert committed_offsets(services.kafka, topic, topic) == {0: end}


# ------------------------------------------------------------------------------ F10


def test_a_regex_matching_the_dead_letter_topic_does_not_loop(services, es, names, tmp_path):
    """KAFKA_TOPICS_REGEX matches the source topic and DLQ_TOPIC: the dead-letter topic is
    not read, so one bad record makes exactly one dead letter, not one per cycle."""
    source, dlq = names("rx"), names("rx")
    for t in (source, dlq):
        create_topic(services.kafka, t)
    produce(services.kafka, source, [*_records(0, 5), (b"bad", b"{bad")])
    env = {
        "KAFKA_TOPICS_REGEX": re.escape(source.rpartition("-")[0]) + "-.*",
        "KAFKA_GROUP_ID": source,
        "KAFKA_STOP_AT_END": "false",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }
    log = tmp_path / "flow.log"
    proc = start_flow(services, env, log=log)
    try:
        wait_for(lambda: count_docs(es, source) == 5, 60, "the good records")
        wait_for(lambda: len(consume_all(services.kafka, dlq, 5)) >= 1, 30, "the dead letter")
        time.sleep(8)  # eight epochs: a dead letter read back would be dead-lettered again
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    assert len(consume_all(services.kafka, dlq)) == 1
    assert not es.indices.exists(index=dlq)
    assert re.search(f"KAFKA_TOPICS_REGEX: not reading {dlq}\\b", log.read_text())


def test_a_regex_never_matches_internal_topics(services, names):
    topic = names("rx-internal")
    create_topic(services.kafka, topic)
    settings = Settings.load(
        {
            "KAFKA_BOOTSTRAP_SERVERS": services.kafka,
            "KAFKA_TOPICS_REGEX": f"__consumer_offsets|{re.escape(topic)}",
        }
    )
    assert find_topics(settings) == {topic: [0]}


def test_kafka_topics_containing_the_dead_letter_topic_is_refused(services, names):
    source, dlq = names("src"), names("dlq")
    for t in (source, dlq):
        create_topic(services.kafka, t)
    env = {"KAFKA_TOPICS": f"{source},{dlq}", "ERRORS_TOLERANCE": "all", "DLQ_TOPIC": dlq}
    run = run_flow(services, env, timeout=60)
    assert run.returncode != 0
    (line,) = [ln for ln in run.output.splitlines() if "configuration error" in ln]
    assert "KAFKA_TOPICS" in line
    assert "DLQ_TOPIC" in line
    assert "Traceback" not in run.output


def test_a_missing_dead_letter_topic_is_refused_at_start(services, names):
    source, dlq = names("src"), names("dlq-missing")
    create_topic(services.kafka, source)
    env = {"KAFKA_TOPICS": source, "ERRORS_TOLERANCE": "all", "DLQ_TOPIC": dlq}
    run = run_flow(services, env, timeout=60)
    assert run.returncode != 0
    assert f"es_sink: configuration error: DLQ_TOPIC: no topic {dlq}" in run.output
    assert "Traceback" not in run.output
    existing = AdminClient({"bootstrap.servers": services.kafka}).list_topics(timeout=10)
    assert dlq not in existing.topics  # not auto-created either


# ------------------------------------------------------------------------------ F12


def test_sigterm_with_the_group_ahead_of_the_recovery_snapshot(services, es, names, tmp_path):
    """The recovery snapshot (10) is behind the group's offset (110: an operator reset it
    to the end). SIGTERM in the middle: the final commit is below 110; Kafka's confirmation
    of it must end the run at once with exit 0, the group at what the flow wrote."""
    topic = names("f12")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, _records(0, 10))
    recovery = tmp_path / "recovery"
    _init_recovery(recovery)
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic}
    args = ("-r", str(recovery), "-s", "1", "-b", "0")
    first = run_flow(services, env, *args)
    assert first.returncode == 0, first.output[-3000:]
    assert committed_offsets(services.kafka, topic, topic) == {0: 10}
    produce(services.kafka, topic, _records(10, 110))
    operator = Consumer({"bootstrap.servers": services.kafka, "group.id": topic})
    operator.commit(offsets=[TopicPartition(topic, 0, 110)], asynchronous=False)
    operator.close()

    env.update(
        KAFKA_STOP_AT_END="false",
        KAFKA_CONSUME_BATCH_SIZE="5",
        TRANSFORMS="tests.integration.slow_transforms:tenth_of_a_second",
    )
    log = tmp_path / "run2.log"
    proc = start_flow(services, env, *args, log=log)
    try:
        wait_for(lambda: count_docs(es, topic) >= 20, 60, "k10..k19")
    finally:
        proc.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        code = proc.wait(90)
    assert code == 0, log.read_text()[-3000:]
    assert time.monotonic() - stopped < 15
    assert "commit not confirmed" not in log.read_text()
    group = committed_offsets(services.kafka, topic, topic)[0]
    assert 20 <= group < 110
    assert {f"k{i}" for i in range(group)} <= set(search_all(es, topic))
