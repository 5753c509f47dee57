"""The registry formats against the suite's real Schema Registry (Apicurio Registry's
Confluent-compatible API): schema references, the producers' subject name strategies, a
schema evolved while the flow runs, `es-sink check` reaching the registry, and the Avro
demo end to end.

Subjects and record names carry the test's unique topic name, so tests on other workers
never share one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from tests.support.flows import (
    ROOT,
    committed_offsets,
    consume_all,
    count_docs,
    create_topic,
    produce,
    run_cli,
    run_flow,
    search_all,
    start_flow,
    wait_for,
)

pytestmark = pytest.mark.integration


def _env(topic: str, dlq: str, registry: Any, **extra: str) -> dict[str, str]:
    return {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "VALUE_FORMAT": "avro",
        "SCHEMA_REGISTRY_URL": registry.url,
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
        **extra,
    }


def _topics(services: Any, names: Any, prefix: str) -> tuple[str, str]:
    topic, dlq = names(prefix), names(f"{prefix}-dlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)
    return topic, dlq


def _namespace(topic: str) -> str:
    """An Avro namespace of the test's own (topic names have dashes)."""
    return topic.replace("-", "_")


def _record(name: str, namespace: str, *fields: tuple[str, Any]) -> dict[str, Any]:
    return {
        "type": "record",
        "name": name,
        "namespace": namespace,
        "fields": [{"name": n, "type": t} for n, t in fields],
    }


def test_an_avro_schema_that_references_another_subject(services, es, names, registry):
    """The writer schema names a type that another subject holds (a schema reference)."""
    from confluent_kafka.schema_registry import Schema, SchemaReference
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic, dlq = _topics(services, names, "sr-ref")
    ns = _namespace(topic)
    client = registry.client()
    address = _record("Address", ns, ("city", "string"), ("zip", ["null", "string"]))
    client.register_schema(f"{ns}.Address", Schema(json.dumps(address), "AVRO"))
    customer = _record("Customer", ns, ("id", "long"), ("home", f"{ns}.Address"))
    ref = SchemaReference(f"{ns}.Address", f"{ns}.Address", 1)
    writer = Schema(json.dumps(customer), "AVRO", [ref])
    schema_id = client.register_schema(f"{topic}-value", writer)
    assert client.get_schema(schema_id).references == [ref]
    ser = AvroSerializer(
        client, writer, conf={"auto.register.schemas": False, "use.latest.version": True}
    )
    ctx = SerializationContext(topic, MessageField.VALUE)
    rows = {
        "c1": {"id": 1, "home": {"city": "Lyon", "zip": "69001"}},
        "c2": {"id": 2, "home": {"city": "Oslo", "zip": None}},
    }
    produce(services.kafka, topic, [(k.encode(), ser(v, ctx)) for k, v in rows.items()])
    run = run_flow(services, _env(topic, dlq, registry))
    assert run.returncode == 0, run.output
    assert search_all(es, topic) == rows
    assert consume_all(services.kafka, dlq) == []


