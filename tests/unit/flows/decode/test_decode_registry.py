"""flows.decode.registry and flows.decode.avro: avro and json-schema through the Schema Registry.

They run against tests/support/schema_registry_stub.py (an in-process stand-in: the unit tier
reaches no service), with payloads made by confluent-kafka's own serializers; the
integration tier runs the formats against a real registry (scripts/stack's).
"""

from __future__ import annotations

import datetime
import decimal
import logging
import pickle
import threading
import time
import uuid

import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, header_schema_id_serializer
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from flows.decode import DecodeError, RegistryUnavailableError
from flows.decode.avro import _Direct, converter, jsonable
from flows.errors import ConfigError
from flows.record import Record
from tests.support.decode import (
    FAST_GIVE_UP,
    ctx,
    key_decoder,
    rec,
    registry_env,
    value_decoder,
)
from tests.support.schema_registry_stub import SchemaRegistryStub

# -- Schema Registry formats (against the stand-in)


ORDER_SCHEMA = orjson.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {
                "name": "price",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
            },
            {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "blob", "type": "bytes"},
            {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 2}},
            {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW"]}},
            {"name": "tags", "type": {"type": "map", "values": "double"}},
            {"name": "lines", "type": {"type": "array", "items": "int"}},
        ],
    }
).decode()

ORDER = {
    "id": 2**40,
    "note": None,
    "price": decimal.Decimal("12.30"),
    "created": datetime.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=datetime.UTC),
    "day": datetime.date(2024, 5, 6),
    "ref": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "blob": b"\x00\xff",
    "digest": b"ab",
    "status": "NEW",
    "tags": {"w": 1.5},
    "lines": [1, 2],
}


def test_avro_value(registry: SchemaRegistryStub, client: SchemaRegistryClient) -> None:
    payload = AvroSerializer(client, ORDER_SCHEMA)(ORDER, ctx())
    decode = value_decoder("avro", **registry_env(registry))
    doc = decode(rec(payload))
    assert doc == {
        "id": 2**40,
        "note": None,
        "price": "12.30",
        "created": "2024-05-06T07:08:09.123000+00:00",
        "day": "2024-05-06",
        "ref": "12345678-1234-5678-1234-567812345678",
        "blob": "AP8=",
        "digest": "YWI=",
        "status": "NEW",
        "tags": {"w": 1.5},
        "lines": [1, 2],
    }
    assert orjson.loads(orjson.dumps(doc)) == doc  # JSON-compatible
    assert decode(rec(payload)) == doc  # schema now cached


def test_avro_schema_id_in_header(
    registry: SchemaRegistryStub, client: SchemaRegistryClient
) -> None:
    headers: list[tuple[str, bytes | None]] = []
    serializer = AvroSerializer(
        client, ORDER_SCHEMA, conf={"schema.id.serializer": header_schema_id_serializer}
    )
    payload = serializer(ORDER, ctx(headers=headers))
    assert headers and headers[0][0] == "__value_schema_id"
    doc = value_decoder("avro", **registry_env(registry))(rec(payload, headers=tuple(headers)))
    assert doc["price"] == "12.30"


def test_avro_key_scalar(registry: SchemaRegistryStub, client: SchemaRegistryClient) -> None:
    payload = AvroSerializer(client, '"string"')("k-1", ctx(MessageField.KEY))
    assert key_decoder("avro", **registry_env(registry))(rec(key=payload)) == "k-1"
    with pytest.raises(DecodeError, match="must be an object, got string"):
        value_decoder("avro", **registry_env(registry))(rec(payload))


def test_avro_nan_is_rejected(registry: SchemaRegistryStub, client: SchemaRegistryClient) -> None:
    schema = '{"type": "record", "name": "M", "fields": [{"name": "v", "type": "double"}]}'
    payload = AvroSerializer(client, schema)({"v": float("nan")}, ctx())
    with pytest.raises(DecodeError, match="NaN"):
        value_decoder("avro", **registry_env(registry))(rec(payload))


