"""Debezium change streams end to end (real broker and node): creates, snapshot reads,
updates, deletes and tombstones, as plain envelopes, in the JsonConverter's schema wrapper,
flattened by ExtractNewRecordState, with composite keys, as soft deletes and through Avro
with a Schema Registry; each index ends as exactly the table's final rows."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from tests.support.flows import committed_offsets, create_topic, produce, run_flow, search_all

pytestmark = pytest.mark.integration

Row = dict[str, Any]
Op = tuple[str, Row]
"""(c | r | u | d, the row after the change, or for d the key columns of the deleted row)."""

OPS: list[Op] = [
    ("r", {"id": 1, "name": "snap", "qty": 1}),
    ("r", {"id": 2, "name": "two", "qty": 2}),
    ("c", {"id": 3, "name": "three", "qty": 3}),
    ("u", {"id": 1, "name": "snap", "qty": 10}),
    ("d", {"id": 2}),
    ("c", {"id": 4, "name": "brief", "qty": 4}),
    ("d", {"id": 4}),  # created and deleted in one batch: must end deleted
    ("u", {"id": 3, "name": "three!", "qty": 30}),
    ("c", {"id": 2, "name": "two again", "qty": 22}),  # a deleted id comes back
    ("d", {"id": 3}),
    ("c", {"id": 5, "name": "five", "qty": 5}),
]
SCHEMA = {
    "type": "struct",
    "optional": False,
    "name": "dbserver1.inventory.orders.Envelope",
    "fields": [{"field": "op", "type": "string"}],
}  # (its content is not read)


class Table:
    """The source table: applies OPS and writes the change events Debezium would."""

    def __init__(self, name: str, keys: tuple[str, ...] = ("id",)) -> None:
        self.name = name
        self.keys = keys
        self.rows: dict[tuple[Any, ...], Row] = {}
        self.ts = 1_714_564_800_000

    def key(self, row: Row) -> dict[str, Any]:
        return {k: row[k] for k in self.keys}

    def apply(self, op: str, row: Row) -> tuple[Row | None, Row | None]:
        """(before, after) of the change, the table updated."""
        k = tuple(row[c] for c in self.keys)
        before = self.rows.get(k)
        if op == "d":
            assert before is not None
            del self.rows[k]
            return dict(before), None
        self.rows[k] = dict(row)
        return (None if op in "cr" else dict(before or {})), dict(row)

    def envelope(self, op: str, before: Row | None, after: Row | None) -> dict[str, Any]:
        self.ts += 1000
        source = {
            "connector": "postgresql",
            "db": "inventory",
            "table": self.name,
            "ts_ms": self.ts,
            "snapshot": "true" if op == "r" else "false",
        }
        return {"before": before, "after": after, "source": source, "op": op, "ts_ms": self.ts}


def stream(
    table: Table, ops: list[Op], shape: Callable[[Table, str, Row | None, Row | None], Any]
) -> list[tuple[bytes, bytes | None]]:
    """The topic's messages: each change, and a tombstone after each delete."""
    out: list[tuple[bytes, bytes | None]] = []
    for op, row in ops:
        full = {**table.rows.get(tuple(row[c] for c in table.keys), {}), **row}
        before, after = table.apply(op, full)
        key, value = shape(table, op, before, after)
        out.append((orjson.dumps(key), orjson.dumps(value)))
        if op == "d":
            out.append((orjson.dumps(key), None))
    return out


def plain(t: Table, op: str, before: Row | None, after: Row | None) -> tuple[Any, Any]:
    return t.key(before or after or {}), t.envelope(op, before, after)


def wrapped(t: Table, op: str, before: Row | None, after: Row | None) -> tuple[Any, Any]:
    key, value = plain(t, op, before, after)
    key_schema = {"type": "struct", "fields": [{"field": "id", "type": "int32"}]}
    return {"schema": key_schema, "payload": key}, {"schema": SCHEMA, "payload": value}


def flattened(t: Table, op: str, before: Row | None, after: Row | None) -> tuple[Any, Any]:
    row = before if op == "d" else after
    assert row is not None
    return t.key(row), {**row, "__deleted": "true" if op == "d" else "false"}


def doc_id(t: Table, key: tuple[Any, ...]) -> str:
    return "+".join(str(v) for v in key)