def test_a_protobuf_schema_that_imports_another_file(services, es, names, registry):
    """confluent-kafka's serializer registers the imported file as a subject of its own and
    the writer schema with a reference to it; the flow resolves it."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    topic, dlq = _topics(services, names, "sr-pbref")
    package = _namespace(topic)
    fdp = descriptor_pb2.FieldDescriptorProto
    common = descriptor_pb2.FileDescriptorProto(
        name=f"{package}/common.proto", package=package, syntax="proto3"
    )
    money = common.message_type.add(name="Money")
    money.field.add(name="units", number=1, type=fdp.TYPE_INT64, label=fdp.LABEL_OPTIONAL)
    money.field.add(name="currency", number=2, type=fdp.TYPE_STRING, label=fdp.LABEL_OPTIONAL)
    order_file = descriptor_pb2.FileDescriptorProto(
        name=f"{package}/order.proto",
        package=package,
        syntax="proto3",
        dependency=[common.name],
    )
    order = order_file.message_type.add(name="Order")
    order.field.add(name="id", number=1, type=fdp.TYPE_INT64, label=fdp.LABEL_OPTIONAL)
    order.field.add(
        name="price",
        number=2,
        type=fdp.TYPE_MESSAGE,
        type_name=f".{package}.Money",
        label=fdp.LABEL_OPTIONAL,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(common)
    pool.Add(order_file)
    Order = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Order"))
    ser = ProtobufSerializer(Order, registry.client(), {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    first = Order(id=1)
    first.price.units, first.price.currency = 250, "EUR"
    produce(services.kafka, topic, [(b"o1", ser(first, ctx)), (b"o2", ser(Order(id=2), ctx))])
    assert common.name in registry.client().get_subjects()
    run = run_flow(services, _env(topic, dlq, registry, VALUE_FORMAT="protobuf"))
    assert run.returncode == 0, run.output
    assert search_all(es, topic) == {
        "o1": {"id": 1, "price": {"units": 250, "currency": "EUR"}},
        "o2": {"id": 2},
    }
    assert consume_all(services.kafka, dlq) == []


def test_every_subject_name_strategy_of_the_producers_decodes(services, es, names, registry):
    """The flow finds a writer schema by the id in the record, so the subject the producer
    registered it under does not matter: TopicNameStrategy (the default),
    RecordNameStrategy and TopicRecordNameStrategy, three record types on one topic."""
    from confluent_kafka.schema_registry import (
        record_subject_name_strategy,
        topic_record_subject_name_strategy,
        topic_subject_name_strategy,
    )
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic, dlq = _topics(services, names, "sr-strat")
    ns = _namespace(topic)
    client = registry.client()
    ctx = SerializationContext(topic, MessageField.VALUE)
    kinds = {
        "Order": (topic_subject_name_strategy, f"{topic}-value"),
        "Refund": (record_subject_name_strategy, f"{ns}.Refund"),
        "Payment": (topic_record_subject_name_strategy, f"{topic}-{ns}.Payment"),
    }
    records, expected = [], {}
    for i, (name, (strategy, _)) in enumerate(kinds.items()):
        schema = json.dumps(_record(name, ns, ("kind", "string"), ("n", "int")))
        ser = AvroSerializer(client, schema, conf={"subject.name.strategy": strategy})
        doc = {"kind": name, "n": i}
        records.append((name.encode(), ser(doc, ctx)))
        expected[name] = doc
    produce(services.kafka, topic, records)
    assert {subject for _, subject in kinds.values()} <= set(client.get_subjects())
    run = run_flow(services, _env(topic, dlq, registry))
    assert run.returncode == 0, run.output
    assert search_all(es, topic) == expected
    assert consume_all(services.kafka, dlq) == []


def test_a_schema_evolved_while_the_flow_runs(services, es, names, registry, tmp_path):
    """A running flow meets records of a second, compatible version of the subject's
    schema (registered mid-stream, under BACKWARD compatibility): both versions decode, each
    record as it was written; an incompatible third version is refused by the registry."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryError
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic, dlq = _topics(services, names, "sr-evolve")
    ns = _namespace(topic)
    client = registry.client()
    subject = f"{topic}-value"
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = _record("Order", ns, ("id", "long"), ("name", "string"))
    ser1 = AvroSerializer(client, json.dumps(v1))
    produce(
        services.kafka,
        topic,
        [(f"a{i}".encode(), ser1({"id": i, "name": f"a{i}"}, ctx)) for i in range(3)],
    )
    client.set_compatibility(subject, "BACKWARD")
    log = tmp_path / "flow.log"
    proc = start_flow(services, _env(topic, dlq, registry, KAFKA_STOP_AT_END="false"), log=log)
    try:
        wait_for(lambda: count_docs(es, topic) == 3, 120, "the first version's records")
        v2 = {
            **v1,
            "fields": [
                *v1["fields"],
                {"name": "note", "type": ["null", "string"], "default": None},
            ],
        }
        ser2 = AvroSerializer(client, json.dumps(v2))
        later = [
            (f"b{i}".encode(), ser2({"id": 10 + i, "name": f"b{i}", "note": "v2"}, ctx))
            for i in range(3)
        ]
        later.append((b"a3", ser1({"id": 3, "name": "a3"}, ctx)))  # the old version still
        produce(services.kafka, topic, later)
        wait_for(lambda: count_docs(es, topic) == 7, 120, "the second version's records")
        with pytest.raises(SchemaRegistryError) as refused:  # a required field, no default
            bad = {**v1, "fields": [*v1["fields"], {"name": "qty", "type": "int"}]}
            client.register_schema(subject, Schema(json.dumps(bad), "AVRO"))
        assert refused.value.http_status_code in (409, 422)
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(60)
    assert status == 0, log.read_text()[-3000:]
    assert len(client.get_versions(subject)) == 2
    docs = search_all(es, topic)
    assert docs["a0"] == {"id": 0, "name": "a0"} and docs["a3"] == {"id": 3, "name": "a3"}
    assert docs["b2"] == {"id": 12, "name": "b2", "note": "v2"}
    assert consume_all(services.kafka, dlq) == []
    assert committed_offsets(services.kafka, topic, topic) == {0: 7}


