"""flows.decode.protobuf: message types built in code, no protoc, no generated classes.

They run against tests/support/schema_registry_stub.py, with payloads made by confluent-kafka's
own ProtobufSerializer.
"""

from __future__ import annotations

import base64
import pickle
from typing import Any

import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, header_schema_id_serializer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField

from flows.decode import DecodeError, RegistryUnavailableError
from tests.support.decode import (
    FAST_GIVE_UP,
    ctx,
    key_decoder,
    rec,
    registry_env,
    value_decoder,
)
from tests.support.schema_registry_stub import SchemaRegistryStub

# -- Schema Registry stand-in


# -- protobuf (message types built in code: no protoc, no generated classes)


def _protobuf_types() -> dict[str, Any]:
    """Three files, built as FileDescriptorProtos: shop/currency.proto (an enum),
    shop/common.proto (imports it) and shop/order.proto (imports common and three
    well-known files; two top-level messages, nested messages, a map)."""
    from google.protobuf import (
        any_pb2,
        descriptor_pb2,
        descriptor_pool,
        message_factory,
        timestamp_pb2,
        wrappers_pb2,
    )

    fdp = descriptor_pb2.FieldDescriptorProto
    opt, rep = fdp.LABEL_OPTIONAL, fdp.LABEL_REPEATED

    def add(msg: Any, name: str, number: int, kind: int, type_name: str = "", label: int = opt):
        f = msg.field.add(name=name, number=number, type=kind, label=label)
        if type_name:
            f.type_name = type_name

    currency = descriptor_pb2.FileDescriptorProto(
        name="shop/currency.proto", package="shop.common", syntax="proto3"
    )
    enum = currency.enum_type.add(name="Currency")
    for number, name in enumerate(["CURRENCY_UNSPECIFIED", "EUR", "USD"]):
        enum.value.add(name=name, number=number)

    common = descriptor_pb2.FileDescriptorProto(
        name="shop/common.proto",
        package="shop.common",
        syntax="proto3",
        dependency=["shop/currency.proto"],
    )
    money = common.message_type.add(name="Money")
    add(money, "units", 1, fdp.TYPE_INT64)
    add(money, "currency", 2, fdp.TYPE_ENUM, ".shop.common.Currency")

    order_file = descriptor_pb2.FileDescriptorProto(
        name="shop/order.proto",
        package="shop",
        syntax="proto3",
        dependency=[
            "shop/common.proto",
            "google/protobuf/timestamp.proto",
            "google/protobuf/any.proto",
            "google/protobuf/wrappers.proto",
        ],
    )
    status = order_file.enum_type.add(name="Status")
    for number, name in enumerate(["STATUS_UNKNOWN", "NEW", "SHIPPED"]):
        status.value.add(name=name, number=number)
    order = order_file.message_type.add(name="Order")
    line = order.nested_type.add(name="Line")
    add(line, "sku", 1, fdp.TYPE_STRING)
    add(line, "qty", 2, fdp.TYPE_INT32)
    entry = order.nested_type.add(name="CountsEntry")
    entry.options.map_entry = True
    add(entry, "key", 1, fdp.TYPE_STRING)
    add(entry, "value", 2, fdp.TYPE_INT64)
    add(order, "id", 1, fdp.TYPE_INT64)
    add(order, "name", 2, fdp.TYPE_STRING)
    add(order, "price", 3, fdp.TYPE_MESSAGE, ".shop.common.Money")
    add(order, "tags", 4, fdp.TYPE_STRING, label=rep)
    add(order, "lines", 5, fdp.TYPE_MESSAGE, ".shop.Order.Line", label=rep)
    add(order, "status", 6, fdp.TYPE_ENUM, ".shop.Status")
    add(order, "blob", 7, fdp.TYPE_BYTES)
    add(order, "big", 8, fdp.TYPE_UINT64)
    add(order, "delta", 9, fdp.TYPE_SINT64)
    add(order, "ratio", 10, fdp.TYPE_DOUBLE)
    add(order, "ok", 11, fdp.TYPE_BOOL)
    add(order, "counts", 12, fdp.TYPE_MESSAGE, ".shop.Order.CountsEntry", label=rep)
    add(order, "at", 13, fdp.TYPE_MESSAGE, ".google.protobuf.Timestamp")
    add(order, "f", 14, fdp.TYPE_FLOAT)
    add(order, "extra", 15, fdp.TYPE_MESSAGE, ".google.protobuf.Any")
    add(order, "maybe", 16, fdp.TYPE_MESSAGE, ".google.protobuf.Int64Value")
    add(order, "fixed", 17, fdp.TYPE_FIXED64)
    refund = order_file.message_type.add(name="Refund")
    add(refund, "order_id", 1, fdp.TYPE_INT64)
    add(refund, "reason", 2, fdp.TYPE_STRING)

    pool = descriptor_pool.DescriptorPool()
    for well_known in (timestamp_pb2, any_pb2, wrappers_pb2):
        pool.AddSerializedFile(well_known.DESCRIPTOR.serialized_pb)
    for file_proto in (currency, common, order_file):
        pool.Add(file_proto)
    names = {
        "Order": "shop.Order",
        "Line": "shop.Order.Line",
        "Refund": "shop.Refund",
        "Money": "shop.common.Money",
    }
    return {
        short: message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
        for short, full in names.items()
    }


