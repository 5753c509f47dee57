"""The documented features end to end against the real broker and node: value and key
formats (with a Schema Registry stand-in), dead letters per stage, the error policy,
tombstones, write methods and id modes, external versioning, index naming, transforms and
the Kafka source settings."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import orjson
import pytest

from tests.support.flows import (
    CCOMPAT_PATH,
    committed_offsets,
    consume_all,
    count_docs,
    create_topic,
    produce,
    run_flow,
    search_all,
)

pytestmark = [pytest.mark.integration, pytest.mark.compat("elasticsearch")]

P = "__connect.errors."
OWN = (P, "__es_sink.")  # the headers a dead letter gets beside the original ones
FT = "tests.integration.feature_transforms"


# ------------------------------------------------------------------------------ helpers


def _ms(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 UTC time."""
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def _produce_at(kafka: str, topic: str, messages: list[tuple]) -> None:
    """Produce (key, value, timestamp_ms[, headers]) in order, with explicit timestamps."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
    errors: list[object] = []
    for m in messages:
        kwargs = {"key": m[0], "value": m[1], "timestamp": m[2]}
        if len(m) > 3:
            kwargs["headers"] = m[3]
        producer.produce(topic, on_delivery=lambda err, _m: err and errors.append(err), **kwargs)
    assert producer.flush(30) == 0
    assert not errors, errors


def _dead_letters(kafka: str, topic: str) -> list[dict]:
    """The DLQ topic's messages: key, value, all headers, and the error context headers."""
    out = []
    for m in consume_all(kafka, topic):
        headers = list(m.headers() or [])
        ctx = {k[len(P) :]: v.decode() for k, v in headers if k.startswith(P)}
        out.append(
            {
                "key": m.key(),
                "value": m.value(),
                "headers": headers,
                "original_headers": [(k, v) for k, v in headers if not k.startswith(OWN)],
                "ctx": ctx,
            }
        )
    return out


def _topic(services, names, prefix: str, partitions: int = 1) -> str:
    topic = names(prefix)
    create_topic(services.kafka, topic, partitions)
    return topic


def _hits(es, index: str) -> dict[str, dict]:
    """Every hit of `index` by id, with `_source`, `_routing` and `_version`."""
    es.indices.refresh(index=index)
    resp = es.search(index=index, size=1000, version=True, query={"match_all": {}})
    return {h["_id"]: h for h in resp["hits"]["hits"]}


# ------------------------------------------------------------------------------ 1. formats


def test_json_values_and_json_keys(services, es, names):
    topic = _topic(services, names, "json")
    values = [
        (b'"plain"', {"s": "x", "n": 1, "f": 1.5, "b": True, "z": None, "nested": {"l": [1, 2]}}),
        (b"42", {"unicode": "h\u00e9llo \u2603", "big": 2**63 - 1, "neg": -(2**63)}),
        (b'{"b":2,"a":1}', {"k": "object key"}),
        (b"[1,2]", {"k": "array key"}),
        (None, {"k": "no key"}),
    ]
    produce(services.kafka, topic, [(k, orjson.dumps(v)) for k, v in values])

    run = run_flow(services, {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "KEY_FORMAT": "json"})
    assert run.returncode == 0, run.output

    # A decoded string key is the id as is; other JSON keys are their compact JSON text.
    ids = ["plain", "42", '{"b":2,"a":1}', "[1,2]", f"{topic}-0-4"]
    assert search_all(es, topic) == {i: v for i, (_, v) in zip(ids, values, strict=True)}
    assert committed_offsets(services.kafka, topic, topic) == {0: 5}


def test_connect_json_envelope_and_plain(services, es, names):
    topic = _topic(services, names, "cjson")
    schema = {
        "type": "struct",
        "fields": [
            {"field": "id", "type": "int32"},
            {"field": "price", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
             "parameters": {"scale": "2"}},
            {"field": "refund", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
             "parameters": {"scale": "2"}},
            {"field": "day", "type": "int32", "name": "org.apache.kafka.connect.data.Date"},
            {"field": "at", "type": "int64", "name": "org.apache.kafka.connect.data.Timestamp"},
            {"field": "items", "type": "array", "items": {
                "type": "int32", "name": "org.apache.kafka.connect.data.Date"}},
        ],
    }  # fmt: skip
    envelope = {
        "schema": schema,
        "payload": {
            "id": 1,
            "price": base64.b64encode((1230).to_bytes(2, "big", signed=True)).decode(),
            "refund": base64.b64encode((-1230).to_bytes(2, "big", signed=True)).decode(),
            "day": 19844,
            "at": 1714564800000,
            "items": [0, 19844],
        },
    }
    plain = {"id": 2, "schema": "not an envelope", "payload": 1, "extra": True}
    no_schema = {"id": 3, "name": "plain"}
    produce(
        services.kafka,
        topic,
        [(orjson.dumps({"schema": {"type": "string"}, "payload": "env"}), orjson.dumps(envelope)),
         (b'"plain"', orjson.dumps(plain)),
         (b'{"id": 3}', orjson.dumps(no_schema))],
    )  # fmt: skip

    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "VALUE_FORMAT": "connect-json",
        "KEY_FORMAT": "connect-json",
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output

    assert search_all(es, topic) == {
        "env": {
            "id": 1,
            "price": "12.30",
            "refund": "-12.30",
            "day": "2024-05-01",
            "at": 1714564800000,
            "items": ["1970-01-01", "2024-05-01"],
        },
        "plain": plain,
        '{"id":3}': no_schema,
    }


