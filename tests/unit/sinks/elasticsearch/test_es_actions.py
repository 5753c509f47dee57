"""sinks.elasticsearch.actions: index, id, version and routing derivation, and the NDJSON
bytes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from flows.config import Settings
from sinks.elasticsearch.actions import ActionBuilder, ActionError
from sinks.model import Action, Doc, Record

TOPIC = "orders"
TS = 1_714_564_800_123  # 2024-05-01T12:00:00.123Z


def builder(**env: str) -> ActionBuilder:
    return ActionBuilder(Settings.load({"KAFKA_TOPICS": TOPIC, **env}).es_documents)


def record(
    *,
    topic: str = TOPIC,
    partition: int = 3,
    offset: int = 42,
    timestamp: int | None = TS,
    key: bytes | None = b"k1",
    headers: tuple[tuple[str, bytes | None], ...] = (),
) -> Record:
    return Record(topic, partition, offset, timestamp, key, b"{...}", headers)


def doc(
    source: dict[str, Any] | None = None,
    *,
    key: Any = "k1",
    rec: Record | None = None,
    **fields: Any,
) -> Doc:
    if source is None and not fields.get("delete"):
        source = {"a": 1}
    return Doc(record=rec or record(), source=source, key=key, **fields)


def lines(action: Action) -> list[Any]:
    assert action.data.endswith(b"\n")
    return [orjson.loads(line) for line in action.data.split(b"\n")[:-1]]


def build(d: Doc, **env: str) -> tuple[Action, list[Any]]:
    action = builder(**env).build(d)
    assert action.record is d.record
    return action, lines(action)


# ---------------------------------------------------------------------------------- ids


def test_default_index_action_exact_bytes() -> None:
    action, parsed = build(doc({"a": 1, "b": "x"}))
    assert parsed == [{"index": {"_index": "orders", "_id": "k1"}}, {"a": 1, "b": "x"}]
    assert action.id == "k1"
    assert action.data == b'{"index":{"_index":"orders","_id":"k1"}}\n{"a":1,"b":"x"}\n'


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("k-ü", "k-ü"),
        (7, "7"),
        (1.5, "1.5"),
        (True, "true"),
        ({"b": 1, "a": [1, "x"]}, '{"b":1,"a":[1,"x"]}'),
        ([1, 2], "[1,2]"),
        (b"raw", "raw"),
        ("None", "None"),
    ],
)
def test_id_from_key(key: Any, expected: str) -> None:
    action, parsed = build(doc(key=key))
    assert parsed[0]["index"]["_id"] == expected
    assert action.id == expected


def test_null_key_falls_back_to_coordinates() -> None:
    action, parsed = build(doc(key=None, rec=record(key=None, partition=2, offset=99)))
    assert parsed[0]["index"]["_id"] == "orders-2-99"
    assert action.id == "orders-2-99"
    assert "None" not in action.data.decode()


def test_null_key_with_on_null_key_dlq_is_an_action_error() -> None:
    with pytest.raises(ActionError, match="no key"):
        builder(ON_NULL_KEY="dlq", DLQ_TOPIC="dead").build(doc(key=None))


def test_id_from_nested_field() -> None:
    action, parsed = build(doc({"user": {"id": 12, "n": "x"}}), DOC_ID="field:user.id")
    assert parsed[0]["index"]["_id"] == "12"
    assert action.id == "12"
    assert parsed[1] == {"user": {"id": 12, "n": "x"}}


def test_id_from_string_field_keeps_the_string() -> None:
    _, parsed = build(doc({"id": "abc"}), DOC_ID="field:id")
    assert parsed[0]["index"]["_id"] == "abc"


@pytest.mark.parametrize(
    "source", [{"user": {}}, {"user": {"id": None}}, {"user": "flat"}, {"other": 1}]
)
def test_missing_id_field_is_an_action_error(source: dict[str, Any]) -> None:
    with pytest.raises(ActionError, match=r"user\.id"):
        builder(DOC_ID="field:user.id").build(doc(source))


def test_id_from_coordinates_ignores_the_key() -> None:
    action, parsed = build(doc(key="k1", rec=record(offset=5)), DOC_ID="coordinates")
    assert parsed[0]["index"]["_id"] == "orders-3-5"
    assert action.id == "orders-3-5"


def test_doc_id_none_has_no_id_in_the_action_line() -> None:
    action, parsed = build(doc(), DOC_ID="none")
    assert parsed[0] == {"index": {"_index": "orders"}}
    assert action.id is None
    assert b"_id" not in action.data


def test_id_set_by_a_transform_wins() -> None:
    for env in ({}, {"DOC_ID": "coordinates"}, {"DOC_ID": "field:missing"}, {"DOC_ID": "none"}):
        action, parsed = build(doc(key=None, id="custom"), **env)
        assert parsed[0]["index"]["_id"] == "custom"
        assert action.id == "custom"


def test_id_longer_than_512_bytes_is_an_action_error() -> None:
    with pytest.raises(ActionError):
        builder().build(doc(key="é" * 257))  # 514 bytes


def test_id_of_exactly_512_bytes_is_accepted() -> None:
    action, parsed = build(doc(key="é" * 256))  # 512 bytes
    assert parsed[0]["index"]["_id"] == "é" * 256
    assert action.id == "é" * 256


@pytest.mark.parametrize("env", [{}, {"DOC_ID": "field:a"}])
def test_long_id_refused_from_a_field_or_a_transform(env: dict[str, str]) -> None:
    with pytest.raises(ActionError, match="512 bytes"):
        builder(**env).build(doc({"a": "x" * 513}, key="x" * 513))
    with pytest.raises(ActionError, match="512 bytes"):
        builder(**env).build(doc(id="x" * 513))


@pytest.mark.parametrize("env", [{}, {"DOC_ID": "field:a"}])
def test_empty_id_is_an_action_error(env: dict[str, str]) -> None:
    with pytest.raises(ActionError):
        builder(**env).build(doc({"a": ""}, key=""))
    with pytest.raises(ActionError):
        builder(**env).build(doc(id=""))


@pytest.mark.parametrize(("value", "expected"), [(7, "7"), (1.5, "1.5"), (b"raw", "raw")])
def test_non_string_id_set_by_a_transform_becomes_a_string(value: Any, expected: str) -> None:
    action, parsed = build(doc(id=value))
    assert parsed[0]["index"]["_id"] == expected
    assert action.id == expected


# -------------------------------------------------------------------------------- index


def test_index_template_with_topic_and_date() -> None:
    b = builder(ES_INDEX="logs-{topic}-{yyyy.MM.dd}")
    assert lines(b.build(doc()))[0]["index"]["_index"] == "logs-orders-2024.05.01"
    late = record(topic="pay", timestamp=1_714_521_599_999)  # 2024-04-30T23:59:59.999Z
    assert lines(b.build(doc(rec=late)))[0]["index"]["_index"] == "logs-pay-2024.04.30"
    early = record(topic="pay", timestamp=1_714_521_600_000)  # 2024-05-01T00:00:00.000Z
    assert lines(b.build(doc(rec=early)))[0]["index"]["_index"] == "logs-pay-2024.05.01"


def test_index_template_hour_and_two_digit_year() -> None:
    b = builder(ES_INDEX="h-{yy}{MM}{dd}-{HH}")
    assert lines(b.build(doc()))[0]["index"]["_index"] == "h-240501-12"


def test_index_map_per_topic() -> None:
    b = builder(ES_INDEX="all-{topic}", ES_INDEX_MAP="orders:orders-v2,pay:pay-{yyyy.MM}")
    assert lines(b.build(doc()))[0]["index"]["_index"] == "orders-v2"
    pay = doc(rec=record(topic="pay"))
    assert lines(b.build(pay))[0]["index"]["_index"] == "pay-2024.05"
    other = doc(rec=record(topic="other"))
    assert lines(b.build(other))[0]["index"]["_index"] == "all-other"
    assert b.index_for(record(topic="pay")) == "pay-2024.05"


def test_index_set_by_a_transform_wins() -> None:
    _, parsed = build(doc(index="custom-index"), ES_INDEX="x-{topic}")
    assert parsed[0]["index"]["_index"] == "custom-index"


# ------------------------------------------------------------------------ write methods


def test_create() -> None:
    _, parsed = build(doc({"a": 1}), WRITE_METHOD="create")
    assert parsed == [{"create": {"_index": "orders", "_id": "k1"}}, {"a": 1}]


def test_upsert() -> None:
    _, parsed = build(doc({"a": 1}), WRITE_METHOD="upsert")
    assert parsed == [
        {"update": {"_index": "orders", "_id": "k1", "retry_on_conflict": 3}},
        {"doc": {"a": 1}, "doc_as_upsert": True},
    ]


def test_upsert_retry_on_conflict_is_a_setting() -> None:
    _, parsed = build(doc({"a": 1}), WRITE_METHOD="upsert", ES_RETRY_ON_CONFLICT="0")
    assert parsed[0] == {"update": {"_index": "orders", "_id": "k1"}}
    _, parsed = build(doc({"a": 1}), WRITE_METHOD="upsert", ES_RETRY_ON_CONFLICT="7")
    assert parsed[0]["update"]["retry_on_conflict"] == 7


def test_delete_for_tombstone() -> None:
    action, parsed = build(doc(None, delete=True))
    assert parsed == [{"delete": {"_index": "orders", "_id": "k1"}}]
    assert action.id == "k1"


def test_delete_has_no_pipeline_but_keeps_version_and_routing() -> None:
    _, parsed = build(
        doc(None, delete=True, rec=record(offset=8)),
        ES_PIPELINE="p",
        VERSION="offset",
        ES_ROUTING="key",
    )
    assert parsed == [
        {
            "delete": {
                "_index": "orders",
                "_id": "k1",
                "routing": "k1",
                "version": 8,
                "version_type": "external",
            }
        }
    ]


def test_delete_without_id_is_an_action_error() -> None:
    with pytest.raises(ActionError, match="delete needs a document id"):
        builder(DOC_ID="none").build(doc(None, delete=True))


def test_no_source_and_not_a_delete_is_an_action_error() -> None:
    d = Doc(record=record(), source=None, key="k1")
    with pytest.raises(ActionError, match="no source"):
        builder().build(d)


# ---------------------------------------------------------------------------- versions


def test_version_offset() -> None:
    _, parsed = build(doc(rec=record(offset=1234)), VERSION="offset")
    assert parsed[0] == {
        "index": {"_index": "orders", "_id": "k1", "version": 1234, "version_type": "external"}
    }


def test_version_from_header_uses_the_last_value() -> None:
    rec = record(headers=(("v", b"5"), ("other", b"x"), ("v", b"17")))
    _, parsed = build(doc(rec=rec), VERSION="header:v")
    assert parsed[0]["index"]["version"] == 17
    assert parsed[0]["index"]["version_type"] == "external"


def test_version_header_zero_is_valid() -> None:
    _, parsed = build(doc(rec=record(headers=(("v", b"0"),))), VERSION="header:v")
    assert parsed[0]["index"]["version"] == 0


@pytest.mark.parametrize(
    "headers",
    [(), (("v", None),), (("v", b"abc"),), (("v", b"-1"),), (("v", b""),), (("v", b"1.5"),)],
)
def test_bad_version_header_is_an_action_error(headers: tuple[Any, ...]) -> None:
    with pytest.raises(ActionError, match="header v"):
        builder(VERSION="header:v").build(doc(rec=record(headers=headers)))


@pytest.mark.parametrize("value", [b"18446744073709551616", b"9223372036854775808"])
def test_version_header_beyond_a_long_is_an_action_error(value: bytes) -> None:
    with pytest.raises(ActionError):
        builder(VERSION="header:v").build(doc(rec=record(headers=(("v", value),))))


@pytest.mark.parametrize(("value", "expected"), [(b"0", 0), (b"9223372036854775807", 2**63 - 1)])
def test_version_header_bounds_are_accepted(value: bytes, expected: int) -> None:
    _, parsed = build(doc(rec=record(headers=(("v", value),))), VERSION="header:v")
    assert parsed[0]["index"]["version"] == expected
    assert parsed[0]["index"]["version_type"] == "external"


# ------------------------------------------------------------------- routing, pipeline


def test_routing_from_key() -> None:
    _, parsed = build(doc(key=99), ES_ROUTING="key")
    assert parsed[0]["index"]["routing"] == "99"


def test_routing_from_key_absent_when_key_is_null() -> None:
    _, parsed = build(doc(key=None), ES_ROUTING="key")
    assert "routing" not in parsed[0]["index"]


def test_routing_from_field() -> None:
    _, parsed = build(doc({"user": {"org": "acme"}}), ES_ROUTING="field:user.org")
    assert parsed[0]["index"]["routing"] == "acme"
    _, parsed = build(doc({"user": {}}), ES_ROUTING="field:user.org")
    assert "routing" not in parsed[0]["index"]


@pytest.mark.parametrize("source", [{"user": {"org": None}}, {"user": None}, {"user": []}, None])
def test_routing_from_a_field_missing_or_null_sends_no_routing(source: Any) -> None:
    """The one null rule (sinks.model.FieldPath) as ES_ROUTING reads it: a null value and a
    missing path both mean no routing (the document goes to the shard of its id)."""
    d = doc(source) if source is not None else doc(None, delete=True)
    _, parsed = build(d, ES_ROUTING="field:user.org")
    assert "routing" not in parsed[0][next(iter(parsed[0]))]


def test_timestamp_field_null_is_missing_for_a_data_stream() -> None:
    with pytest.raises(ActionError, match=r"timestamp field event\.at is missing"):
        b = builder(ES_DATA_STREAM="true", ES_TIMESTAMP_FIELD="event.at")
        b.build(doc({"event": {"at": None}}))


def test_routing_set_by_a_transform_wins() -> None:
    _, parsed = build(doc({"user": {"org": "acme"}}, routing="r9"), ES_ROUTING="field:user.org")
    assert parsed[0]["index"]["routing"] == "r9"


def test_no_routing_by_default() -> None:
    _, parsed = build(doc())
    assert set(parsed[0]["index"]) == {"_index", "_id"}


def test_pipeline() -> None:
    _, parsed = build(doc(), ES_PIPELINE="enrich")
    assert parsed[0] == {"index": {"_index": "orders", "_id": "k1", "pipeline": "enrich"}}


# -------------------------------------------------------------------------- data streams


def test_data_stream_timestamp_from_record() -> None:
    _, parsed = build(doc({"a": 1}), ES_DATA_STREAM="true")
    assert parsed == [{"create": {"_index": "orders", "_id": "k1"}}, {"a": 1, "@timestamp": TS}]


def test_data_stream_timestamp_from_field() -> None:
    source = {"event": {"at": "2024-01-02T03:04:05Z"}}
    _, parsed = build(doc(source), ES_DATA_STREAM="true", ES_TIMESTAMP_FIELD="event.at")
    assert parsed[1]["@timestamp"] == "2024-01-02T03:04:05Z"


def test_data_stream_keeps_an_existing_timestamp() -> None:
    _, parsed = build(doc({"@timestamp": 5}), ES_DATA_STREAM="true")
    assert parsed[1] == {"@timestamp": 5}


def test_data_stream_missing_timestamp_field_is_an_action_error() -> None:
    with pytest.raises(ActionError, match=r"event\.at"):
        builder(ES_DATA_STREAM="true", ES_TIMESTAMP_FIELD="event.at").build(doc({"a": 1}))


def test_data_stream_without_record_timestamp_is_an_action_error() -> None:
    with pytest.raises(ActionError, match="timestamp"):
        builder(ES_DATA_STREAM="true").build(doc(rec=record(timestamp=None)))


# ------------------------------------------------------------------------ serialization


@pytest.mark.parametrize("source", [{"a": object()}, {"a": {1, 2}}, {1: "int key"}, {"big": 2**70}])
def test_non_json_source_is_an_action_error(source: dict[Any, Any]) -> None:
    with pytest.raises(ActionError, match="not JSON-serializable"):
        builder().build(doc(source))


def test_unicode_and_nested_source_round_trip() -> None:
    source = {"name": "Zoë ☃", "n": [1, 2.5, None, True], "deep": {"x": {"y": "z"}}}
    _, parsed = build(doc(source))
    assert parsed[1] == source


def test_action_errors_keep_the_class_name_dead_letters_publish() -> None:
    """`__connect.errors.exception.class.name` of an index-stage dead letter is public."""
    import pickle

    from sinks.model import DeadLetter

    err = ActionError("bad")
    dl = DeadLetter.from_exception(record(), "index", err)
    assert dl.error_class == "sinks.actions.ActionError"
    assert type(pickle.loads(pickle.dumps(err))) is ActionError


# ------------------------------------------------- build_source (no transforms, no Doc)

_CONFIGS = [
    {},
    {"DOC_ID": "coordinates"},
    {"DOC_ID": "none"},
    {"DOC_ID": "field:user.id"},
    {"ON_NULL_KEY": "dlq", "DLQ_TOPIC": "dead"},
    {"ES_INDEX": "logs-{topic}-{yyyy.MM.dd}"},
    {"ES_INDEX": "{topic}"},  # the topic "Bad" makes an invalid index name
    {"WRITE_METHOD": "create"},
    {"WRITE_METHOD": "upsert"},
    {"ES_ROUTING": "key"},
    {"VERSION": "offset"},
    {"ES_PIPELINE": "p1"},
]


class _Str(str):
    pass


def _deep(depth: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"x": 1}
    for _ in range(depth):
        doc = {"d": doc}
    return doc


_INPUTS = [
    ({"a": 1, "user": {"id": 7}}, "k1"),
    ({"a": "x"}, None),  # null key
    ({"user": {"id": None}}, 12),  # a key that is not a string; a null id field
    ({"a": 1}, ""),  # empty id
    ({"a": 1}, "é" * 300),  # 600 bytes of UTF-8: too long
    ({"a": {1, 2}}, "k1"),  # not JSON-serializable (as a Python value could be)
    (None, "k1"),  # no source
    ({"a": 1}, "k" * 128),  # the longest id the shortcut takes
    ({"a": 1}, "k" * 513),  # too long, all ASCII
    ({"a": 1}, "\ud800"),  # a lone surrogate orjson cannot encode
    ({"a": "\ud800"}, "\ud800"),  # both fail: the source's error, as in `build`
    (_deep(300), "k1"),  # deeper than orjson encodes: the json fallback
    ({"a": 1}, _Str("k1")),  # a str subclass: the long way, same result
]


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        action = fn(*args)
    except ActionError as e:
        return type(e), str(e)
    return action.id, action.data, action.record


@pytest.mark.parametrize("env", _CONFIGS, ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()))
def test_build_source_is_build_of_a_doc(env: dict[str, str]) -> None:
    """The processor's no-transform path (no Doc made) gives exactly what `build` gives:
    the same bytes, the same record, the same error."""
    b = builder(**env)
    for rec in (record(), record(topic="Bad"), record(timestamp=None)):
        for source, key in _INPUTS:
            expected = _outcome(b.build, Doc(rec, source, key))
            assert _outcome(b.build_source, rec, source, key) == expected, (rec, source, key)