def test_debezium_streams_end_as_the_tables_final_rows(services, es, names, tmp_path):
    plain_t, wrapped_t, flat_t, comp_t, soft_t = (
        names(p) for p in ("cdc-plain", "cdc-wrap", "cdc-flat", "cdc-comp", "cdc-soft")
    )
    tables = {
        plain_t: Table("orders"),
        wrapped_t: Table("orders"),
        flat_t: Table("orders"),
        comp_t: Table("stock", keys=("region", "id")),
        soft_t: Table("orders"),
    }
    comp_ops = [(op, {"region": "eu" if row["id"] % 2 else "us", **row}) for op, row in OPS]
    messages = {
        plain_t: stream(tables[plain_t], OPS, plain),
        wrapped_t: stream(tables[wrapped_t], OPS, wrapped),
        flat_t: stream(tables[flat_t], OPS, flattened),
        comp_t: stream(tables[comp_t], comp_ops, plain),
        soft_t: stream(tables[soft_t], OPS, plain),
    }
    for topic, msgs in messages.items():
        create_topic(services.kafka, topic, partitions=2 if topic == comp_t else 1)
        produce(services.kafka, topic, msgs)
    config = tmp_path / "cdc.yaml"
    config.write_text(
        "transforms:\n"
        f"  - {{type: debezium, topics: '{plain_t}|{wrapped_t}|{comp_t}',"
        " fields: [op, source.table]}\n"
        f"  - {{type: unwrap, topics: '{flat_t}'}}\n"
        f"  - {{type: debezium, topics: '{soft_t}', soft_delete: deleted}}\n"
    )
    env = {
        "KAFKA_TOPICS": ",".join(messages),
        "KAFKA_GROUP_ID": plain_t,
        "VALUE_FORMAT": "json",
        "KEY_FORMAT": "json",
        "ON_NULL_VALUE": "fail",  # were the tombstones given to ON_NULL_VALUE, the flow would stop
        "ES_SINK_CONFIG": str(config),
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output

    final = {
        1: {"id": 1, "name": "snap", "qty": 10},
        2: {"id": 2, "name": "two again", "qty": 22},
        5: {"id": 5, "name": "five", "qty": 5},
    }
    assert {k[0]: r for k, r in tables[plain_t].rows.items()} == final  # the model agrees
    meta = {"__op": "c", "__source_table": "orders"}
    expected = {str(i): {**r, **meta} for i, r in final.items()}
    expected["1"]["__op"] = "u"
    assert search_all(es, plain_t) == expected
    assert search_all(es, wrapped_t) == expected
    assert search_all(es, flat_t) == {str(i): r for i, r in final.items()}
    comp = tables[comp_t]
    assert search_all(es, comp_t) == {
        doc_id(comp, k): {**r, "__op": "u" if k[1] == 1 else "c", "__source_table": "stock"}
        for k, r in comp.rows.items()
    }
    assert set(search_all(es, comp_t)) == {"eu+1", "us+2", "eu+5"}
    soft = search_all(es, soft_t)
    assert {i: d for i, d in soft.items() if not d["deleted"]} == {
        str(i): {**r, "deleted": False} for i, r in final.items()
    }
    assert {i: d for i, d in soft.items() if d["deleted"]} == {
        "3": {"id": 3, "name": "three!", "qty": 30, "deleted": True},
        "4": {"id": 4, "name": "brief", "qty": 4, "deleted": True},
    }
    for topic, msgs in messages.items():
        assert sum(committed_offsets(services.kafka, plain_t, topic).values()) == len(msgs)


AVRO_ROW = {
    "type": "record",
    "name": "Value",
    "namespace": "dbserver1.inventory.orders",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "name", "type": "string"},
        {"name": "qty", "type": "int"},
    ],
}
AVRO_ENVELOPE = {
    "type": "record",
    "name": "Envelope",
    "namespace": "dbserver1.inventory.orders",
    "fields": [
        {"name": "before", "type": ["null", AVRO_ROW], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {
            "name": "source",
            "type": {
                "type": "record",
                "name": "Source",
                "fields": [
                    {"name": "connector", "type": "string"},
                    {"name": "db", "type": "string"},
                    {"name": "table", "type": "string"},
                    {"name": "ts_ms", "type": "long"},
                    {"name": "snapshot", "type": "string"},
                ],
            },
        },
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
}
AVRO_KEY = {
    "type": "record",
    "name": "Key",
    "namespace": "dbserver1.inventory.orders",
    "fields": [{"name": "id", "type": "int"}],
}


def test_debezium_avro_through_the_schema_registry(services, es, names, tmp_path, registry):
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = names("cdc-avro")
    create_topic(services.kafka, topic)
    table = Table("orders")
    client = registry.client()
    value_ser = AvroSerializer(client, json.dumps(AVRO_ENVELOPE))
    key_ser = AvroSerializer(client, json.dumps(AVRO_KEY))
    vctx = SerializationContext(topic, MessageField.VALUE)
    kctx = SerializationContext(topic, MessageField.KEY)
    msgs: list[tuple[bytes, bytes | None]] = []
    for op, row in OPS:
        full = {**table.rows.get((row["id"],), {}), **row}
        before, after = table.apply(op, full)
        key = key_ser({"id": row["id"]}, kctx)
        msgs.append((key, value_ser(table.envelope(op, before, after), vctx)))
        if op == "d":
            msgs.append((key, None))
    produce(services.kafka, topic, msgs)
    config = tmp_path / "cdc.yaml"
    config.write_text("transforms:\n  - {type: debezium, fields: [source.ts_ms]}\n")
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "VALUE_FORMAT": "avro",
        "KEY_FORMAT": "avro",
        "SCHEMA_REGISTRY_URL": registry.url,
        "ES_SINK_CONFIG": str(config),
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    docs = search_all(es, topic)
    assert {i: {k: v for k, v in d.items() if k != "__source_ts_ms"} for i, d in docs.items()} == {
        str(k[0]): r for k, r in table.rows.items()
    }
    assert all(isinstance(d["__source_ts_ms"], int) for d in docs.values())
    assert committed_offsets(services.kafka, topic, topic) == {0: len(msgs)}