@pytest.mark.parametrize(
    ("fmt", "value", "expected"),
    [
        ("string", "h\u00e9llo \u2603 {not json}".encode(), "h\u00e9llo \u2603 {not json}"),
        ("bytes", b"\x00\xff\xfe bin \x80", base64.b64encode(b"\x00\xff\xfe bin \x80").decode()),
    ],
    ids=["string", "bytes"],
)  # fmt: skip
def test_string_and_bytes_values_wrapped_in_value_field(services, es, names, fmt, value, expected):
    """The value wrapped into VALUE_FIELD; the key in the same format (KEY_FORMAT=fmt)."""
    topic = _topic(services, names, fmt)
    key = "k\u00e9y".encode() if fmt == "string" else b"\x00\xffkey"
    key_id = key.decode() if fmt == "string" else base64.b64encode(key).decode()
    produce(services.kafka, topic, [(key, value), (b"k2", b"")])

    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "VALUE_FORMAT": fmt,
        "KEY_FORMAT": fmt,
        "VALUE_FIELD": "body",
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output

    k2_id = "k2" if fmt == "string" else base64.b64encode(b"k2").decode()
    assert search_all(es, topic) == {key_id: {"body": expected}, k2_id: {"body": ""}}


AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "test",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": "string"},
            {"name": "ratio", "type": "double"},
            {"name": "ok", "type": "boolean"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "attrs", "type": {"type": "map", "values": "int"}},
            {"name": "raw", "type": "bytes"},
            {"name": "color",
             "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}},
            {"name": "price",
             "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "child", "type": {"type": "record", "name": "Child",
                                       "fields": [{"name": "x", "type": "int"}]}},
        ],
    }
)  # fmt: skip

JSON_SCHEMA = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Event",
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "nested": {"type": "object"},
        },
        "required": ["id", "name"],
    }
)


def test_avro_values_and_keys_via_schema_registry(services, es, names, registry):
    import datetime as dt
    from decimal import Decimal
    from uuid import UUID

    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = _topic(services, names, "avro")
    dlq = _topic(services, names, "avro-dlq")
    client = registry.client()
    value_ser = AvroSerializer(client, AVRO_SCHEMA)
    key_ser = AvroSerializer(client, '"string"')
    vctx = SerializationContext(topic, MessageField.VALUE)
    kctx = SerializationContext(topic, MessageField.KEY)
    order = {
        "id": 7,
        "name": "widget",
        "ratio": 0.25,
        "ok": True,
        "note": None,
        "tags": ["a", "b"],
        "attrs": {"x": 1},
        "raw": b"\x00\x01\xff",
        "color": "BLUE",
        "price": Decimal("12.30"),
        "day": dt.date(2024, 5, 1),
        "at": dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=dt.UTC),
        "uid": UUID("12345678-1234-5678-1234-567812345678"),
        "child": {"x": 3},
    }
    second = {**order, "id": 8, "note": "hi", "tags": [], "attrs": {}}
    unknown_id = b"\x00" + (9999).to_bytes(4, "big") + b"\x02"
    produce(
        services.kafka,
        topic,
        [
            (key_ser("o-7", kctx), value_ser(order, vctx)),
            (key_ser("o-8", kctx), value_ser(second, vctx)),
            (key_ser("o-9", kctx), unknown_id),  # schema id unknown: a bad record
        ],
    )
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "VALUE_FORMAT": "avro",
        "KEY_FORMAT": "avro",
        "SCHEMA_REGISTRY_URL": registry.url,
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output

    expected = {
        "id": 7,
        "name": "widget",
        "ratio": 0.25,
        "ok": True,
        "note": None,
        "tags": ["a", "b"],
        "attrs": {"x": 1},
        "raw": base64.b64encode(b"\x00\x01\xff").decode(),
        "color": "BLUE",
        "price": "12.30",
        "day": "2024-05-01",
        "at": "2024-05-01T12:00:00.123000+00:00",
        "uid": "12345678-1234-5678-1234-567812345678",
        "child": {"x": 3},
    }
    assert search_all(es, topic) == {
        "o-7": expected,
        "o-8": {**expected, "id": 8, "note": "hi", "tags": [], "attrs": {}},
    }
    (dead,) = _dead_letters(services.kafka, dlq)
    assert dead["value"] == unknown_id
    assert dead["ctx"]["stage"] == "deserialize"
    assert dead["ctx"]["offset"] == "2"
    assert "schema id 9999" in dead["ctx"]["exception.message"]
    assert committed_offsets(services.kafka, topic, topic) == {0: 3}


def test_json_schema_values_via_schema_registry(services, es, names, registry):
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = _topic(services, names, "jsch")
    dlq = _topic(services, names, "jsch-dlq")
    client = registry.client()
    ser = JSONSerializer(JSON_SCHEMA, client)
    ctx = SerializationContext(topic, MessageField.VALUE)
    one = {"id": 1, "name": "a", "tags": ["x"], "nested": {"deep": {"v": 1.5}}}
    two = {"id": 2, "name": "b \u2603"}
    framed_one = ser(one, ctx)
    # Same framing (magic byte + the registered id), but the payload breaks the schema.
    invalid = framed_one[:5] + orjson.dumps({"id": "not an integer"})
    produce(
        services.kafka,
        topic,
        [(b"j1", framed_one), (b"j2", ser(two, ctx)), (b"j3", invalid)],
    )
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "VALUE_FORMAT": "json-schema",
        "SCHEMA_REGISTRY_URL": registry.url,
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output

    assert search_all(es, topic) == {"j1": one, "j2": two}
    (dead,) = _dead_letters(services.kafka, dlq)
    assert (dead["key"], dead["value"]) == (b"j3", invalid)
    assert dead["ctx"]["stage"] == "deserialize"
    assert dead["ctx"]["exception.class.name"] == "flows.decode.DecodeError"