PB = _protobuf_types()


def pb_serialize(
    client: SchemaRegistryClient,
    message: Any,
    field: MessageField = MessageField.VALUE,
    headers: Any = None,
    **conf: Any,
) -> bytes:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    return ProtobufSerializer(type(message), client, conf)(message, ctx(field, headers))


def full_order() -> Any:
    order = PB["Order"](
        id=-(2**63),
        name="Zoë ☃",
        tags=["a", "b"],
        status=2,
        blob=b"\x00\xff",
        big=2**64 - 1,
        delta=-5,
        ratio=0.25,
        f=1.5,
        fixed=2**63 + 1,
    )
    order.price.units = 2**53 + 1  # a double cannot hold it: proto3 JSON would quote it
    order.price.currency = 1
    order.lines.add(sku="s1", qty=2)
    order.lines.add(sku="s2")
    order.counts["x"] = 2**40
    order.at.seconds = 1_714_564_800
    order.at.nanos = 123_000_000
    order.extra.Pack(PB["Line"](sku="packed", qty=1))
    order.maybe.value = 7
    return order


FULL_ORDER = {
    "id": -(2**63),
    "name": "Zoë ☃",
    "price": {"units": 2**53 + 1, "currency": "EUR"},
    "tags": ["a", "b"],
    "lines": [{"sku": "s1", "qty": 2}, {"sku": "s2", "qty": 0}],
    "status": "SHIPPED",
    "blob": "AP8=",
    "big": 2**64 - 1,
    "delta": -5,
    "ratio": 0.25,
    "ok": False,
    "counts": {"x": 2**40},
    "at": "2024-05-01T12:00:00.123Z",
    "f": 1.5,
    "extra": {"@type": "type.googleapis.com/shop.Order.Line", "sku": "packed", "qty": 1},
    "maybe": 7,
    "fixed": 2**63 + 1,
}

# Fields without presence are always there (their defaults); message fields only when set.
EMPTY_ORDER = {
    "id": 0,
    "name": "",
    "tags": [],
    "lines": [],
    "status": "STATUS_UNKNOWN",
    "blob": "",
    "big": 0,
    "delta": 0,
    "ratio": 0.0,
    "ok": False,
    "counts": {},
    "f": 0.0,
    "fixed": 0,
}


def test_protobuf_value(registry: SchemaRegistryStub, client: SchemaRegistryClient) -> None:
    unhandled = len(registry.unhandled)
    payload = pb_serialize(client, full_order())
    assert payload[0] == 0 and payload[5] == 0  # schema id, then message indexes [0]
    decode = value_decoder("protobuf", **registry_env(registry))
    doc = decode(rec(payload))
    assert doc == FULL_ORDER
    assert orjson.loads(orjson.dumps(doc)) == doc  # JSON-compatible, 64-bit ints exact
    assert decode(rec(pb_serialize(client, PB["Order"]()))) == EMPTY_ORDER
    assert registry.unhandled[unhandled:] == []