def test_avro_bad_records(registry: SchemaRegistryStub, client: SchemaRegistryClient) -> None:
    good = AvroSerializer(client, ORDER_SCHEMA)(ORDER, ctx())
    decode = value_decoder("avro", **registry_env(registry))
    cases = {
        "unknown schema id": (b"\x00" + (99_999).to_bytes(4, "big") + good[5:], "id 99999"),
        "wrong magic byte": (b"\x07" + good[1:], ""),
        "plain JSON": (b'{"id": 1}', ""),
        "truncated": (good[:-4], ""),
        "framing only": (good[:5], ""),
        "empty": (b"", ""),
    }
    for name, (raw, fragment) in cases.items():
        with pytest.raises(DecodeError, match=fragment or None) as info:
            decode(rec(raw))
        assert not isinstance(info.value, RegistryUnavailableError), name
    assert decode(rec(good))["id"] == 2**40  # still fine afterwards


def test_avro_direct_read_gives_avro_deserializers_values(
    registry: SchemaRegistryStub, client: SchemaRegistryClient
) -> None:
    """After the first record of a schema id, flows.decode.avro reads records with fastavro
    itself; each value must be what AvroDeserializer returns, converted the same way, and
    AvroDeserializer must not be called for them."""
    serializer = AvroSerializer(client, ORDER_SCHEMA)
    orders = [
        ORDER,
        {**ORDER, "id": -(2**63), "note": "ü €", "tags": {}, "lines": [], "blob": b""},
        {**ORDER, "price": decimal.Decimal("-0.01"), "tags": {"a": -0.0, "b": 1e308}},
    ]
    payloads = [serializer(o, ctx()) for o in orders]
    reference = AvroDeserializer(client)
    decode = value_decoder("avro", **registry_env(registry))
    assert decode(rec(payloads[0])) == jsonable(reference(payloads[0], ctx()))
    deserializer = decode._deserializer
    assert [type(s) for s in deserializer._direct.values()] == [_Direct]  # read directly now
    calls = []
    confluent = deserializer._confluent
    deserializer._confluent = lambda data, c: calls.append(data) or confluent(data, c)
    for payload in payloads:
        assert decode(rec(payload)) == jsonable(reference(payload, ctx()))
    assert calls == []
    with pytest.raises(DecodeError, match="cannot decode record") as info:
        decode(rec(payloads[0][:-4]))  # truncated, read directly
    assert not isinstance(info.value, RegistryUnavailableError)
    # a schema id in a header overrides the prefix: AvroDeserializer reads it
    headers: list[tuple[str, bytes | None]] = []
    header_serializer = AvroSerializer(
        client, ORDER_SCHEMA, conf={"schema.id.serializer": header_schema_id_serializer}
    )
    # id 0 is the byte 0, so the body looks like prefix framing with schema id bytes 1..4
    framed_by_header = header_serializer({**ORDER, "id": 0}, ctx(headers=headers))
    assert framed_by_header[0] == 0
    assert decode(rec(framed_by_header, headers=tuple(headers)))["price"] == "12.30"
    assert calls == [framed_by_header] and len(deserializer._direct) == 1  # no id from it