def test_schema_registry_outage_stops_the_flow_instead_of_dead_lettering(
    services, es, names, registry
):
    """A registry that stays away past SCHEMA_REGISTRY_RETRY_BUDGET_S stops the flow: the
    record waited for it, and is neither dead-lettered nor committed."""
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from tools.chaos.flow import free_ports

    topic = _topic(services, names, "sr-down")
    dlq = _topic(services, names, "sr-down-dlq")
    ser = AvroSerializer(registry.client(), '"string"')
    ctx = SerializationContext(topic, MessageField.VALUE)
    produce(services.kafka, topic, [(b"k", ser("a string is not an object", ctx))])
    (closed,) = free_ports(1)  # no registry there: every fetch is refused
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "VALUE_FORMAT": "avro",
        "SCHEMA_REGISTRY_URL": f"http://127.0.0.1:{closed}{CCOMPAT_PATH}",
        "SCHEMA_REGISTRY_CONFIG_MAX_RETRIES": "0",
        "SCHEMA_REGISTRY_RETRY_BUDGET_S": "2",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }
    run = run_flow(services, env)
    assert run.returncode > 0, run.output
    assert f"schema registry http://127.0.0.1:{closed}{CCOMPAT_PATH} unreachable" in run.output
    assert "the record waits: decoding is retried for up to 2s" in run.output
    assert "(SCHEMA_REGISTRY_RETRY_BUDGET_S=2)" in run.output
    assert _dead_letters(services.kafka, dlq) == []  # the record is fine; the registry is not
    assert committed_offsets(services.kafka, topic, topic)[0] in (-1001, 0)


# ------------------------------------------------------------------------------ 2. dead letters


def test_dead_letters_for_each_stage_keep_original_bytes(services, es, names):
    topic = _topic(services, names, "dead", partitions=2)
    dlq = _topic(services, names, "dead-dlq")
    es.indices.create(index=topic, mappings={"properties": {"n": {"type": "integer"}}})
    h = [("trace", b"\x00\xffbinary"), ("trace", b"repeated"), ("empty", b"")]
    records = {
        0: [
            (b"good-0", b'{"n": 1}', h),
            (b"bad-json", b'{"n": 1,', h),  # deserialize: invalid JSON
            (b"bad-array", b"[1, 2, 3]", h),  # deserialize: not an object
            (b"good-3", b'{"n": 3}'),
            (b"boom", b'{"n": 4, "boom": true, "id": "b4"}', h),  # transform: ValueError
            (b"bad-map", b'{"n": "not a number"}', h),  # index: mapping conflict
            (None, b'{"n": 6}'),
        ],
        1: [
            (b"\xff\xfe", b'{"n": 10}', [("nullh", None), ("x", b"1")]),  # key not UTF-8
            (b"long", b'{"n": 11, "boom": true, "long": true}'),  # transform, long message
            (b"good-p1", b'{"n": 12}', h),
            (b"odd-id", b'{"n": 13, "odd": "id"}', h),  # index: transform set a non-JSON id
            (b"odd-key", b'{"n": 14, "odd": "key"}'),  # index: transform set a non-JSON key
        ],
    }
    for partition, recs in records.items():
        produce(services.kafka, topic, recs, partition=partition)

    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
        "TRANSFORMS": f"{FT}:fail_on_boom,{FT}:odd_ids",
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output

    assert search_all(es, topic) == {
        "good-0": {"n": 1},
        "good-3": {"n": 3},
        f"{topic}-0-6": {"n": 6},
        "good-p1": {"n": 12},
    }
    dead = {
        (d["ctx"]["partition"], d["ctx"]["offset"]): d for d in _dead_letters(services.kafka, dlq)
    }
    assert {k: d["ctx"]["stage"] for k, d in dead.items()} == {
        ("0", "1"): "deserialize",
        ("0", "2"): "deserialize",
        ("0", "4"): "transform",
        ("0", "5"): "index",
        ("1", "0"): "deserialize",
        ("1", "1"): "transform",
        ("1", "3"): "index",
        ("1", "4"): "index",
    }
    for (partition, offset), d in dead.items():
        original = records[int(partition)][int(offset)]
        headers = original[2] if len(original) > 2 else []
        assert d["key"] == original[0]
        assert d["value"] == original[1]
        assert d["original_headers"] == headers
        assert d["headers"][: len(headers)] == headers  # originals first, in order
        assert d["ctx"]["topic"] == topic
        assert len(d["ctx"]) == 6, d["ctx"]  # no stacktrace header by default
    ctx = {k: d["ctx"] for k, d in dead.items()}
    assert ctx["0", "1"]["exception.class.name"] == "flows.decode.DecodeError"
    assert "invalid JSON" in ctx["0", "1"]["exception.message"]
    assert ctx["0", "2"]["exception.class.name"] == "flows.decode.DecodeError"
    assert "must be an object, got array" in ctx["0", "2"]["exception.message"]
    assert ctx["1", "0"]["exception.class.name"] == "flows.decode.DecodeError"
    assert "invalid UTF-8" in ctx["1", "0"]["exception.message"]
    assert ctx["0", "4"]["exception.class.name"] == "builtins.ValueError"
    assert ctx["0", "4"]["exception.message"] == "boom in record b4"
    assert ctx["1", "1"]["exception.class.name"] == "builtins.ValueError"
    long_message = ctx["1", "1"]["exception.message"]
    assert len(long_message) <= 1000
    assert long_message.startswith("x" * 900)
    cls = ctx["0", "5"]["exception.class.name"]
    assert "mapper_parsing_exception" in cls or "document_parsing_exception" in cls, cls
    assert "[n]" in ctx["0", "5"]["exception.message"]
    for odd in (ctx["1", "3"], ctx["1", "4"]):
        assert odd["exception.class.name"] == "sinks.actions.ActionError"
        assert "not JSON-serializable" in odd["exception.message"]
    assert committed_offsets(services.kafka, topic, topic) == {0: 7, 1: 5}


