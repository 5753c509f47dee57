"""flows.transforms.cdc: the debezium (unwrap) built-in on decoded envelopes, flattened rows
and tombstones; its ids, options and refusals; the processor's tombstone hand-over and the
start-up refusal of deletes that could miss (the ON_NULL_VALUE=delete rule)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from flows.config import Settings
from flows.errors import ConfigError
from flows.process import Processor, is_documents
from flows.record import DeadLetter, Doc, Record
from flows.transforms import BUILTINS, apply_transforms, build_transforms
from tests.support.paths import ROOT
from tests.support.transforms import config_error, make_doc, run, run_one

EXAMPLE = ROOT / "examples" / "debezium.yaml"
SOURCE = {"connector": "postgresql", "db": "shop", "table": "orders", "ts_ms": 1714564800000}


def envelope(op: str, before: Any = None, after: Any = None, **extra: Any) -> dict[str, Any]:
    return {
        "before": before,
        "after": after,
        "source": dict(SOURCE),
        "op": op,
        "ts_ms": 17,
        **extra,
    }


def wrapped(payload: Any) -> dict[str, Any]:
    """The JsonConverter's schemas.enable=true wrapper (the schema's content does not matter)."""
    return {"schema": {"type": "struct", "fields": [], "optional": False}, "payload": payload}


def one(spec: dict[str, Any], source: Any, key: Any = None, **kw: Any) -> Doc:
    return run_one({"type": "debezium", **spec}, make_doc(source, key=key, **kw))


# ------------------------------------------------------------------------------ envelopes


@pytest.mark.parametrize("op", ["c", "r", "u"])
def test_create_read_update_index_the_after_image(op: str) -> None:
    doc = one({}, envelope(op, {"id": 1, "n": 0}, {"id": 1, "n": 2}), key={"id": 1})
    assert (doc.source, doc.id, doc.delete) == ({"id": 1, "n": 2}, "1", False)


def test_delete_deletes_by_the_key_with_no_body() -> None:
    doc = one({}, envelope("d", before={"id": 7, "n": 1}), key={"id": 7})
    assert (doc.source, doc.id, doc.delete) == (None, "7", True)


def test_schema_wrappers_on_value_and_key_are_unwrapped() -> None:
    value = wrapped(envelope("u", after={"sku": "a-1", "n": 3}))
    doc = one({}, value, key=wrapped({"sku": "a-1"}))
    assert (doc.source, doc.id) == ({"sku": "a-1", "n": 3}, "a-1")


def test_decoded_avro_envelope_is_the_same_dict() -> None:
    """What flows.decode.avro's converter hands over: the envelope as a dict, unions
    resolved (no wrapper), bytes as base64 and decimals as strings already."""
    value = {
        "before": None,
        "after": {"id": 3, "price": "12.30", "raw": "AAH/"},
        "source": {**SOURCE, "snapshot": "false"},
        "op": "c",
        "ts_ms": 1714564800123,
        "transaction": None,
    }
    doc = one({"fields": ["source.table", "transaction"]}, value, key={"id": 3})
    assert doc.source == {
        "id": 3,
        "price": "12.30",
        "raw": "AAH/",
        "__source_table": "orders",
        "__transaction": None,
    }
    assert doc.id == "3"


def test_composite_key_joins_values_with_plus_in_key_order() -> None:
    key = {"region": "eu", "id": 42, "active": True, "ratio": 1.5}
    doc = one({}, envelope("c", after={"x": 1}), key=key)
    assert doc.id == "eu+42+true+1.5"
    assert one({}, envelope("c", after={}), key={"b": "2", "a": "1"}).id == "2+1"


def test_scalar_key_is_the_id_as_it_is() -> None:
    assert one({}, envelope("c", after={}), key="order-9").id == "order-9"
    assert one({}, envelope("c", after={}), key=9).id == "9"


@pytest.mark.parametrize(
    ("key", "words"),
    [
        (None, "no key"),
        ('{"id": 1}', "KEY_FORMAT=json"),
        ({}, "empty object"),
        ({"id": None}, "key field id is null"),
        ({"id": [1]}, "key field id is [1], not a string"),
    ],
)
def test_keys_that_give_no_id_raise(key: Any, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        one({}, envelope("c", after={"a": 1}), key=key)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (envelope("t"), "op 't' names no document"),
        (envelope("m"), "op 'm' names no document"),
        (envelope("c", after=None), "op c needs an after image"),
        (envelope("u", after='{"$oid": 1}'), "op u needs an after image"),
        ({"id": 1, "n": 2}, "not a Debezium change event"),
        ({"op": "c"}, "not a Debezium change event"),  # a column named op is not an envelope
        (wrapped([1, 2]), "the payload is [1, 2]"),
        ({"id": 1, "__deleted": "maybe"}, "__deleted must be 'true' or 'false'"),
    ],
)
def test_records_that_are_not_change_events_raise(value: Any, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        one({}, value, key={"id": 1})


# ------------------------------------------------------------------------------ flattened rows


def test_flattened_rows_index_or_delete_and_lose_the_deleted_marker() -> None:
    doc = one({}, {"id": 2, "n": 5, "__deleted": "false"}, key={"id": 2})
    assert (doc.source, doc.id, doc.delete) == ({"id": 2, "n": 5}, "2", False)
    doc = one({}, {"id": 2, "n": None, "__deleted": "true"}, key={"id": 2})
    assert (doc.source, doc.id, doc.delete) == (None, "2", True)
    doc = one({}, wrapped({"id": 3, "__deleted": True}), key=wrapped({"id": 3}))
    assert (doc.source, doc.id, doc.delete) == (None, "3", True)


def test_envelope_fields_are_not_looked_for_in_flattened_rows() -> None:
    doc = one({"fields": ["op"]}, {"id": 2, "__op": "u", "__deleted": "false"}, key={"id": 2})
    assert doc.source == {"id": 2, "__op": "u"}  # what add.fields put there stays as it is


# ------------------------------------------------------------------------------ tombstones


def test_tombstones_are_dropped() -> None:
    tomb = make_doc(None, key={"id": 7})
    assert run([{"type": "debezium"}], tomb) == []


def test_tombstones_delete_by_key_when_asked() -> None:
    doc = one({"tombstones": "delete"}, None, key=wrapped({"id": 7, "v": "x"}))
    assert (doc.source, doc.id, doc.delete) == (None, "7+x", True)


def test_a_body_removed_by_an_earlier_transform_is_not_a_tombstone() -> None:
    doc = make_doc({"a": 1}, key={"id": 1})
    doc.source, doc.delete = None, True  # an earlier transform's delete, value not null
    (out,) = apply_transforms(build_transforms([{"type": "debezium"}]), doc)
    assert out is doc and out.delete and out.id is None


# ------------------------------------------------------------------------------ options


def test_fields_are_copied_under_the_prefix_with_dots_as_underscores() -> None:
    spec = {"fields": ["op", "ts_ms", "source.ts_ms", "source.table", "source.absent"]}
    doc = one(spec, envelope("u", after={"id": 1}), key={"id": 1})
    assert doc.source == {
        "id": 1,
        "__op": "u",
        "__ts_ms": 17,
        "__source_ts_ms": 1714564800000,
        "__source_table": "orders",
    }  # a missing field is left out


def test_a_dotted_prefix_nests_the_fields() -> None:
    spec = {"fields": ["op", "source.db"], "prefix": "cdc."}
    doc = one(spec, envelope("c", after={"id": 1}), key={"id": 1})
    assert doc.source == {"id": 1, "cdc": {"op": "c", "source_db": "shop"}}
    plain = one({"fields": ["op"], "prefix": ""}, envelope("r", after={"id": 1}), key={"id": 1})
    assert plain.source == {"id": 1, "op": "r"}


def test_soft_delete_indexes_the_before_image_flagged() -> None:
    spec = {"soft_delete": "deleted", "fields": ["op"]}
    doc = one(spec, envelope("d", before={"id": 1, "n": 4}), key={"id": 1})
    assert (doc.source, doc.id, doc.delete) == (
        {"id": 1, "n": 4, "__op": "d", "deleted": True},
        "1",
        False,
    )
    doc = one(spec, envelope("c", after={"id": 1, "n": 5}), key={"id": 1})
    assert doc.source == {"id": 1, "n": 5, "__op": "c", "deleted": False}
    doc = one({"soft_delete": "meta.gone"}, envelope("d"), key={"id": 1})
    assert doc.source == {"meta": {"gone": True}}  # no before image: the flag alone
    doc = one({"soft_delete": "gone"}, {"id": 1, "__deleted": "true"}, key={"id": 1})
    assert (doc.source, doc.delete) == ({"id": 1, "gone": True}, False)


def test_id_fields_come_from_the_row_and_the_before_image_of_a_delete() -> None:
    spec = {"id_fields": ["tenant", "ref.no"]}
    after = {"tenant": "t1", "ref": {"no": 5}, "n": 1}
    assert one(spec, envelope("c", after=after), key={"pk": 99}).id == "t1+5"
    doc = one(spec, envelope("d", before=after), key=None)
    assert (doc.id, doc.delete) == ("t1+5", True)
    with pytest.raises(
        ValueError, match=re.escape("id field ref.no is missing or null in the before")
    ):
        one(spec, envelope("d", before={"tenant": "t1", "ref": None}), key=None)
    with pytest.raises(ValueError, match="id_fields need the before image, which is None"):
        one(spec, envelope("d"), key=None)


def test_topics_limits_it_and_other_topics_pass_unchanged() -> None:
    spec = {"topics": r"dbserver1\..*"}
    value = envelope("c", after={"id": 1})
    doc = one(spec, value, key={"id": 1}, topic="dbserver1.shop.orders")
    assert doc.source == {"id": 1}
    other = one(spec, dict(value), key={"id": 1}, topic="plain")
    assert other.source == value and other.id is None


def test_unwrap_is_the_same_transform() -> None:
    assert BUILTINS["unwrap"].keys == BUILTINS["debezium"].keys
    doc = run_one({"type": "unwrap"}, make_doc(envelope("d"), key={"id": 3}))
    assert (doc.id, doc.delete) == ("3", True)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"fields": ["after.n"]}, "transforms[0].fields: after.n: expected a path under one of op"),
        ({"fields": "op"}, "transforms[0].fields: expected a non-empty list"),
        ({"prefix": "x_"}, "transforms[0].prefix: only valid with fields"),
        ({"fields": ["op"], "prefix": 1}, "transforms[0].prefix: expected a string"),
        ({"fields": ["op"], "prefix": "."}, "transforms[0].prefix: expected a dotted field"),
        ({"tombstones": "keep"}, "transforms[0].tombstones: expected one of ignore, delete"),
        ({"tombstones": "delete", "soft_delete": "x"}, "no row to keep as a soft delete"),
        ({"tombstones": "delete", "id_fields": ["x"]}, "its id is the key"),
        ({"topics": "("}, "transforms[0].topics: invalid regular expression"),
        ({"id_field": ["x"]}, "did you mean 'id_fields'"),
    ],
)
def test_bad_options_fail_at_start(spec: dict[str, Any], words: str) -> None:
    assert words in config_error([{"type": "debezium", **spec}])


# ------------------------------------------------------------------------------ the processor


def _settings(tmp_path: Path, yaml: str, **env: str) -> Settings:
    path = tmp_path / "sink.yaml"
    path.write_text(yaml)
    return Settings.load({"KAFKA_TOPICS": "orders", "ES_SINK_CONFIG": str(path), **env})


def _msg(value: Any, key: Any, offset: int, topic: str = "orders") -> Message:
    data = None if value is None else orjson.dumps(value)
    return Message(
        topic=topic,
        partition=0,
        offset=offset,
        key=orjson.dumps(key),
        value=data,
        timestamp=(TIMESTAMP_CREATE_TIME, 1714564800123),
    )


def _lines(out: list[tuple[str, Any]]) -> list[Any]:
    return [
        orjson.loads(line)
        for _, chunk in out
        if is_documents((_, chunk))
        for a in chunk
        for line in a.data.split(b"\n")[:-1]
    ]


@pytest.mark.parametrize("policy", ["ignore", "delete", "dlq", "fail"])
def test_the_processor_hands_tombstones_to_debezium_whatever_on_null_value(
    tmp_path: Path, policy: str
) -> None:
    yaml = "transforms:\n  - {type: debezium, topics: orders}\n"
    s = _settings(tmp_path, yaml, KEY_FORMAT="json", ON_NULL_VALUE=policy, DLQ_TOPIC="dead")
    batch = [
        _msg(envelope("c", after={"id": 1, "n": 1}), {"id": 1}, 0),
        _msg(envelope("d", before={"id": 1, "n": 1}), {"id": 1}, 1),
        _msg(None, {"id": 1}, 2),  # Debezium's tombstone: dropped, not ON_NULL_VALUE
    ]
    out = Processor(s, [], 4)(batch)
    assert [x for _, x in out if isinstance(x, DeadLetter)] == []
    assert _lines(out) == [
        {"index": {"_index": "orders", "_id": "1"}},
        {"id": 1, "n": 1},
        {"delete": {"_index": "orders", "_id": "1"}},
    ]
    assert len({p for p, x in out if is_documents((p, x))}) == 1  # one id, one sink partition


def test_tombstones_of_other_topics_still_follow_on_null_value(tmp_path: Path) -> None:
    yaml = "transforms:\n  - {type: debezium, topics: cdc}\n"
    s = _settings(tmp_path, yaml, KAFKA_TOPICS="orders,cdc", ON_NULL_VALUE="dlq", DLQ_TOPIC="d")
    out = Processor(s, [], 4)([_msg(None, "k", 0), _msg(None, {"id": 1}, 1, topic="cdc")])
    (letter,) = [x for _, x in out if isinstance(x, DeadLetter)]
    assert letter.record.offset == 0 and "ON_NULL_VALUE=dlq" in letter.message


def test_connect_json_values_and_keys_reach_the_transform_unwrapped(tmp_path: Path) -> None:
    yaml = "transforms:\n  - {type: debezium, fields: [op]}\n"
    s = _settings(tmp_path, yaml, KEY_FORMAT="connect-json", VALUE_FORMAT="connect-json")
    decimal = {
        "type": "bytes",
        "name": "org.apache.kafka.connect.data.Decimal",
        "field": "p",
        "parameters": {"scale": "2"},
    }
    schema = {
        "type": "struct",
        "fields": [{"field": "after", "type": "struct", "fields": [decimal]}],
    }
    value = {"schema": schema, "payload": envelope("c", after={"p": "BMc="})}
    out = Processor(s, [], 4)([_msg(value, wrapped({"id": 5}), 0)])
    assert _lines(out) == [{"index": {"_index": "orders", "_id": "5"}}, {"p": "12.23", "__op": "c"}]


# ------------------------------------------------------------------------------ settings


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"ES_INDEX": "orders-{yyyy.MM}"}, "ES_INDEX"),
        ({"ES_ROUTING": "field:tenant"}, "ES_ROUTING"),
        ({"ES_DATA_STREAM": "true"}, "ES_DATA_STREAM"),
        ({"DOC_ID": "coordinates"}, "DOC_ID"),
    ],
)
def test_deletes_that_could_miss_are_refused_as_for_on_null_value(
    tmp_path: Path, env: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _settings(tmp_path, "transforms:\n  - {type: unwrap}\n", **env)
    message = str(info.value)
    assert message.startswith(f"{named}: "), message
    assert "transforms[0] (unwrap): a delete event" in message or "deletes" in message


def test_a_field_routed_transform_after_debezium_is_refused(tmp_path: Path) -> None:
    yaml = "transforms:\n  - {type: debezium}\n  - {type: route, index: x, routing_field: t}\n"
    with pytest.raises(ConfigError) as info:
        _settings(tmp_path, yaml)
    assert str(info.value).startswith("transforms[1]: transforms[0] (debezium): a delete event")


def test_soft_deletes_need_no_such_rule(tmp_path: Path) -> None:
    yaml = "transforms:\n  - {type: debezium, soft_delete: deleted}\n"
    s = _settings(tmp_path, yaml, ES_INDEX="orders-{yyyy.MM}", ES_ROUTING="field:tenant")
    assert s.es_index == "orders-{yyyy.MM}"


def test_the_example_configuration_loads_and_compiles() -> None:
    s = Settings.load({"ES_SINK_CONFIG": str(EXAMPLE)})
    assert s.transforms[0]["type"] == "debezium"
    assert len(build_transforms(s.transforms)) == len(s.transforms)


def test_records_keep_their_record_object() -> None:
    rec = Record("orders", 0, 1, None, b"k", b"{}", ())
    doc = Doc(rec, envelope("c", after={"a": 1}), {"id": 1})
    (out,) = apply_transforms(build_transforms([{"type": "debezium"}]), doc)
    assert out.record is rec
