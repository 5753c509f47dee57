"""`es-sink dlq replay` at volume against the real broker and node: the original timestamp
comes from the dead letter's header (the source topic is read only for dead letters written
before the header, in one pass), and duplicate dead letters are replayed once and counted
as duplicates. Prints the replay's rate; ES_SINK_TEST_REPLAY_LETTERS sets the count."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from sinks.dead_letter.headers import TIMESTAMP_HEADER, error_headers
from sinks.model import DeadLetter, Record
from tests.support.flows import create_topic, run_cli

pytestmark = pytest.mark.integration

SOURCE_MS = 1577934000000  # 2020-01-02T03:00:00Z: what the source topic holds
HEADER_MS = 1620270000000  # 2021-05-06T03:00:00Z: what the dead letters' header says


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes, Any, int]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for key, value, headers, ts in records:
        producer.produce(topic, key=key, value=value, headers=headers, timestamp=ts)
        producer.poll(0)
    assert producer.flush(60) == 0


def _letter(topic: str, offset: int, value: bytes, header: bool) -> tuple[bytes, bytes, Any, int]:
    key = f"k{offset}".encode()
    rec = Record(topic, 0, offset, HEADER_MS, key, value, ())
    headers = error_headers(DeadLetter(rec, "index", "es.mapping", "refused"))
    if not header:  # as written before the header existed
        headers = [(k, v) for k, v in headers if k != TIMESTAMP_HEADER]
    return (key, value, headers, int(time.time() * 1000))


def test_a_large_replay_reads_timestamps_from_headers(services, names, es) -> None:
    n = int(os.environ.get("ES_SINK_TEST_REPLAY_LETTERS", "2000"))
    old = 5
    topic, dlq = names("rpl"), names("rpl-dlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)
    values = [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(n + old)]
    _produce(
        services.kafka, topic, [(f"k{i}".encode(), v, [], SOURCE_MS) for i, v in enumerate(values)]
    )
    letters = [_letter(topic, i, values[i], header=True) for i in range(n)]
    letters += [_letter(topic, n + i, values[n + i], header=False) for i in range(old)]
    letters += letters[:3]  # an at-least-once re-read dead-lettered three again
    _produce(services.kafka, dlq, letters)
    env = {
        "KAFKA_TOPICS": topic,
        "DLQ_TOPIC": dlq,
        "ERRORS_TOLERANCE": "all",
        "ES_INDEX": "{topic}-{yyyy.MM.dd}",
        "KAFKA_GROUP_ID": names("rpl-group"),
    }

    dry = run_cli(services, env, "dlq", "replay", "--dry-run", "--json").json()
    assert dry["summary"] == f"dry-run: unverified={n + old} failed=0 skipped=0 duplicates=3"
    began = time.monotonic()
    run = run_cli(services, env, "dlq", "replay", "--json")
    took = time.monotonic() - began
    print(f"\nreplayed {n + old} dead letters in {took:.1f} s ({(n + old) / took:.0f}/s)")
    assert run.exit_code == 0, run.stdout + run.stderr
    summary = run.json()
    assert summary["summary"] == f"replayed={n + old} failed=0 skipped=0 duplicates=3"
    assert summary["failed_by_stage"] == {}

    es.indices.refresh(index=f"{topic}-*")
    assert es.count(index=f"{topic}-2021.05.06")["count"] == n  # the header's time
    assert es.count(index=f"{topic}-2020.01.02")["count"] == old  # read back from the source

    inspect = run_cli(services, env, "dlq", "inspect", "--json").json()
    assert (inspect["matched"], inspect["records"]) == (n + old + 3, n + old)
    assert [(g["count"], g["records"]) for g in inspect["groups"]] == [(n + old + 3, n + old)]


def test_duplicates_of_failing_letters_count_once(services, names) -> None:
    topic, dlq = names("rpl-dup"), names("rpl-dup-dlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)
    letters = [_letter(topic, i, b"{not json", header=True) for i in range(4)]
    _produce(services.kafka, dlq, letters + letters[:2])
    env = {"KAFKA_TOPICS": topic, "DLQ_TOPIC": dlq, "ERRORS_TOLERANCE": "all"}
    for args in (["--dry-run"], []):
        run = run_cli(services, env, "dlq", "replay", "--json", "--group", names("g"), *args)
        summary = run.json()
        assert run.exit_code == 1
        assert (summary["failed"], summary["duplicates"], summary["skipped"]) == (4, 2, 0)
        assert summary["failed_by_stage"] == {"deserialize": 4}