# ------------------------------------------------------------------------------ 3. tolerance none


@pytest.mark.parametrize(
    "stage",
    [
        "deserialize",
        "index",
    ],
)
def test_errors_tolerance_none_stops_at_the_bad_record(services, es, names, stage):
    topic = _topic(services, names, f"none-{stage}")
    if stage == "index":
        es.indices.create(index=topic, mappings={"properties": {"n": {"type": "integer"}}})
        bad = b'{"n": "not a number"}'
    else:
        bad = b'{"n": '
    records = [(f"k{i}".encode(), b'{"n": %d}' % i) for i in range(6)]
    records[3] = (b"k3", bad)
    produce(services.kafka, topic, records)

    run = run_flow(services, {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic})
    assert run.returncode > 0, run.output  # an error exit, not killed by a signal
    assert f"{topic}/0@3" in run.output
    assert f"stage {stage}" in run.output
    committed = committed_offsets(services.kafka, topic, topic)[0]
    assert committed == -1001 or 0 <= committed <= 3, committed


# ------------------------------------------------------------------------------ 4. tombstones


@pytest.mark.parametrize("policy", ["ignore", "delete", "dlq", "fail"])
def test_tombstones(services, es, names, policy):
    topic = _topic(services, names, f"tomb-{policy}")
    dlq = names(f"tomb-{policy}-dlq")
    produce(
        services.kafka,
        topic,
        [(b"k1", b'{"v": 1}'), (b"k2", b'{"v": 2}'), (b"k1", None, [("why", b"gone")])],
    )
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ON_NULL_VALUE": policy}
    if policy == "dlq":
        create_topic(services.kafka, dlq)
        env["DLQ_TOPIC"] = dlq
    run = run_flow(services, env)

    if policy == "fail":
        assert run.returncode > 0, run.output
        assert f"{topic}/0@2" in run.output
        committed = committed_offsets(services.kafka, topic, topic)[0]
        assert committed == -1001 or 0 <= committed <= 2, committed
        return
    assert run.returncode == 0, run.output
    docs = search_all(es, topic)
    if policy == "delete":
        assert docs == {"k2": {"v": 2}}
    else:
        assert docs == {"k1": {"v": 1}, "k2": {"v": 2}}
    if policy == "dlq":
        (dead,) = _dead_letters(services.kafka, dlq)
        assert dead["key"] == b"k1"
        assert dead["value"] is None
        assert dead["original_headers"] == [("why", b"gone")]
        assert dead["ctx"]["offset"] == "2"
        assert dead["ctx"]["stage"] == "deserialize"
    assert committed_offsets(services.kafka, topic, topic) == {0: 3}


# ------------------------------------------------------------------------------ 5. writes, ids


def test_write_method_index_latest_wins_and_null_key_gets_coordinates(services, es, names):
    topic = _topic(services, names, "w-index")
    produce(
        services.kafka,
        topic,
        [(b"k", b'{"v": 0, "old": true}'), (b"k", b'{"v": 1}'), (None, b'{"v": 2}')],
    )
    run = run_flow(services, {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic})
    assert run.returncode == 0, run.output
    assert search_all(es, topic) == {"k": {"v": 1}, f"{topic}-0-2": {"v": 2}}


def test_write_method_create_first_wins_and_replay_is_done(services, es, names):
    topic = _topic(services, names, "w-create")
    dlq = _topic(services, names, "w-create-dlq")
    produce(services.kafka, topic, [(b"k", b'{"v": "first"}'), (b"k", b'{"v": "second"}')])
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "WRITE_METHOD": "create",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    assert search_all(es, topic) == {"k": {"v": "first"}}

    # Replay everything from the start with another group: every create answers 409 = done.
    run = run_flow(services, {**env, "KAFKA_GROUP_ID": f"{topic}-replay"})
    assert run.returncode == 0, run.output
    assert search_all(es, topic) == {"k": {"v": "first"}}
    assert _dead_letters(services.kafka, dlq) == []
    assert committed_offsets(services.kafka, f"{topic}-replay", topic) == {0: 2}


def test_write_method_upsert_merges_partial_documents(services, es, names):
    topic = _topic(services, names, "w-upsert")
    produce(
        services.kafka,
        topic,
        [
            (b"k", b'{"a": 1, "c": {"x": 1}}'),
            (b"k", b'{"b": 2}'),
            (b"k", b'{"a": 3, "c": {"y": 2}}'),
            (b"other", b'{"z": 0}'),
        ],
    )
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "WRITE_METHOD": "upsert"}
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    assert search_all(es, topic) == {
        "k": {"a": 3, "b": 2, "c": {"x": 1, "y": 2}},
        "other": {"z": 0},
    }


