"""`es-sink preview` against the real broker: records go through the flow's decoding,
transforms and action encoding, and nothing is written or committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.flows import committed_offsets, create_topic, produce, run_cli

pytestmark = pytest.mark.integration

FT = "tests.integration.feature_transforms:fail_on_boom"


def test_preview_of_a_transform_chain_writes_and_commits_nothing(
    services, names, es, tmp_path: Path
) -> None:
    topic, group = names("pv"), names("pv-group")
    create_topic(services.kafka, topic, 2)
    records = [
        (b"a", json.dumps({"id": 1, "nme": "one"}).encode()),
        (b"b", b"{not json"),
        (b"c", json.dumps({"id": 3, "boom": True}).encode()),
        (b"d", json.dumps({"id": 4, "skip": True}).encode()),
        (b"e", json.dumps({"id": 5, "nme": "five"}).encode()),
    ]
    produce(services.kafka, topic, records, partition=1)
    config = tmp_path / "es-sink.yaml"
    config.write_text(
        "transforms:\n"
        "  - {type: rename, fields: {nme: name}}\n"
        "  - {type: filter, field: skip, op: eq, value: true}\n"
        f"  - {{python: '{FT}'}}\n"
        "  - {type: id_from_field, field: id}\n"
    )
    env = {
        "ES_SINK_CONFIG": str(config),
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": group,
        "ES_INDEX": "{topic}-docs",
        "WRITE_METHOD": "upsert",
    }
    run = run_cli(services, env, "preview", "--limit", "4", "--partition", "1", "--json")
    assert run.exit_code == 0, run.stdout + run.stderr
    out = run.json()
    assert (out["read"], out["document"], out["failed"], out["dropped"]) == (4, 1, 2, 1)
    first, bad, boom, dropped = out["records"]
    assert first == {
        "source": f"{topic}/1@0",
        "outcome": "document",
        "action": "update",
        "index": f"{topic}-docs",
        "id": "1",
        "routing": None,
        "document": {"id": 1, "name": "one"},
    }
    assert (bad["outcome"], bad["stage"]) == ("failed", "deserialize")
    assert (boom["stage"], boom["reason"]) == ("transform", "boom in record 3")
    assert dropped == {"source": f"{topic}/1@3", "outcome": "dropped"}

    later = run_cli(services, env, "preview", "--from-offset", "4")
    assert later.exit_code == 0
    print(later.stdout)
    assert later.stdout.splitlines() == [
        f"{topic}/1@4  update {topic}-docs id=5",
        '  {"id":5,"name":"five"}',
        "read=1 documents=1 failed=0 dropped=0",
    ]
    assert all(o < 0 for o in committed_offsets(services.kafka, group, topic).values())
    assert not es.indices.exists(index=f"{topic}-docs")


def test_preview_of_avro_values(services, names, registry) -> None:
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = names("pv-avro")
    create_topic(services.kafka, topic)
    schema = json.dumps(
        {
            "type": "record",
            "name": "Order",
            "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
        }
    )
    ser = AvroSerializer(registry.client(), schema)
    ctx = SerializationContext(topic, MessageField.VALUE)
    produce(services.kafka, topic, [(b"o-7", ser({"id": 7, "name": "widget"}, ctx))])
    env = {
        "KAFKA_TOPICS": topic,
        "VALUE_FORMAT": "avro",
        "SCHEMA_REGISTRY_URL": registry.url,
    }
    run = run_cli(services, env, "preview", "--json")
    assert run.exit_code == 0, run.stdout + run.stderr
    (record,) = run.json()["records"]
    assert (record["action"], record["index"], record["id"]) == ("index", topic, "o-7")
    assert record["document"] == {"id": 7, "name": "widget"}