def test_protobuf_fetches_serialized_schemas_once(
    registry: SchemaRegistryStub, client: SchemaRegistryClient
) -> None:
    orders = [pb_serialize(client, PB["Order"](id=i, name=f"o{i}")) for i in range(3)]
    refund = pb_serialize(client, PB["Refund"](order_id=1))
    decode = value_decoder("protobuf", **registry_env(registry))
    before, unhandled = len(registry.requests), len(registry.unhandled)
    assert [decode(rec(o))["id"] for o in orders] == [0, 1, 2]
    assert decode(rec(refund)) == {"order_id": 1, "reason": ""}
    for raw in [*orders, refund] * 3:
        decode(rec(raw))
    made = registry.requests[before:]
    # The writer schema by id, then its references (common, then the currency it imports),
    # once each, as registered (serialized): then everything comes from the caches.
    order_id = int.from_bytes(orders[0][1:5], "big")
    assert [m for m, _ in made] == ["GET"] * 3, made
    assert made[0][1] == f"/schemas/ids/{order_id}"
    assert made[1][1].startswith("/subjects/shop%2Fcommon.proto/versions/1?")
    assert made[2][1].startswith("/subjects/shop%2Fcurrency.proto/versions/1?")
    assert not any("format=" in path for _, path in made)
    assert registry.unhandled[unhandled:] == []


@pytest.mark.parametrize("registry_kind", ["confluent", "apicurio"])
def test_protobuf_schemas_come_serialized_from_either_registry(registry_kind: str) -> None:
    """Confluent's registry answers `.proto` text unless asked for `format=serialized`;
    Apicurio's answers a schema registered serialized as registered, and `format=serialized`
    with an HTTP 500."""
    with SchemaRegistryStub() as stub:
        own = SchemaRegistryClient({"url": stub.url})
        order = pb_serialize(own, full_order())
        if registry_kind == "confluent":
            stub.protobuf_as_text = True
        else:
            stub.serialized_status = 500
        decode = value_decoder("protobuf", **registry_env(stub))
        before = len(stub.requests)
        assert decode(rec(order)) == FULL_ORDER
        paths = [path for _, path in stub.requests[before:]]
    order_id = int.from_bytes(order[1:5], "big")
    if registry_kind == "confluent":  # each file twice: as text, then serialized
        assert len(paths) == 6 and paths[:2] == [
            f"/schemas/ids/{order_id}",
            f"/schemas/ids/{order_id}?format=serialized",
        ]
        assert ["format=serialized" in path for path in paths] == [False, True] * 3
    else:  # each file once, as registered
        assert len(paths) == 3 and not any("format=" in path for path in paths)


def test_protobuf_garbled_serialized_form_is_a_record_error(
    registry: SchemaRegistryStub, client: SchemaRegistryClient
) -> None:
    """Apicurio answers `format=serialized` for a schema registered as `.proto` text with the
    descriptor's bytes as text, not base64: its records are dead letters that say so."""
    payload = pb_serialize(client, PB["Refund"](order_id=3), **{"auto.register.schemas": True})
    stored = registry._schema(int.from_bytes(payload[1:5], "big"))
    stored.schema, before = "\n\x06Refund\ufffd", stored.schema
    try:
        decode = value_decoder("protobuf", **registry_env(registry))
        with pytest.raises(DecodeError, match=r"not base64 \(Apicurio"):
            decode(rec(payload))
    finally:
        stored.schema = before