def test_doc_id_from_field(services, es, names):
    topic = _topic(services, names, "id-field")
    dlq = _topic(services, names, "id-field-dlq")
    # An explicit mapping: the two ids' JSON types must not race in dynamic mapping.
    es.indices.create(index=topic, mappings={"properties": {"meta.id": {"type": "keyword"}}})
    produce(
        services.kafka,
        topic,
        [
            (b"k1", b'{"meta": {"id": "abc"}, "v": 1}'),
            (b"k2", b'{"meta": {"id": 42}, "v": 2}'),
            (b"k3", b'{"meta": {"id": "abc"}, "v": 3}'),
            (b"k4", b'{"meta": {}, "v": 4}'),  # no id: dead letter (stage index)
            (b"k5", orjson.dumps({"meta": {"id": "x" * 513}, "v": 5})),  # id > 512 bytes
        ],
    )
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "DOC_ID": "field:meta.id",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    assert search_all(es, topic) == {
        "abc": {"meta": {"id": "abc"}, "v": 3},
        "42": {"meta": {"id": 42}, "v": 2},
    }
    dead = {d["key"]: d["ctx"] for d in _dead_letters(services.kafka, dlq)}
    assert {k: (c["offset"], c["stage"]) for k, c in dead.items()} == {
        b"k4": ("3", "index"),
        b"k5": ("4", "index"),
    }
    assert "meta.id" in dead[b"k4"]["exception.message"]
    assert "512 bytes" in dead[b"k5"]["exception.message"]


def test_doc_id_coordinates(services, es, names):
    topic = _topic(services, names, "id-coord", partitions=2)
    produce(
        services.kafka,
        topic,
        [(b"same", b'{"p": 0, "i": 0}'), (b"same", b'{"p": 0, "i": 1}')],
        partition=0,
    )
    produce(services.kafka, topic, [(b"same", b'{"p": 1, "i": 0}')], partition=1)
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "DOC_ID": "coordinates"}
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    assert search_all(es, topic) == {
        f"{topic}-0-0": {"p": 0, "i": 0},
        f"{topic}-0-1": {"p": 0, "i": 1},
        f"{topic}-1-0": {"p": 1, "i": 0},
    }
    assert committed_offsets(services.kafka, topic, topic) == {0: 2, 1: 1}


def test_doc_id_none_lets_elasticsearch_generate_ids(services, es, names):
    topic = _topic(services, names, "id-none")
    produce(services.kafka, topic, [(b"same", orjson.dumps({"i": i})) for i in range(25)])
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "DOC_ID": "none"}
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    assert count_docs(es, topic) == 25
    docs = search_all(es, topic)
    assert sorted(d["i"] for d in docs.values()) == list(range(25))
    assert "same" not in docs


def test_null_key_dead_lettered_with_on_null_key_dlq(services, es, names):
    topic = _topic(services, names, "nullkey")
    dlq = _topic(services, names, "nullkey-dlq")
    produce(services.kafka, topic, [(b"k", b'{"v": 1}'), (None, b'{"v": 2}', [("h", b"1")])])
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ON_NULL_KEY": "dlq", "DLQ_TOPIC": dlq}
    env["ERRORS_TOLERANCE"] = "all"
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    assert search_all(es, topic) == {"k": {"v": 1}}
    (dead,) = _dead_letters(services.kafka, dlq)
    assert (dead["key"], dead["value"]) == (None, b'{"v": 2}')
    assert dead["original_headers"] == [("h", b"1")]
    assert dead["ctx"]["offset"] == "1"
    assert "no key" in dead["ctx"]["exception.message"]
    assert committed_offsets(services.kafka, topic, topic) == {0: 2}


# ------------------------------------------------------------------------------ 6. versioning


def test_version_offset_replay_loses_to_newer(services, es, names):
    topic = _topic(services, names, "ver-off")
    dlq = _topic(services, names, "ver-off-dlq")
    produce(services.kafka, topic, [(b"k", orjson.dumps({"v": f"v{i}"})) for i in range(3)])
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "VERSION": "offset",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    assert es.get(index=topic, id="k")["_version"] == 2
    # The older offsets replayed into the same index lose (409) and count as done.
    replay = run_flow(services, {**env, "KAFKA_GROUP_ID": f"{topic}-replay"})
    assert replay.returncode == 0, replay.output
    doc = es.get(index=topic, id="k")
    assert (doc["_source"], doc["_version"]) == ({"v": "v2"}, 2)
    assert _dead_letters(services.kafka, dlq) == []
    assert committed_offsets(services.kafka, f"{topic}-replay", topic) == {0: 3}


def test_version_from_header_higher_wins(services, es, names):
    topic = _topic(services, names, "ver-hdr")
    dlq = _topic(services, names, "ver-hdr-dlq")
    produce(
        services.kafka,
        topic,
        [
            (b"a", b'{"v": "a5"}', [("ver", b"5")]),
            (b"a", b'{"v": "a3"}', [("ver", b"3")]),  # later offset, lower version: loses
            (b"b", b'{"v": "b1"}', [("ver", b"1")]),
            (b"b", b'{"v": "b2"}', [("ver", b"2")]),
            (b"c", b'{"v": "c"}'),  # no version header: dead letter
        ],
    )
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "VERSION": "header:ver",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    hits = _hits(es, topic)
    assert {i: (h["_source"], h["_version"]) for i, h in hits.items()} == {
        "a": ({"v": "a5"}, 5),
        "b": ({"v": "b2"}, 2),
    }
    (dead,) = _dead_letters(services.kafka, dlq)
    assert (dead["key"], dead["ctx"]["offset"]) == (b"c", "4")
    assert committed_offsets(services.kafka, topic, topic) == {0: 5}


# ------------------------------------------------------------------------------ 7. index naming