def test_topics_sharing_a_schema_share_its_compiled_reader(
    registry: SchemaRegistryStub, client: SchemaRegistryClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema id the registry gives several topics is compiled once, not once a topic."""
    from flows.decode import avro

    compiled: list[object] = []
    compile_reader = avro.compile_reader
    monkeypatch.setattr(avro, "compile_reader", lambda s: compiled.append(s) or compile_reader(s))
    decode = value_decoder("avro", **registry_env(registry))
    serializer = AvroSerializer(client, ORDER_SCHEMA)
    for topic in ("orders-a", "orders-b", "orders-c"):
        payload = serializer(ORDER, SerializationContext(topic, MessageField.VALUE))
        record = Record(topic, 0, 7, None, None, payload)
        assert decode(record) == decode(record)  # the second read by the compiled reader
    readers = set(map(id, decode._deserializer._direct.values()))
    assert len(compiled) == 1 and len(readers) == 1


def test_known_schema_ids_skip_the_serialization_context(
    registry: SchemaRegistryStub, client: SchemaRegistryClient
) -> None:
    """Records of a schema id already read are decoded by `read_known`, without a context;
    a bad one goes the long way and carries the error it carried before."""
    payload = AvroSerializer(client, ORDER_SCHEMA)(ORDER, ctx())
    decode = value_decoder("avro", **registry_env(registry))
    long_way = value_decoder("avro", **registry_env(registry))
    first = decode(rec(payload))
    long_way(rec(payload))
    long_way._known = None  # every record the long way, as before `read_known`
    contexts = []
    make_ctx = decode._ctx
    decode._ctx = lambda *a: contexts.append(a) or make_ctx(*a)
    assert decode(rec(payload)) == first == long_way(rec(payload))
    assert contexts == []
    bad = {
        "truncated": payload[:-4],
        "bad union index": payload[:5] + b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
        "short": payload[:6],
    }
    for name, raw in bad.items():
        with pytest.raises(DecodeError) as got:
            decode(rec(raw))
        with pytest.raises(DecodeError) as want:
            long_way(rec(raw))
        assert str(got.value) == str(want.value), name
    assert len(contexts) == len(bad)


CONVERTED_SCHEMAS = [
    ORDER_SCHEMA,
    {"type": "record", "name": "P", "fields": [{"name": "a", "type": "string"}]},
    {
        "type": "record",
        "name": "N",
        "fields": [
            {"name": "xs", "type": {"type": "array", "items": "double"}},
            {"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "float"}}},
            {
                "name": "inner",
                "type": {
                    "type": "record",
                    "name": "I",
                    "fields": [
                        {"name": "b", "type": ["null", "bytes", "double"]},
                        {"name": "s", "type": ["null", "string"]},
                        {"name": "d", "type": {"type": "fixed", "name": "F", "size": 1}},
                    ],
                },
            },
            {"name": "again", "type": "I"},
            {"name": "rs", "type": {"type": "array", "items": "I"}},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        ],
    },
]
INNER = {"b": b"\x01", "s": "x", "d": b"z"}
CONVERTED_VALUES = [
    [ORDER, {**ORDER, "tags": {"a": float("nan")}}],
    [{"a": "text"}],
    [
        {"xs": [1.5], "m": {"k": [2.5]}, "inner": INNER, "again": INNER, "rs": [], "e": "A"},
        {
            "xs": [],
            "m": {"k": [], "j": [float("-inf")]},
            "inner": {**INNER, "b": 3.5},
            "again": {**INNER, "b": None},
            "rs": [INNER, {**INNER, "b": float("nan")}],
            "e": "B",
        },
        {"xs": [float("nan"), float("inf")], "m": {}, "inner": INNER, "again": INNER,
         "rs": [], "e": "A"},
    ],
]  # fmt: skip


@pytest.mark.parametrize("index", range(len(CONVERTED_SCHEMAS)))
def test_converter_gives_jsonables_values_and_errors(index: int) -> None:
    """The converter compiled for a schema visits only what needs converting: each value
    and each error must still be exactly `jsonable`'s."""
    import copy
    import io

    import fastavro

    raw = CONVERTED_SCHEMAS[index]
    schema = fastavro.parse_schema(orjson.loads(raw) if isinstance(raw, str) else raw)
    convert = converter(schema)
    for value in CONVERTED_VALUES[index]:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, value)
        decoded = fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), schema, None)
        try:
            want: object = jsonable(copy.deepcopy(decoded))
        except DecodeError as e:
            want = str(e)
        try:
            got: object = decoded if convert is None else convert(decoded)
        except DecodeError as e:
            got = str(e)
        assert got == want
        assert type(got) is type(want)
    assert converter(fastavro.parse_schema({"type": "array", "items": "string"})) is None


def test_avro_keys_are_read_directly_under_their_own_subject(
    registry: SchemaRegistryStub, client: SchemaRegistryClient
) -> None:
    schema = '{"type": "record", "name": "K", "fields": [{"name": "id", "type": "string"}]}'
    payload = AvroSerializer(client, schema)({"id": "k-1"}, ctx(MessageField.KEY))
    decode = key_decoder("avro", **registry_env(registry))
    assert decode(rec(key=payload)) == {"id": "k-1"}
    assert [type(s) for s in decode._deserializer._direct.values()] == [_Direct]
    assert decode(rec(key=payload)) == {"id": "k-1"}  # read directly
    scalar = AvroSerializer(client, '"string"')("k-2", ctx(MessageField.KEY))
    assert decode(rec(key=scalar)) == "k-2"  # not a record: AvroDeserializer's, always
    assert list(decode._deserializer._direct.values())[1:] == [None]