def test_protobuf_message_indexes(
    registry: SchemaRegistryStub, client: SchemaRegistryClient
) -> None:
    decode = value_decoder("protobuf", **registry_env(registry))
    refund = pb_serialize(client, PB["Refund"](order_id=2**62, reason="late"))
    assert refund[5:7] == b"\x02\x02"  # one index, 1 (zig-zag): the second message
    assert decode(rec(refund)) == {"order_id": 2**62, "reason": "late"}
    line = pb_serialize(client, PB["Line"](sku="s", qty=-3))
    assert line[5:8] == b"\x04\x00\x00"  # two indexes, [0, 0]: Order's first nested type
    assert decode(rec(line)) == {"sku": "s", "qty": -3}
    # [0] written out in full (count 1, index 0) instead of the single 0 byte: the same.
    order = pb_serialize(client, full_order())
    assert decode(rec(order[:5] + b"\x02\x00" + order[6:])) == FULL_ORDER
    # Same schema id, different index: the right class each time (cached per index).
    assert decode(rec(refund))["reason"] == "late"
    assert decode(rec(order))["name"] == "Zoë ☃"


def test_protobuf_key_and_header_schema_ids(
    registry: SchemaRegistryStub, client: SchemaRegistryClient
) -> None:

    key = pb_serialize(client, PB["Refund"](order_id=9), MessageField.KEY)
    assert key_decoder("protobuf", **registry_env(registry))(rec(key=key)) == {
        "order_id": 9,
        "reason": "",
    }
    # Schema GUID and message indexes in a header, the payload bare protobuf.
    for field, decoder in ((MessageField.VALUE, value_decoder), (MessageField.KEY, key_decoder)):
        headers: list[tuple[str, bytes | None]] = [("trace", b"1")]
        bare = pb_serialize(
            client,
            PB["Refund"](order_id=3, reason="r"),
            field,
            headers,
            **{"schema.id.serializer": header_schema_id_serializer},
        )
        assert headers[1][0] == f"__{field}_schema_id" and headers[1][1][0] == 1
        decode = decoder("protobuf", **registry_env(registry))
        record = (
            rec(bare, headers=tuple(headers))
            if field == "value"
            else rec(key=bare, headers=tuple(headers))
        )
        assert decode(record) == {"order_id": 3, "reason": "r"}


def test_protobuf_bad_records(registry: SchemaRegistryStub, client: SchemaRegistryClient) -> None:
    good = pb_serialize(client, PB["Refund"](order_id=1, reason="x" * 20))
    order = pb_serialize(client, full_order())
    avro = AvroSerializer(client, '"string"')("not protobuf", ctx())
    frame = good[:5]
    decode = value_decoder("protobuf", **registry_env(registry))
    cases = {
        "unknown schema id": (b"\x00" + (99_999).to_bytes(4, "big") + good[5:], "id 99999"),
        "truncated": (good[:-5], "not a valid shop.Refund message"),
        "invalid wire type 7": (frame + b"\x02\x02" + b"\x0f\x00", "not a valid shop.Refund"),
        "field number 0": (frame + b"\x02\x02" + b"\x00\x00", "not a valid shop.Refund"),
        "invalid UTF-8": (frame + b"\x02\x02" + b"\x12\x01\xff", "not a valid shop.Refund"),
        "index out of range": (frame + b"\x02\x0a" + b"", r"message indexes \[5\]"),
        "nested index out of range": (frame + b"\x04\x00\x08", r"message indexes \[0, 4\]"),
        "negative index": (frame + b"\x02\x01", r"message indexes \[-1\]"),
        "index array cut": (frame + b"\x04\x00", "EOF"),
        "avro schema": (avro, "AVRO schema, not PROTOBUF"),
        "wrong magic byte": (b"\x07" + good[1:], "magic byte 7"),
        "framing only": (frame, ""),
        "id cut": (good[:3], ""),
        "empty": (b"", "empty payload"),
        "NaN": (pb_serialize(client, PB["Order"](ratio=float("nan"))), r"shop\.Order\.ratio"),
        "infinity": (pb_serialize(client, PB["Order"](f=float("-inf"))), r"shop\.Order\.f"),
    }
    for name, (raw, fragment) in cases.items():
        with pytest.raises(DecodeError, match=fragment or None) as info:
            decode(rec(raw))
        assert not isinstance(info.value, RegistryUnavailableError), name
        assert len(str(info.value)) < 400, name
    # A field sent with another wire type than the schema's is an unknown field to protobuf
    # (as is a field number the schema lacks): skipped, not an error.
    assert decode(rec(frame + b"\x02\x02" + b"\x0a\x01x" + b"\xf8\x07\x01")) == {
        "order_id": 0,
        "reason": "",
    }
    assert decode(rec(good))["order_id"] == 1  # still fine afterwards
    assert decode(rec(order)) == FULL_ORDER