def test_index_template_with_record_dates(services, es, names):
    topic = _topic(services, names, "daily")
    prefix = names("logs")
    _produce_at(
        services.kafka,
        topic,
        [
            (b"a", b'{"n": 1}', _ms("2024-05-01T23:59:59.999")),
            (b"b", b'{"n": 2}', _ms("2024-05-02T00:00:00")),
            (b"c", b'{"n": 3}', _ms("2024-05-02T13:30:00")),
        ],
    )
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "ES_INDEX": prefix + "-{topic}-{yyyy.MM.dd}",
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    day1, day2 = f"{prefix}-{topic}-2024.05.01", f"{prefix}-{topic}-2024.05.02"
    assert sorted(es.indices.get(index=f"{prefix}-*")) == [day1, day2]
    assert search_all(es, day1) == {"a": {"n": 1}}
    assert search_all(es, day2) == {"b": {"n": 2}, "c": {"n": 3}}


def test_index_map_per_topic(services, es, names):
    one = _topic(services, names, "map-one")
    two = _topic(services, names, "map-two")
    three = _topic(services, names, "map-three")
    idx_one, idx_two = names("orders"), names("payments")
    ts = _ms("2024-07-15T10:00:00")
    _produce_at(services.kafka, one, [(b"o", b'{"t": 1}', ts)])
    _produce_at(services.kafka, two, [(b"p", b'{"t": 2}', ts)])
    _produce_at(services.kafka, three, [(b"q", b'{"t": 3}', ts)])
    env = {
        "KAFKA_TOPICS": f"{one},{two},{three}",
        "KAFKA_GROUP_ID": one,
        "ES_INDEX_MAP": f"{one}:{idx_one},{two}:{idx_two}-{{yyyy.MM}}",
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    assert search_all(es, idx_one) == {"o": {"t": 1}}
    assert search_all(es, f"{idx_two}-2024.07") == {"p": {"t": 2}}
    assert search_all(es, three) == {"q": {"t": 3}}  # unmapped topic: ES_INDEX ({topic})
    assert not es.indices.exists(index=one)
    assert not es.indices.exists(index=two)


def test_index_template_file_installed_and_applied(services, es, names, tmp_path):
    topic = _topic(services, names, "tmpl")
    template_name = names("template")
    path = tmp_path / f"{template_name}.json"
    path.write_text(
        json.dumps(
            {
                "index_patterns": [topic],
                "priority": 500,
                "template": {
                    "settings": {"number_of_replicas": 0},
                    "mappings": {
                        "dynamic": "strict",
                        "properties": {"code": {"type": "keyword"}, "n": {"type": "long"}},
                    },
                },
            }
        )
    )
    produce(services.kafka, topic, [(b"k", b'{"code": 12345, "n": 1}')])
    try:
        env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ES_INDEX_TEMPLATE_FILE": str(path)}
        run = run_flow(services, env)
        assert run.returncode == 0, run.output
        installed = es.indices.get_index_template(name=template_name)["index_templates"]
        assert [t["index_template"]["index_patterns"] for t in installed] == [[topic]]
        mapping = es.indices.get_mapping(index=topic)[topic]["mappings"]
        # Dynamic mapping would have made `code` a long; the template says keyword.
        assert mapping == {
            "dynamic": "strict",
            "properties": {"code": {"type": "keyword"}, "n": {"type": "long"}},
        }
        assert search_all(es, topic) == {"k": {"code": 12345, "n": 1}}
    finally:
        es.options(ignore_status=404).indices.delete_index_template(name=template_name)


# ------------------------------------------------------------------------------ 8. transforms


def test_builtin_transforms_from_yaml(services, es, names, tmp_path):
    ta = _topic(services, names, "ya")
    tb = _topic(services, names, "yb")
    routed = "t-routed-" + ta.removeprefix("t-ya-")
    # order_id is a string or an integer: a keyword either way (no dynamic-mapping race).
    for index in (routed, tb):
        es.indices.create(index=index, mappings={"properties": {"order_id": {"type": "keyword"}}})
    config = tmp_path / "es-sink.yaml"
    config.write_text(
        json.dumps(  # JSON is YAML
            {
                "kafka_topics": [ta, tb],
                "kafka_group_id": ta,
                "transforms": [
                    {"type": "filter", "field": "status", "value": "test"},
                    {"type": "filter", "field": "kind", "op": "in", "value": ["order", "refund"],
                     "negate": True},
                    {"type": "filter", "header": "skip"},
                    {"type": "insert_field", "field": "src.topic", "from": "topic"},
                    {"type": "insert_field", "field": "src.offset", "from": "offset"},
                    {"type": "insert_field", "field": "src.ts", "from": "timestamp",
                     "format": "iso"},
                    {"type": "insert_field", "field": "src.ms", "from": "timestamp"},
                    {"type": "insert_field", "field": "src.key", "from": "key"},
                    {"type": "insert_field", "field": "pipeline", "value": "es-sink"},
                    {"type": "rename", "fields": {"user.name": "customer", "amt": "amount"}},
                    {"type": "drop", "fields": ["internal", "user.debug", "absent"]},
                    {"type": "mask", "fields": ["card", "user.absent"]},
                    {"type": "timestamp_convert", "field": "created", "to": "iso", "unit": "s"},
                    {"type": "timestamp_convert", "field": "paid", "to": "epoch_ms",
                     "from_format": "%d/%m/%Y %H:%M"},
                    {"type": "id_from_field", "field": "order_id"},
                    {"type": "route", "topic_regex": "t-ya-(.+)", "replacement": "t-routed-$1"},
                    {"python": f"{FT}:tagger", "config": {"tag": "yaml"}},
                ],
            }
        )
    )  # fmt: skip
    t0, t1 = _ms("2024-05-01T12:00:00.250"), _ms("2024-05-02T08:00:00")

    def order(**kw):
        base = {
            "order_id": "o-1",
            "kind": "order",
            "status": "new",
            "user": {"name": "ann", "debug": "x", "tier": "gold"},
            "amt": 10,
            "internal": "secret",
            "card": "4111111111111111",
            "created": 1714564800,
            "paid": "01/05/2024 10:30",
        }
        return orjson.dumps({**base, **kw})

    _produce_at(
        services.kafka,
        ta,
        [
            (b"k0", order(), t0),
            (b"k1", order(order_id="o-test", status="test"), t0),  # dropped: status test
            (b"k2", order(order_id="o-other", kind="other"), t0),  # dropped: kind not listed
            (b"k3", order(order_id="o-skip"), t0, [("skip", b"")]),  # dropped: header skip
            (b"k4", order(order_id=42, created=1714608000.5), t1),
        ],
    )
    _produce_at(services.kafka, tb, [(b"r", order(order_id="r-1", kind="refund"), t1)])

    run = run_flow(services, {"ES_SINK_CONFIG": str(config)})
    assert run.returncode == 0, run.output

    def expected(topic, offset, key, ts, ts_iso, **kw):
        doc = {
            "order_id": "o-1",
            "kind": "order",
            "status": "new",
            "user": {"tier": "gold"},
            "customer": "ann",
            "amount": 10,
            "card": "****",
            "created": "2024-05-01T12:00:00.000Z",
            "paid": _ms("2024-05-01T10:30:00"),
            "src": {"topic": topic, "offset": offset, "key": key, "ts": ts_iso, "ms": ts},
            "pipeline": "es-sink",
            "tag": "yaml",
        }
        return {**doc, **kw}

    assert search_all(es, routed) == {
        "o-1": expected(ta, 0, "k0", t0, "2024-05-01T12:00:00.250Z"),
        "42": expected(
            ta,
            4,
            "k4",
            t1,
            "2024-05-02T08:00:00.000Z",
            order_id=42,
            created="2024-05-02T00:00:00.500Z",
        ),
    }
    assert search_all(es, tb) == {
        "r-1": expected(tb, 0, "r", t1, "2024-05-02T08:00:00.000Z", order_id="r-1", kind="refund")
    }
    assert not es.indices.exists(index=ta)
    assert committed_offsets(services.kafka, ta, ta) == {0: 5}
    assert committed_offsets(services.kafka, ta, tb) == {0: 1}


def test_transforms_env_var_runs_functions_in_order(services, es, names):
    topic = _topic(services, names, "envtx")
    produce(services.kafka, topic, [(b"k", b'{"name": "ann"}')])
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "TRANSFORMS": f"{FT}:shout, {FT}:stamp",
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    assert search_all(es, topic) == {"k": {"name": "ANN", "stamped": "ANN"}}


def test_custom_python_transform_modifies_drops_fans_out_and_routes(services, es, names):
    topic = _topic(services, names, "custom")
    target = names("target")
    produce(
        services.kafka,
        topic,
        [
            (b"k1", b'{"action": "modify", "qty": 2, "price": 5}'),
            (b"k2", b'{"action": "drop"}'),
            (b"k3", orjson.dumps({"action": "split", "parts": ["a", "b"], "target": target,
                                  "shard": "s1"})),
            (b"k4", orjson.dumps({"action": "move", "target": target, "shard": "s2", "x": 1})),
        ],
    )  # fmt: skip
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "TRANSFORMS": f"{FT}:custom"}
    run = run_flow(services, env)
    assert run.returncode == 0, run.output

    assert search_all(es, topic) == {"k1": {"action": "modify", "qty": 2, "price": 5, "total": 10}}
    hits = _hits(es, target)
    assert {i: (h["_source"], h.get("_routing")) for i, h in hits.items()} == {
        "k3-a": ({"from": "k3", "part": "a"}, "s1"),
        "k3-b": ({"from": "k3", "part": "b"}, "s1"),
        "k4": ({"action": "move", "x": 1}, "s2"),
    }
    assert committed_offsets(services.kafka, topic, topic) == {0: 4}