def test_avro_schema_with_rules_is_left_to_avro_deserializer(
    registry: SchemaRegistryStub, client: SchemaRegistryClient
) -> None:
    schema = '{"type": "record", "name": "R", "fields": [{"name": "v", "type": "long"}]}'
    rule = {"name": "off", "kind": "CONDITION", "mode": "READ", "type": "CEL", "disabled": True}
    stored = registry.register(
        "orders-value", {"schema": schema, "ruleSet": {"domainRules": [rule]}}
    )
    payload = b"\x00" + stored.id.to_bytes(4, "big") + b"\x54"  # zig-zag 42
    decode = value_decoder("avro", **registry_env(registry))
    assert decode(rec(payload)) == {"v": 42}
    assert list(decode._deserializer._direct.values()) == [None]
    assert decode(rec(payload)) == {"v": 42}


PERSON_SCHEMA = orjson.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Person",
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name"],
    }
).decode()


def test_json_schema_value(registry: SchemaRegistryStub, client: SchemaRegistryClient) -> None:
    payload = JSONSerializer(PERSON_SCHEMA, client)({"name": "Ada", "age": 36}, ctx())
    decode = value_decoder("json-schema", **registry_env(registry))
    assert decode(rec(payload)) == {"name": "Ada", "age": 36}


def test_json_schema_bad_records(
    registry: SchemaRegistryStub, client: SchemaRegistryClient
) -> None:
    good = JSONSerializer(PERSON_SCHEMA, client)({"name": "Ada"}, ctx())
    frame = good[:5]
    decode = value_decoder("json-schema", **registry_env(registry))
    for raw in (
        frame + b'{"age": 3}',  # fails validation: name required
        frame + b'{"name": "Ada", "age": -1}',  # fails validation: minimum
        frame + b'{"name": "Ada"',  # invalid JSON
        frame + b'{"name": NaN}',  # NaN
        frame + b'{"name": "Ada", "age": 99999999999999999999999}',  # beyond 64 bits
        b"\x00" + (424_242).to_bytes(4, "big") + good[5:],  # unknown schema id
        b"\x09" + good[1:],  # wrong magic byte
        b'{"name": "Ada"}',  # no framing at all
    ):
        with pytest.raises(DecodeError):
            decode(rec(raw))


def test_registry_client_is_created_lazily(
    registry: SchemaRegistryStub, client: SchemaRegistryClient
) -> None:
    payload = AvroSerializer(client, ORDER_SCHEMA)(ORDER, ctx())
    before = len(registry.requests)
    decode = value_decoder("avro", **registry_env(registry))
    decode = pickle.loads(pickle.dumps(decode))  # picklable before use
    assert len(registry.requests) == before  # building made no request
    assert decode(rec(payload))["id"] == 2**40
    decode = pickle.loads(pickle.dumps(decode))  # and after (the client is not pickled)
    assert decode(rec(payload))["id"] == 2**40


def test_unknown_registry_setting_is_config_error(registry: SchemaRegistryStub) -> None:
    decode = value_decoder("avro", **registry_env(registry, SCHEMA_REGISTRY_CONFIG_NO_SUCH="1"))
    with pytest.raises(ConfigError, match="SCHEMA_REGISTRY_CONFIG"):
        decode(rec(b"\x00\x00\x00\x00\x01\x02"))


def test_registry_down_is_not_a_record_error(client: SchemaRegistryClient) -> None:
    payload = AvroSerializer(client, ORDER_SCHEMA)(ORDER, ctx())
    stub = SchemaRegistryStub().start()
    url = stub.url
    stub.stop()  # nothing listens there any more
    decode = value_decoder("avro", SCHEMA_REGISTRY_URL=url, **FAST_GIVE_UP)
    with pytest.raises(RegistryUnavailableError, match="unreachable") as info:
        decode(rec(payload))
    assert not isinstance(info.value, DecodeError)


@pytest.mark.parametrize("status", [503, 500, 429, 401, 403])
def test_registry_error_status_is_not_a_record_error(
    client: SchemaRegistryClient, status: int
) -> None:
    payload = AvroSerializer(client, ORDER_SCHEMA)(ORDER, ctx())
    with SchemaRegistryStub() as stub:
        stub.fail_status = status
        decode = value_decoder("avro", **registry_env(stub))
        with pytest.raises(RegistryUnavailableError, match=f"HTTP {status}"):
            decode(rec(payload))