def test_protobuf_registry_down_is_not_a_record_error(client: SchemaRegistryClient) -> None:
    with SchemaRegistryStub() as stub:
        own = SchemaRegistryClient({"url": stub.url})
        payload = pb_serialize(own, PB["Refund"](order_id=5))
        decode = value_decoder("protobuf", **registry_env(stub))
        for status in (503, 401):
            stub.fail_status = status
            with pytest.raises(RegistryUnavailableError, match=f"HTTP {status}"):
                decode(rec(payload))
        stub.fail_status = None  # failures are not cached: it works once the registry does
        assert decode(rec(payload)) == {"order_id": 5, "reason": ""}
        url = stub.url
    decode = value_decoder("protobuf", SCHEMA_REGISTRY_URL=url, **FAST_GIVE_UP)
    with pytest.raises(RegistryUnavailableError, match="unreachable") as info:
        decode(rec(payload))
    assert not isinstance(info.value, DecodeError)


def test_protobuf_decoder_pickles(
    registry: SchemaRegistryStub, client: SchemaRegistryClient
) -> None:
    payload = pb_serialize(client, PB["Refund"](order_id=4))
    decode = pickle.loads(pickle.dumps(value_decoder("protobuf", **registry_env(registry))))
    assert decode(rec(payload))["order_id"] == 4
    decode = pickle.loads(pickle.dumps(decode))  # the caches are not pickled
    assert decode(rec(payload))["order_id"] == 4


def test_stub_protobuf_schemas_are_serialized_only(
    registry: SchemaRegistryStub, client: SchemaRegistryClient
) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryError

    text = 'syntax = "proto3"; message M { int32 a = 1; }'
    with pytest.raises(SchemaRegistryError, match=r"\.proto text") as info:
        client.register_schema("proto-text", Schema(text, "PROTOBUF"))
    assert info.value.error_code == 42201
    payload = pb_serialize(client, PB["Refund"]())
    path = f"/schemas/ids/{int.from_bytes(payload[1:5], 'big')}"
    status, body = registry.handle("GET", path, None, {"format": ["serialized"]})
    assert status == 200 and body["schemaType"] == "PROTOBUF" and body["references"]
    assert registry.handle("GET", path, None, {"format": ["ignore_extensions"]})[0] == 404
    assert registry.unhandled.pop() == ("GET", path)  # an unsupported format is noticed


def test_protobuf_unloadable_writer_schema_is_remembered(registry: SchemaRegistryStub) -> None:
    from google.protobuf import descriptor_pb2

    broken = descriptor_pb2.FileDescriptorProto(name="b.proto", package="b", syntax="proto3")
    fdp = descriptor_pb2.FieldDescriptorProto
    # A field of a message type that no file defines: no descriptor pool takes the file.
    broken.message_type.add(name="M").field.add(
        name="x",
        number=1,
        type=fdp.TYPE_MESSAGE,
        type_name=".nowhere.Type",
        label=fdp.LABEL_OPTIONAL,
    )
    stored = registry.register(
        "broken-value",
        {
            "schema": base64.b64encode(broken.SerializeToString()).decode(),
            "schemaType": "PROTOBUF",
        },
    )
    raw = b"\x00" + stored.id.to_bytes(4, "big") + b"\x00" + b"\x0a\x01x"
    decode = value_decoder("protobuf", **registry_env(registry))
    before = len(registry.requests)
    for _ in range(3):
        with pytest.raises(DecodeError, match=r"writer schema .* cannot be loaded"):
            decode(rec(raw))
    assert len(registry.requests) == before + 1  # fetched once, the failure cached
