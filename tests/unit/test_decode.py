"""Unit tests for flows.decode: every format, good and bad records; no Kafka or Elasticsearch.

The Schema Registry formats run against tests/schema_registry_stub.py (a stand-in: the real
registry cannot run here), with payloads made by confluent-kafka's own serializers.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import pickle
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, header_schema_id_serializer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from flows.config import Settings
from flows.decode import DecodeError, RegistryUnavailableError, build_decoder
from flows.errors import ConfigError
from flows.record import Record

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.schema_registry_stub import SchemaRegistryStub

TOPIC = "orders"


def settings(**env: str) -> Settings:
    return Settings.load({"KAFKA_TOPICS": TOPIC, **env})


def rec(
    value: bytes | None = None, key: bytes | None = None, headers: tuple[Any, ...] = ()
) -> Record:
    return Record(TOPIC, 0, 7, 1_700_000_000_000, key, value, headers)


def value_decoder(fmt: str, **env: str) -> Any:
    return build_decoder(settings(VALUE_FORMAT=fmt, **env), "value")


def key_decoder(fmt: str, **env: str) -> Any:
    return build_decoder(settings(KEY_FORMAT=fmt, **env), "key")


# -- json


def test_json_value_object() -> None:
    decode = value_decoder("json")
    doc = {"id": 1, "name": "Zoë ☃", "nested": {"a": [1, 2.5, None, True]}}
    assert decode(rec(orjson.dumps(doc))) == doc


def test_json_integer_and_digit_boundaries() -> None:
    decode = value_decoder("json")
    raw = (
        b'{"max": 18446744073709551615, "min": -9223372036854775808,'
        b' "as_text": "123456789012345678901234567890", "float": 0.12345678901234567890123,'
        b' "ns": 1718000000123456789, "neg": -922337203685477580}'
    )
    doc = decode(rec(raw))
    assert doc["max"] == 2**64 - 1
    assert doc["min"] == -(2**63)
    assert doc["as_text"] == "123456789012345678901234567890"
    assert isinstance(doc["float"], float)
    assert doc["ns"] == 1718000000123456789
    assert doc["neg"] == -922337203685477580


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b'{"a": "\xff"}', "UTF-8"),
        (b"\xef\xbb\xbf{}", "BOM"),
        (b'{"a": 1,}', "invalid JSON"),
        (b'{"a": 1} trailing', "after document"),
        (b'{"a": 1}{"b": 2}', "after document"),
        (b"", "invalid JSON"),
        (b"42", "must be an object, got number"),
        (b'"text"', "must be an object, got string"),
        (b"null", "must be an object, got null"),
        (b"[1, 2]", "must be an object, got array"),
        (b'{"a": NaN}', "invalid JSON"),
        (b'{"a": Infinity}', "invalid JSON"),
        (b'{"a": -Infinity}', "invalid JSON"),
        (b'{"a": 1e999}', "infinity"),
        (b'{"a": "\\ud800"}', "surrogate"),
        (b'{"a": 18446744073709551616}', "does not fit in 64 bits"),
        (b'{"a": -9223372036854775809}', "does not fit in 64 bits"),
        (b'{"a": [1, {"b": 123456789012345678901234567890}]}', "does not fit in 64 bits"),
        (b'{"a": ' + b"1" * 5000 + b"}", "infinity"),
        (b'{"a": ' * 2000 + b"1" + b"}" * 2000, "depth"),
        (b"[" * 2000 + b"]" * 2000, "depth"),
    ],
)
def test_json_value_rejects(raw: bytes, fragment: str) -> None:
    with pytest.raises(DecodeError, match="(?i)" + fragment.replace("(", r"\(")):
        value_decoder("json")(rec(raw))


def test_decode_error_message_is_short() -> None:
    raw = b'{"secret": "' + b"x" * 10_000 + b'"'  # unterminated
    with pytest.raises(DecodeError) as info:
        value_decoder("json")(rec(raw))
    message = str(info.value)
    assert len(message) < 300
    assert "x" * 65 not in message
    assert "10013 bytes" in message


def test_json_key_any_value() -> None:
    decode = key_decoder("json")
    assert decode(rec(key=b'"k-1"')) == "k-1"
    assert decode(rec(key=b"42")) == 42
    assert decode(rec(key=b"[1, 2]")) == [1, 2]
    assert decode(rec(key=b'{"id": 3}')) == {"id": 3}
    for bad in (b"nope", b"NaN", b"99999999999999999999999", b'"\\udc00"'):
        with pytest.raises(DecodeError):
            decode(rec(key=bad))


# -- connect-json


def _b64_unscaled(unscaled: int, length: int = 4) -> str:
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def _decimal_schema(field: str, scale: int) -> dict[str, Any]:
    return {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": str(scale), "connect.decimal.precision": "10"},
        "field": field,
    }


def test_connect_json_envelope_with_logical_types() -> None:
    schema = {
        "type": "struct",
        "optional": False,
        "name": "shop.Order",
        "fields": [
            {"type": "int64", "optional": False, "field": "id"},
            _decimal_schema("price", 2),
            _decimal_schema("refund", 3),
            {
                "type": "int64",
                "optional": False,
                "name": "org.apache.kafka.connect.data.Timestamp",
                "version": 1,
                "field": "created",
            },
            {
                "type": "int32",
                "optional": True,
                "name": "org.apache.kafka.connect.data.Date",
                "version": 1,
                "field": "day",
            },
            {"type": "bytes", "optional": True, "field": "blob"},
            {"type": "array", "items": _decimal_schema("", 1), "field": "history"},
            {
                "type": "map",
                "keys": {"type": "string"},
                "values": _decimal_schema("", 0),
                "field": "by_region",
            },
            {
                "type": "struct",
                "field": "inner",
                "fields": [_decimal_schema("cost", 2)],
            },
            _decimal_schema("missing", 2),
        ],
    }
    payload = {
        "id": 9,
        "price": _b64_unscaled(1230),
        "refund": _b64_unscaled(-1, 1),
        "created": 1_700_000_000_123,
        "day": 19_000,
        "blob": base64.b64encode(b"\x00\xff").decode(),
        "history": [_b64_unscaled(5), None],
        "by_region": {"eu": _b64_unscaled(7)},
        "inner": {"cost": _b64_unscaled(0)},
        "missing": None,
    }
    doc = value_decoder("connect-json")(rec(orjson.dumps({"schema": schema, "payload": payload})))
    assert doc == {
        "id": 9,
        "price": "12.30",
        "refund": "-0.001",
        "created": 1_700_000_000_123,
        "day": "2022-01-08",
        "blob": "AP8=",
        "history": ["0.5", None],
        "by_region": {"eu": "7"},
        "inner": {"cost": "0.00"},
        "missing": None,
    }


def test_connect_json_numeric_decimal_and_null_schema() -> None:
    decode = value_decoder("connect-json")
    schema = {"type": "struct", "fields": [_decimal_schema("p", 2)]}
    raw = orjson.dumps({"schema": schema, "payload": {"p": 12.3}})
    assert decode(rec(raw)) == {"p": 12.3}
    assert decode(rec(b'{"schema": null, "payload": {"a": 1}}')) == {"a": 1}


def test_connect_json_without_envelope() -> None:
    decode = value_decoder("connect-json")
    assert decode(rec(b'{"a": 1}')) == {"a": 1}
    # Not exactly {schema, payload}: a plain document that happens to use those names.
    raw = b'{"schema": "v2", "payload": {"a": 1}, "extra": true}'
    assert decode(rec(raw)) == {"schema": "v2", "payload": {"a": 1}, "extra": True}


@pytest.mark.parametrize(
    "raw",
    [
        b'{"schema": {"type": "string"}, "payload": "text"}',
        b'{"schema": {"type": "array"}, "payload": [1]}',
        b'{"schema": null, "payload": null}',
        b"[1, 2]",
        b"not json",
        b'{"schema": null, "payload": {"a": NaN}}',
    ],
)
def test_connect_json_value_rejects(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        value_decoder("connect-json")(rec(raw))


def test_connect_json_bad_decimal() -> None:
    schema = {"type": "struct", "fields": [_decimal_schema("p", 2)]}
    raw = orjson.dumps({"schema": schema, "payload": {"p": "not base64!"}})
    with pytest.raises(DecodeError, match="Decimal"):
        value_decoder("connect-json")(rec(raw))


def test_connect_json_key_may_be_scalar() -> None:
    decode = key_decoder("connect-json")
    assert decode(rec(key=b'{"schema": {"type": "string"}, "payload": "k1"}')) == "k1"
    assert decode(rec(key=b"17")) == 17


# -- string and bytes


def test_string_value_and_key() -> None:
    assert value_decoder("string")(rec("héllo".encode())) == {"message": "héllo"}
    assert value_decoder("string", VALUE_FIELD="line")(rec(b"x")) == {"line": "x"}
    assert key_decoder("string")(rec(key=b"k-1")) == "k-1"


@pytest.mark.parametrize("raw", [b"\xff", b"ok \xc3", b"\xed\xa0\x80"])
def test_string_rejects_invalid_utf8(raw: bytes) -> None:
    with pytest.raises(DecodeError, match="invalid UTF-8"):
        value_decoder("string")(rec(raw))
    with pytest.raises(DecodeError, match="invalid UTF-8"):
        key_decoder("string")(rec(key=raw))


def test_bytes_value_and_key() -> None:
    raw = bytes(range(256))
    expected = base64.b64encode(raw).decode()
    assert value_decoder("bytes")(rec(raw)) == {"message": expected}
    assert key_decoder("bytes")(rec(key=raw)) == expected
    assert value_decoder("bytes")(rec(b"")) == {"message": ""}


# -- build-time checks


def test_protobuf_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="VALUE_FORMAT: protobuf is not supported"):
        value_decoder("protobuf", SCHEMA_REGISTRY_URL="http://127.0.0.1:1")
    with pytest.raises(ConfigError, match="KEY_FORMAT: protobuf"):
        key_decoder("protobuf", SCHEMA_REGISTRY_URL="http://127.0.0.1:1")


def test_bad_role() -> None:
    with pytest.raises(ValueError, match="role"):
        build_decoder(settings(), "header")  # type: ignore[arg-type]


def test_registry_numeric_settings_checked_at_build() -> None:
    with pytest.raises(ConfigError, match="SCHEMA_REGISTRY_CONFIG_MAX_RETRIES"):
        value_decoder(
            "avro",
            SCHEMA_REGISTRY_URL="http://127.0.0.1:1",
            SCHEMA_REGISTRY_CONFIG_MAX_RETRIES="many",
        )


# -- Schema Registry formats (against the stand-in)


@pytest.fixture(scope="module")
def registry() -> Iterator[SchemaRegistryStub]:
    with SchemaRegistryStub() as stub:
        yield stub


@pytest.fixture(scope="module")
def client(registry: SchemaRegistryStub) -> Iterator[SchemaRegistryClient]:
    with SchemaRegistryClient({"url": registry.url}) as c:
        yield c


def registry_env(registry: SchemaRegistryStub, **env: str) -> dict[str, str]:
    return {"SCHEMA_REGISTRY_URL": registry.url, "SCHEMA_REGISTRY_CONFIG_MAX_RETRIES": "0", **env}


def ctx(field: MessageField = MessageField.VALUE, headers: Any = None) -> SerializationContext:
    return SerializationContext(TOPIC, field, headers)


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
    decode = value_decoder("avro", SCHEMA_REGISTRY_URL=url, SCHEMA_REGISTRY_CONFIG_MAX_RETRIES="0")
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
