"""Document ids and index names as Kafka Connect's Elasticsearch sink gives them, so that a
flow configured by `es-sink migrate config` writes the connector's documents: each naming
rule against examples derived from the connector's documented behaviour
(`ElasticsearchSinkTask.convertTopicToIndexName`, `convertTopicToDataStreamName`,
`DataConverter.convertKey`, and the `topic+partition+offset` id of ignored keys)."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from confluent_kafka import Message

from flows.config import Settings
from flows.errors import ConfigError
from flows.process import Processor
from flows.transforms import apply_transforms, build_transforms
from sinks.elasticsearch.actions import ActionBuilder, ActionError, InvalidIndexName
from sinks.elasticsearch.index_names import (
    connect_data_stream_name,
    connect_index_name,
    problem,
)
from sinks.metrics import SKIPPED
from sinks.model import DeadLetter, Doc, Record

CONNECT = {"ES_INDEX_NAMING": "connect", "DOC_ID_SEPARATOR": "+"}


def builder(topics: str = "orders", **env: str) -> ActionBuilder:
    return ActionBuilder(Settings.load({"KAFKA_TOPICS": topics, **env}).es_documents)


def record(
    topic: str = "orders",
    partition: int = 3,
    offset: int = 42,
    key: Any = b"k1",
    value: bytes | None = b"{}",
) -> Record:
    return Record(topic, partition, offset, 1_714_564_800_123, key, value, ())


def meta(data: bytes) -> dict[str, Any]:
    line = orjson.loads(data.split(b"\n", 1)[0])
    assert isinstance(line, dict)
    return dict(next(iter(line.values())))


# ------------------------------------------------------------------- index names


@pytest.mark.parametrize(
    ("topic", "index"),
    [
        ("orders", "orders"),  # already valid: unchanged
        ("Orders", "orders"),  # lower-cased
        ("PageViews.EU", "pageviews.eu"),
        ("_orders", "orders"),  # one leading _ dropped
        ("-orders", "orders"),  # one leading - dropped
        ("__orders", "_orders"),  # only one: still invalid, as the connector leaves it
        ("-_orders", "_orders"),
        ("+orders", "+orders"),  # + is not dropped
        (".", "dot"),
        ("..", "dotdot"),
        ("_.", "dot"),  # the leading _ goes first, then . is spelled out
        ("-..", "dotdot"),
        ("...", "..."),  # only . and .. themselves
        (".hidden", ".hidden"),
    ],
)
def test_the_connectors_index_name_of_a_topic(topic: str, index: str) -> None:
    assert connect_index_name(topic) == index


def test_long_names_are_cut_to_255_characters_before_the_leading_character_goes() -> None:
    assert connect_index_name("A" * 300) == "a" * 255
    # cut first (to 255), then the leading _ dropped: 254 characters remain
    assert connect_index_name("_" + "b" * 300) == "b" * 254
    assert problem(connect_index_name("Topic" * 100)) is None


def test_the_cut_counts_utf16_code_units_as_java_does() -> None:
    # 2 code units each: 127 whole emoji and the high half of the 128th, as substring cuts
    name = connect_index_name("😀" * 200)
    assert len(name.encode("utf-16-le", "surrogatepass")) == 255 * 2
    assert name.startswith("😀" * 127)
    # Elasticsearch then refuses it (more than 255 bytes), as it refuses the connector's
    assert problem(name) is not None
    assert connect_index_name("é" * 300) == "é" * 255  # one unit each


def test_the_connectors_data_stream_names() -> None:
    assert connect_data_stream_name("logs", "app", "${topic}", "Orders") == "logs-app-orders"
    assert connect_data_stream_name("METRICS", "app", "${topic}", "cpu") == "metrics-app-cpu"
    assert connect_data_stream_name("logs", "app", "prod", "Orders") == "logs-app-prod"
    long = "T" * 150
    assert connect_data_stream_name("logs", "app", "${topic}", long) == "logs-app-" + "t" * 100
    # a leading _ stays in a namespace (only index names drop it)
    assert connect_data_stream_name("logs", "app", "${topic}", "_x") == "logs-app-_x"


def test_es_index_naming_connect_renames_every_index_a_record_gets() -> None:
    b = builder("Orders,_Logs", **CONNECT)
    assert meta(b.build(Doc(record("Orders"), {"a": 1}, "k")).data)["_index"] == "orders"
    assert meta(b.build(Doc(record("_Logs"), {"a": 1}, "k")).data)["_index"] == "logs"
    # an index a transform chose (a RegexRouter's or TimestampRouter's topic) too
    routed = Doc(record("Orders"), {"a": 1}, "k", index="Daily-Orders-20240501")
    assert meta(b.build(routed).data)["_index"] == "daily-orders-20240501"
    # the fast paths (no transform, JSON sent as it arrived) name it the same way
    assert meta(b.build_source(record("Orders"), {"a": 1}, "k").data)["_index"] == "orders"
    assert meta(b.build_raw(record("_Logs"), "_Logs", b'{"a":1}', "k").data)["_index"] == "logs"
    assert b.key_id_head("Orders") == b'{"index":{"_index":"orders","_id":'


def test_a_dated_index_is_named_after_its_whole_rendered_name() -> None:
    b = builder("_Logs", ES_INDEX="{topic}-{yyyyMMdd}", **CONNECT)
    assert meta(b.build(Doc(record("_Logs"), {"a": 1}, "k")).data)["_index"] == "logs-20240501"


def test_without_connect_naming_an_upper_case_topic_is_a_dead_letter() -> None:
    with pytest.raises(InvalidIndexName, match="lower case"):
        builder("Orders").build(Doc(record("Orders"), {"a": 1}, "k"))
    with pytest.raises(InvalidIndexName, match="must not start"):
        builder("_Logs", ES_INDEX_NAMING="connect").build(Doc(record("__Logs"), {"a": 1}, "k"))


def test_a_fixed_index_is_checked_at_start_after_the_rewrite() -> None:
    Settings.load({"KAFKA_TOPICS": "t", "ES_INDEX": "Orders", "ES_INDEX_NAMING": "connect"})
    with pytest.raises(ConfigError, match="ES_INDEX: index name 'Orders' must be lower case"):
        Settings.load({"KAFKA_TOPICS": "t", "ES_INDEX": "Orders"})
    with pytest.raises(ConfigError, match="ES_INDEX_NAMING: expected one of as-is, connect"):
        Settings.load({"KAFKA_TOPICS": "t", "ES_INDEX_NAMING": "java"})


# ------------------------------------------------------------------- document ids


def test_ignored_keys_give_topic_plus_partition_plus_offset() -> None:
    action = builder(DOC_ID="coordinates", **CONNECT).build(Doc(record("Orders"), {"a": 1}, "k"))
    assert action.id == "Orders+3+42"  # the topic as it is, not the index name
    assert meta(action.data) == {"_index": "orders", "_id": "Orders+3+42"}


def routed(spec: dict[str, Any], rec: Record) -> Doc:
    (doc,) = apply_transforms(build_transforms([spec]), Doc(rec, {"a": 1}, "k"))
    return doc


@pytest.mark.parametrize(
    ("spec", "topic", "index", "doc_id"),
    [
        # TimestampRouter (topic.format ${topic}-${timestamp}, yyyyMMdd) as migrate maps it
        ({"type": "route", "index": "{topic}-{yyyyMMdd}"}, "Orders", "orders-20240501",
         "Orders-20240501+3+42"),
        # RegexRouter events-(.*) -> Events_$1
        ({"type": "route", "topic_regex": "events-(.*)", "replacement": "Events_$1"},
         "events-EU", "events_eu", "Events_EU+3+42"),
        # a topic the regex does not match keeps its name
        ({"type": "route", "topic_regex": "events-(.*)", "replacement": "Events_$1"},
         "Orders", "orders", "Orders+3+42"),
    ],
)  # fmt: skip
def test_after_a_router_ignored_keys_name_the_routed_topic(
    spec: dict[str, Any], topic: str, index: str, doc_id: str
) -> None:
    # The connector's id is the topic+partition+offset of the record its SMTs gave it: the
    # routed topic (its case kept), the partition and offset of the record read.
    b = builder(topic, DOC_ID="coordinates", **CONNECT)
    action = b.build(routed(spec, record(topic)))
    assert meta(action.data) == {"_index": index, "_id": doc_id}
    # a null key under ON_NULL_KEY=coordinates too
    keyless = b.build(routed(spec, record(topic, key=None)))
    assert keyless.id == doc_id


def test_without_connect_naming_a_routed_record_keeps_its_own_coordinates() -> None:
    plain = builder(DOC_ID="coordinates", DOC_ID_SEPARATOR="+")
    doc = routed({"type": "route", "index": "daily-{yyyyMMdd}"}, record())
    assert doc.topic == "daily-20240501"
    assert meta(plain.build(doc).data) == {"_index": "daily-20240501", "_id": "orders+3+42"}


def test_the_default_separator_is_unchanged() -> None:
    action = builder(DOC_ID="coordinates").build(Doc(record(), {"a": 1}, "k"))
    assert action.id == "orders-3-42"
    with pytest.raises(ConfigError, match="DOC_ID_SEPARATOR"):
        Settings.load({"KAFKA_TOPICS": "t", "DOC_ID_SEPARATOR": "+" * 9})


def test_a_null_key_falls_back_to_the_same_coordinates() -> None:
    action = builder(**CONNECT).build(Doc(record(key=None), {"a": 1}, None))
    assert action.id == "orders+3+42"


@pytest.mark.parametrize(
    ("key", "doc_id"),
    [
        ("k1", "k1"),  # STRING: as it is
        ("", None),  # empty: refused, by the connector as by Elasticsearch
        (42, "42"),  # INT8..INT64: String.valueOf, decimal
        (-7, "-7"),
        (2**63 - 1, "9223372036854775807"),
        ('"quoted"', '"quoted"'),  # a StringConverter key holding JSON text keeps its quotes
    ],
)
def test_keys_become_ids_in_the_connectors_string_form(key: Any, doc_id: str | None) -> None:
    b = builder(**CONNECT)
    if doc_id is None:
        with pytest.raises(ValueError, match="document id"):
            b.build(Doc(record(), {"a": 1}, key))
        return
    assert b.build(Doc(record(), {"a": 1}, key)).id == doc_id


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        (1.5, "a float (1.5)"),  # FLOAT32/64: the connector's DataException
        (2.0, "a float (2.0)"),  # not "2": the connector refuses it, it does not render it
        (True, "a boolean (true)"),
        ({"id": 7}, "an object (a struct or map)"),
        ([1, 2], "an array"),
        (b"k1", "bytes"),
        (2**63, "an integer beyond 64 bits"),
    ],
)
def test_keys_the_connector_refuses_are_no_ids(key: Any, kind: str) -> None:
    b = builder(**CONNECT)
    with pytest.raises(ActionError, match=f"the key is {re.escape(kind)}"):
        b.build(Doc(record(), {"a": 1}, key))
    with pytest.raises(ActionError, match="ES_INDEX_NAMING=connect"):
        b.build_source(record(), {"a": 1}, key)
    with pytest.raises(ActionError, match="string or an integer"):  # a tombstone's delete
        b.build(Doc(record(value=None), None, key, delete=True))
    # the flow's own naming keeps its JSON text ids
    assert builder().build(Doc(record(), {"a": 1}, 1.5)).id == "1.5"


def test_a_bytes_key_is_no_id_under_connect_naming() -> None:
    b = builder(KEY_FORMAT="bytes", **CONNECT)
    rec = record(key=b"k1")  # KEY_FORMAT=bytes decodes it as base64 "azE="
    for build in (
        lambda: b.build(Doc(rec, {"a": 1}, "azE=")),
        lambda: b.build_source(rec, {"a": 1}, "azE="),
        lambda: b.build_raw(rec, "orders", b'{"a":1}', "azE="),
    ):
        with pytest.raises(ActionError, match=r"the key is bytes \(KEY_FORMAT=bytes\)"):
            build()
    # a key a transform made of a field (ValueToKey, ExtractField$Key) is that field's
    assert b.build(Doc(rec, {"a": 1}, "order-7")).id == "order-7"
    # the flow's own naming keeps the base64 text
    assert builder(KEY_FORMAT="bytes").build_source(rec, {"a": 1}, "azE=").id == "azE="


def test_the_processor_dead_letters_a_refused_key_with_its_reason() -> None:
    s = Settings.load(
        {"KAFKA_TOPICS": "orders", "KEY_FORMAT": "json", "ERRORS_TOLERANCE": "all",
         "DLQ_TOPIC": "dead", **CONNECT}
    )  # fmt: skip
    batch = [
        Message(topic="orders", partition=0, offset=0, key=b"1.5", value=b'{"a":1}'),
        Message(topic="orders", partition=0, offset=1, key=b"7", value=b'{"a":1}'),
    ]
    out = Processor(s, [], 4)(batch)
    dead = [item for _p, item in out if isinstance(item, DeadLetter)]
    assert len(dead) == 1
    assert (dead[0].stage, dead[0].record.offset) == ("index", 0)
    assert dead[0].error_class == "sinks.actions.ActionError"
    assert dead[0].message.startswith("the key is a float (1.5): Kafka Connect's")
    written = [a for _p, item in out if not isinstance(item, DeadLetter) for a in item]
    assert [a.id for a in written] == ["7"]


def test_null_keys_fail_as_the_connector_and_keyless_tombstones_are_skipped() -> None:
    # key.ignore=false: a record without a key is the connector's DataException (a failed
    # record), but a tombstone without one is skipped under behavior.on.null.values=delete.
    s = Settings.load(
        {"KAFKA_TOPICS": "orders", "ON_NULL_KEY": "fail", "ON_NULL_VALUE": "delete",
         "ERRORS_TOLERANCE": "all", "DLQ_TOPIC": "dead", **CONNECT}
    )  # fmt: skip
    batch = [
        Message(topic="orders", partition=0, offset=0, key=None, value=None),
        Message(topic="orders", partition=0, offset=1, key=b"k1", value=None),
        Message(topic="orders", partition=0, offset=2, key=None, value=b'{"a":1}'),
    ]
    dropped = SKIPPED.labels("dropped")
    before = dropped._value.get()
    out = Processor(s, [], 4)(batch)
    assert dropped._value.get() - before == 1  # the keyless tombstone, counted as skipped
    dead = [item for _p, item in out if isinstance(item, DeadLetter)]
    assert [(d.record.offset, d.message) for d in dead] == [
        (2, "the record has no key (DOC_ID=key, ON_NULL_KEY=fail)")
    ]
    written = [a for _p, item in out if not isinstance(item, DeadLetter) for a in item]
    assert [(a.id, a.record.offset) for a in written] == [("k1", 1)]  # the keyed delete
    assert b'"delete"' in written[0].data
    # no dead-letter topic is needed: without one the failed record stops the flow
    Settings.load({"KAFKA_TOPICS": "orders", "ON_NULL_KEY": "fail"})