# ------------------------------------------------------------------------------ 9. source


def test_topics_regex_and_kafka_config_pass_through(services, es, names):
    ta = _topic(services, names, "rxa")
    tb = _topic(services, names, "rxb", partitions=2)
    other = _topic(services, names, "rxc")
    run_id = ta.split("-")[2]
    produce(services.kafka, ta, [(b"a", b'{"t": "a"}')])
    produce(services.kafka, tb, [(b"b0", b'{"t": "b0"}')], partition=0)
    produce(services.kafka, tb, [(b"b1", b'{"t": "b1"}')], partition=1)
    produce(services.kafka, other, [(b"c", b'{"t": "c"}')])
    env = {
        "KAFKA_TOPICS_REGEX": rf"t-rx[ab]-{run_id}-\d+",
        "KAFKA_GROUP_ID": ta,
        "KAFKA_CONFIG_CLIENT_ID": "x",
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    assert search_all(es, ta) == {"a": {"t": "a"}}
    assert search_all(es, tb) == {"b0": {"t": "b0"}, "b1": {"t": "b1"}}
    assert not es.indices.exists(index=other)
    assert committed_offsets(services.kafka, ta, tb) == {0: 1, 1: 1}


def test_invalid_kafka_config_fails_naming_it(services, names):
    topic = _topic(services, names, "badconf")
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "KAFKA_CONFIG_NOT_A_SETTING": "1"}
    run = run_flow(services, env, timeout=60)
    assert run.returncode != 0, run.output
    assert "not.a.setting" in run.output or "KAFKA_CONFIG_NOT_A_SETTING" in run.output, run.output