def test_registry_url_without_registry_is_not_a_record_error(
    registry: SchemaRegistryStub, client: SchemaRegistryClient
) -> None:
    # A wrong path answers a plain 404 (not a registry "schema not found" code).
    payload = AvroSerializer(client, ORDER_SCHEMA)(ORDER, ctx())
    decode = value_decoder(
        "avro", **registry_env(registry, SCHEMA_REGISTRY_URL=registry.url + "/x")
    )
    with pytest.raises(RegistryUnavailableError, match="HTTP 404"):
        decode(rec(payload))


def test_a_record_waits_for_the_registry_and_is_decoded_once_it_is_back(
    client: SchemaRegistryClient, caplog: pytest.LogCaptureFixture
) -> None:
    """An outage is no record error: the record's decoding is retried until the registry
    answers, and nothing is raised (so nothing is dead-lettered)."""
    payload = AvroSerializer(client, ORDER_SCHEMA)(ORDER, ctx())
    with SchemaRegistryStub() as stub:
        own = SchemaRegistryClient({"url": stub.url})
        payload = AvroSerializer(own, ORDER_SCHEMA)(ORDER, ctx())
        stub.fail_status = 503
        decode = value_decoder("avro", **registry_env(stub, SCHEMA_REGISTRY_RETRY_BUDGET_S="30"))
        back = threading.Timer(0.3, setattr, (stub, "fail_status", None))
        back.start()
        caplog.set_level(logging.WARNING, "flows.decode.registry")
        t0 = time.monotonic()
        assert decode(rec(payload))["id"] == ORDER["id"]
        back.join()
    assert 0.3 <= time.monotonic() - t0 < 10
    first, *_, last = [r.getMessage() for r in caplog.records]
    assert "answered HTTP 503" in first and "the record waits" in first
    assert "SCHEMA_REGISTRY_RETRY_BUDGET_S" in first and "up to 30s" in first
    assert "answers again after" in last and "decoding resumes" in last


def test_past_its_budget_the_wait_stops_the_flow(client: SchemaRegistryClient) -> None:
    payload = AvroSerializer(client, ORDER_SCHEMA)(ORDER, ctx())
    with SchemaRegistryStub() as stub:
        stub.fail_status = 503
        decode = value_decoder("avro", **registry_env(stub, SCHEMA_REGISTRY_RETRY_BUDGET_S="0.2"))
        t0 = time.monotonic()
        with pytest.raises(RegistryUnavailableError, match=r"BUDGET_S=0.2\)") as info:
            decode(rec(payload))
        assert "HTTP 503" in str(info.value) and "retries" in str(info.value)
        assert 0.2 <= time.monotonic() - t0 < 5
        assert len(stub.requests) > 2  # tried again and again


def test_a_stopping_flow_stops_the_wait(client: SchemaRegistryClient) -> None:
    from sinks import failing

    payload = AvroSerializer(client, ORDER_SCHEMA)(ORDER, ctx())
    with SchemaRegistryStub() as stub:
        stub.fail_status = 503
        decode = value_decoder("avro", **registry_env(stub, SCHEMA_REGISTRY_RETRY_BUDGET_S="0"))
        failing.mark()
        try:
            with pytest.raises(RegistryUnavailableError, match="the flow is stopping"):
                decode(rec(payload))
        finally:
            failing.clear()


def test_a_registry_without_guid_lookup_makes_guid_records_bad_records(
    registry: SchemaRegistryStub,
) -> None:
    """Apicurio Registry answers GET /schemas/guids/... with a bare 404; it answers the
    rest, so a record framed by a schema GUID is a bad record, not an outage."""
    guid = uuid.UUID("293f6a92-bb8a-ffeb-8099-1941c8483c23")
    payload = b"\x01" + guid.bytes + b"\x02"
    registry.missing = ("/schemas/guids/",)
    try:
        decode = value_decoder("avro", **registry_env(registry))
        with pytest.raises(DecodeError, match="no endpoint to fetch schema guid 293f6a92") as info:
            decode(rec(payload))
        assert not isinstance(info.value, RegistryUnavailableError)
    finally:
        registry.missing = ()
