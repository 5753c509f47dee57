"""A Schema Registry outage while the flow runs: the registry of this module (its own
STACK_DIR and port, ES_SINK_TEST_OUTAGE_REGISTRY_PORT) is stopped while records whose schema
id the flow has not fetched yet arrive. The flow waits and retries, dead-letters nothing for
the outage and loses nothing once the registry is back (its schemas are kept on disk, so the
ids are the same).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.flows import (
    CCOMPAT_PATH,
    Registry,
    committed_offsets,
    consume_all,
    count_docs,
    create_topic,
    produce,
    search_all,
    start_flow,
    wait_for,
)
from tests.support.stack import stack

pytestmark = pytest.mark.system

PORT = int(os.environ.get("ES_SINK_TEST_OUTAGE_REGISTRY_PORT", "19082"))
STACK_DIR = os.environ.get("ES_SINK_TEST_STACK_DIR", "/var/tmp/es-sink-test") + "-registry-outage"


def _stack(action: str) -> str:
    return stack(action, {"REGISTRY_PORT": str(PORT), "STACK_DIR": STACK_DIR}, "registry")


@pytest.fixture(scope="module")
def own_registry() -> Iterator[Registry]:
    _stack("clean")
    try:
        _stack("up")
        yield Registry(f"http://127.0.0.1:{PORT}{CCOMPAT_PATH}")
    finally:
        _stack("down")


def _log_has(log: Path, text: str) -> bool:
    return text in log.read_text(errors="replace")


def test_a_registry_outage_holds_records_until_it_is_back(
    services, es, names, own_registry, tmp_path
):
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic, dlq = names("sr-outage"), names("sr-outage-dlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)
    client = own_registry.client()
    ctx = SerializationContext(topic, MessageField.VALUE)
    fields = [{"name": "id", "type": "long"}]
    v1 = {"type": "record", "name": "Order", "namespace": "outage", "fields": fields}
    ser1 = AvroSerializer(client, json.dumps(v1))
    produce(services.kafka, topic, [(f"a{i}".encode(), ser1({"id": i}, ctx)) for i in range(3)])
    log = tmp_path / "flow.log"
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "KAFKA_STOP_AT_END": "false",
        "VALUE_FORMAT": "avro",
        "SCHEMA_REGISTRY_URL": own_registry.url,
        "SCHEMA_REGISTRY_CONFIG_MAX_RETRIES": "0",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }
    proc = start_flow(services, env, log=log)
    try:
        wait_for(lambda: count_docs(es, topic) == 3, 120, "the records before the outage")
        # A second schema, registered before the outage: the flow has not fetched its id.
        v2 = {
            **v1,
            "fields": [*fields, {"name": "note", "type": ["null", "string"], "default": None}],
        }
        ser2 = AvroSerializer(client, json.dumps(v2))
        later = [(f"b{i}".encode(), ser2({"id": 10 + i, "note": "v2"}, ctx)) for i in range(3)]
        later.append((b"a3", ser1({"id": 3}, ctx)))  # a cached id, behind them
        _stack("down")
        produce(services.kafka, topic, later)
        wait_for(lambda: _log_has(log, "the record waits"), 60, "the flow to wait")
        time.sleep(5)  # a few retries while the registry is away
        assert count_docs(es, topic) == 3
        assert consume_all(services.kafka, dlq) == []
        assert proc.poll() is None, log.read_text()[-3000:]
        _stack("up")
        wait_for(lambda: count_docs(es, topic) == 7, 120, "the records after the outage")
        wait_for(lambda: _log_has(log, "decoding resumes"), 30, "the flow to say so")
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(60)
    output = log.read_text(errors="replace")
    assert status == 0, output[-3000:]
    waits = [line for line in output.splitlines() if "flows.decode.registry" in line]
    print("\n".join(waits))
    assert "unreachable fetching schema id" in waits[0] and "the record waits" in waits[0]
    assert "answers again after" in waits[-1]
    docs = search_all(es, topic)
    assert docs["b0"] == {"id": 10, "note": "v2"} and docs["a3"] == {"id": 3}
    assert consume_all(services.kafka, dlq) == []
    assert committed_offsets(services.kafka, topic, topic) == {0: 7}