def test_check_reaches_the_registry(services, names, registry):
    topic = names("sr-check")
    create_topic(services.kafka, topic)
    env = {"KAFKA_TOPICS": topic, "VALUE_FORMAT": "avro", "SCHEMA_REGISTRY_URL": registry.url}
    run = run_cli(services, env, "check", "--json")
    assert run.exit_code == 0, run.stdout + run.stderr
    (found,) = [c for c in run.json()["checks"] if c["check"] == "schema registry"]
    assert found["ok"] and found["detail"].startswith("Schema Registry: ")
    gone = {**env, "SCHEMA_REGISTRY_URL": "http://127.0.0.1:1/apis/ccompat/v7"}
    run = run_cli(services, gone, "check", "--json")
    assert run.exit_code == 1
    assert [p for p in run.json()["problems"] if p.startswith("SCHEMA_REGISTRY_URL")]


def test_the_avro_demo_runs_end_to_end(services, es, names, registry):
    """`scripts/demo --format avro`'s run: the demo's events as Avro, their schema
    registered under the topic's subject, every one indexed."""
    topic = names("sr-demo")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "ES_", "DLQ_"))},
        "KAFKA_BOOTSTRAP_SERVERS": services.kafka,
        "ES_HOSTS": services.es_url,
        "SCHEMA_REGISTRY_URL": registry.url,
        "PYTHONPATH": str(ROOT),
    }
    cmd = [sys.executable, "-m", "tools.demo.run", "--format", "avro", "--count", "300"]
    proc = subprocess.run(
        [*cmd, "--topic", topic], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "produced=300 indexed=300" in proc.stdout
    assert "VALUE_FORMAT=avro" in proc.stdout
    assert f"{topic}-value" in registry.client().get_subjects()
    doc = next(iter(search_all(es, topic).values()))
    assert set(doc) >= {"event_id", "type", "ts", "user", "items", "total"}


def test_a_json_schema_that_references_another_subject(services, es, names, registry):
    """A JSON Schema whose `$ref` names a schema of another subject."""
    from confluent_kafka.schema_registry import Schema, SchemaReference
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic, dlq = _topics(services, names, "sr-jref")
    client = registry.client()
    address = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "address.json",
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }
    client.register_schema(f"{topic}-address", Schema(json.dumps(address), "JSON"))
    customer = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"id": {"type": "integer"}, "home": {"$ref": "address.json"}},
        "required": ["id", "home"],
    }
    ref = SchemaReference("address.json", f"{topic}-address", 1)
    writer = Schema(json.dumps(customer), "JSON", [ref])
    client.register_schema(f"{topic}-value", writer)
    ser = JSONSerializer(
        writer, client, conf={"auto.register.schemas": False, "use.latest.version": True}
    )
    ctx = SerializationContext(topic, MessageField.VALUE)
    good = {"id": 1, "home": {"city": "Lyon"}}
    framed = ser(good, ctx)
    bad = framed[:5] + json.dumps({"id": 2, "home": {"city": 7}}).encode()  # breaks the ref
    produce(services.kafka, topic, [(b"c1", framed), (b"c2", bad)])
    run = run_flow(services, _env(topic, dlq, registry, VALUE_FORMAT="json-schema"))
    assert run.returncode == 0, run.output
    assert search_all(es, topic) == {"c1": good}
    (dead,) = consume_all(services.kafka, dlq)
    assert dead.key() == b"c2"