def test_invalid_kafka_config_is_a_one_line_configuration_error(services, names):
    topic = _topic(services, names, "badconf1")
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "KAFKA_CONFIG_NOT_A_SETTING": "1"}
    run = run_flow(services, env, timeout=60)
    assert run.returncode != 0, run.output
    assert "configuration error: KAFKA_CONFIG_NOT_A_SETTING" in run.output, run.output
    assert "Traceback" not in run.output


def _protobuf_event_types() -> dict[str, type]:
    """it/event.proto built in code (no protoc): Event (nested message, repeated, enum, bytes,
    64-bit ints, a Timestamp) and Key, the record key."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    fdp = descriptor_pb2.FieldDescriptorProto

    def add(msg, name, number, kind, type_name="", label=fdp.LABEL_OPTIONAL):
        f = msg.field.add(name=name, number=number, type=kind, label=label)
        if type_name:
            f.type_name = type_name

    file_proto = descriptor_pb2.FileDescriptorProto(
        name="it/event.proto",
        package="it",
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"],
    )
    kind = file_proto.enum_type.add(name="Kind")
    for number, name in enumerate(["KIND_UNSPECIFIED", "CLICK", "VIEW"]):
        kind.value.add(name=name, number=number)
    event = file_proto.message_type.add(name="Event")
    inner = event.nested_type.add(name="Inner")
    add(inner, "score", 1, fdp.TYPE_DOUBLE)
    add(inner, "labels", 2, fdp.TYPE_STRING, label=fdp.LABEL_REPEATED)
    add(event, "id", 1, fdp.TYPE_INT64)
    add(event, "name", 2, fdp.TYPE_STRING)
    add(event, "tags", 3, fdp.TYPE_STRING, label=fdp.LABEL_REPEATED)
    add(event, "inner", 4, fdp.TYPE_MESSAGE, ".it.Event.Inner")
    add(event, "kind", 5, fdp.TYPE_ENUM, ".it.Kind")
    add(event, "raw", 6, fdp.TYPE_BYTES)
    add(event, "at", 7, fdp.TYPE_MESSAGE, ".google.protobuf.Timestamp")
    add(event, "big", 8, fdp.TYPE_UINT64)
    key = file_proto.message_type.add(name="Key")
    add(key, "id", 1, fdp.TYPE_STRING)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file_proto)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"it.{name}"))
        for name in ("Event", "Key")
    }


def test_protobuf_values_and_keys_via_schema_registry(services, es, names, registry):
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    types = _protobuf_event_types()
    Event, Key = types["Event"], types["Key"]
    topic = _topic(services, names, "proto")
    dlq = _topic(services, names, "proto-dlq")
    client = registry.client()
    value_ser = ProtobufSerializer(Event, client)
    key_ser = ProtobufSerializer(Key, client)
    vctx = SerializationContext(topic, MessageField.VALUE)
    kctx = SerializationContext(topic, MessageField.KEY)

    first = Event(id=2**53 + 1, name="click \u2603", tags=["a", "b"], kind=1, raw=b"\x00\xff")
    first.inner.score = 0.5
    first.inner.labels.extend(["x"])
    first.at.seconds = 1_714_564_800
    first.big = 2**63 - 1
    second = Event(id=-2, kind=2)  # the rest unset: defaults, no inner, no at
    good = value_ser(first, vctx)
    unknown_id = b"\x00" + (9999).to_bytes(4, "big") + good[5:]
    truncated = good[:-3]
    produce(
        services.kafka,
        topic,
        [
            (key_ser(Key(id="e1"), kctx), good),
            (key_ser(Key(id="e2"), kctx), value_ser(second, vctx)),
            (key_ser(Key(id="e3"), kctx), unknown_id),  # schema id unknown: dead letter
            (key_ser(Key(id="e4"), kctx), truncated),  # cut inside a field: dead letter
        ],
    )
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "VALUE_FORMAT": "protobuf",
        "KEY_FORMAT": "protobuf",
        "SCHEMA_REGISTRY_URL": registry.url,
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output

    # Document ids: the decoded key (an object) as compact JSON.
    assert search_all(es, topic) == {
        '{"id":"e1"}': {
            "id": 2**53 + 1,
            "name": "click \u2603",
            "tags": ["a", "b"],
            "inner": {"score": 0.5, "labels": ["x"]},
            "kind": "CLICK",
            "raw": base64.b64encode(b"\x00\xff").decode(),
            "at": "2024-05-01T12:00:00Z",
            "big": 2**63 - 1,
        },
        '{"id":"e2"}': {
            "id": -2,
            "name": "",
            "tags": [],
            "kind": "VIEW",
            "raw": "",
            "big": 0,
        },
    }
    dead = _dead_letters(services.kafka, dlq)
    assert [(d["value"], d["ctx"]["offset"]) for d in dead] == [(unknown_id, "2"), (truncated, "3")]
    assert all(d["ctx"]["stage"] == "deserialize" for d in dead)
    assert all(d["ctx"]["exception.class.name"] == "flows.decode.DecodeError" for d in dead)
    assert "schema id 9999" in dead[0]["ctx"]["exception.message"]
    assert "not a valid it.Event message" in dead[1]["ctx"]["exception.message"]
    assert committed_offsets(services.kafka, topic, topic) == {0: 4}
