"""sinks.model: the one dotted-path walker (one meaning of null) and the exchanged values."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, Message

from sinks.model import (
    MISSING,
    Action,
    Actions,
    DeadLetter,
    Doc,
    FieldPath,
    Record,
    record_of,
)

REC = Record("orders", 3, 42, 1_714_564_800_123, b"k", b"{}", (("h", b"1"),))


# ------------------------------------------------------------------- the meaning of null


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"a": {"b": 1}}, 1),
        ({"a": {"b": None}}, None),  # a null is a value: the path exists
        ({"a": {"b": {}}}, {}),
        ({"a": {"b": False}}, False),
        ({"a": {"b": 0}}, 0),
        ({"a": {}}, MISSING),  # an absent key
        ({"a": None}, MISSING),  # a null on the way is no object: the path is missing
        ({"a": [{"b": 1}]}, MISSING),  # paths never index into lists
        ({"a": 5}, MISSING),
        ({}, MISSING),
        (None, MISSING),  # a tombstone has no body
        ({"a.b": 1}, MISSING),  # a dotted key cannot be addressed
    ],
)
def test_get_tells_a_null_from_a_missing_path(source: Any, expected: Any) -> None:
    got = FieldPath("a.b").get(source)
    assert got == expected
    assert (got is MISSING) == (expected is MISSING)
    assert (got is None) == (expected is None)


def test_one_key_path() -> None:
    assert FieldPath("a").get({"a": None}) is None
    assert FieldPath("a").get({"b": 1}) is MISSING
    assert FieldPath("a").get(["a"]) is MISSING


def test_parent_and_pop_follow_the_same_rule() -> None:
    src: dict[str, Any] = {"a": {"b": None, "c": 1}, "n": None}
    assert FieldPath("a.b").parent(src) is src["a"]
    assert FieldPath("n.x").parent(src) is None
    assert FieldPath("n.x").pop(src) is MISSING
    assert FieldPath("a.b").pop(src) is None  # popped a null value
    assert src == {"a": {"c": 1}, "n": None}
    assert FieldPath("a.b").pop(src) is MISSING
    assert FieldPath("x.y").pop(None) is MISSING


def test_set_creates_objects_and_replaces_a_null_on_the_way() -> None:
    src: dict[str, Any] = {"n": None}
    FieldPath("n.x.y").set(src, 1)
    FieldPath("new.z").set(src, None)
    assert src == {"n": {"x": {"y": 1}}, "new": {"z": None}}
    assert FieldPath("new.z").get(src) is None
    with pytest.raises(ValueError, match=r"cannot set n\.x\.y\.w: y holds int, not an object"):
        FieldPath("n.x.y.w").set(src, 2)
    with pytest.raises(ValueError, match=r"cannot set l\.a: l holds list"):
        FieldPath("l.a").set({"l": []}, 2)


@pytest.mark.parametrize("bad", ["", ".", "a.", ".a", "a..b"])
def test_empty_segments_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="dotted path"):
        FieldPath(bad)


def test_paths_compare_print_and_pickle() -> None:
    p = FieldPath("a.b")
    assert p == FieldPath("a.b") and hash(p) == hash(FieldPath("a.b"))
    assert p != FieldPath("a") and p != "a.b"
    assert str(p) == "a.b" and repr(p) == "FieldPath('a.b')"
    assert (p.head, p.last, p.keys) == (("a",), "b", ("a", "b"))
    assert pickle.loads(pickle.dumps(p)) == p
    assert pickle.loads(pickle.dumps(MISSING)) is MISSING
    assert repr(MISSING) == "MISSING"


# ------------------------------------------------------------------ the exchanged values


def test_record_names() -> None:
    assert REC.coordinates == "orders-3-42"
    assert REC.where == "orders/3@42"
    assert REC.header("h") == b"1"
    assert Record("t", 0, 0, None, None, None, (("h", b"1"), ("h", b"2"))).header("h") == b"2"
    assert REC.header("none") is None


def test_exchanged_values_pickle() -> None:
    """Bytewax pickles what moves between processes: each value comes back equal, and is
    pickled by its own `__reduce__` (cheaper than the default: see `Action.__reduce__`)."""
    action = Action("id", b'{"index":{}}\n{}\n', REC)
    dead = DeadLetter.from_exception(REC, "index", ValueError("bad"))
    values = [
        REC,
        Record("t", 0, 0, None, None, None),
        action,
        Action(None, b"", REC),
        dead,
        DeadLetter(REC, "deserialize", "DecodeError", "bad", "Traceback ..."),
    ]
    for value in values:
        assert type(value).__reduce__ is not object.__reduce__, type(value)
        copy = pickle.loads(pickle.dumps(value))
        assert copy == value and type(copy) is type(value), value
    assert dead.error_class == "builtins.ValueError"
    assert dead.stacktrace is None
    doc = Doc(REC, {"a": 1})
    assert (doc.key, doc.index, doc.id, doc.routing, doc.delete, doc.meta) == (
        None, None, None, None, False, {},
    )  # fmt: skip


def test_a_chunk_of_actions_pickles_as_columns() -> None:
    """The item that crosses the exchange comes back as equal actions and records, in
    order, still an `Actions`; the actions of one record (a fan-out) share one `Record`
    object again, as the sink counts a record's failures by it (one dead letter each)."""
    other = Record("t", 0, 7, None, None, None)
    same_offset = Record("u", 0, 7, None, b"k", b"v")  # another topic: another record
    chunk = Actions(
        [
            Action("a", b"1\n", REC),
            Action("b", b"2\n", REC),
            Action(None, b"3\n", other),
            Action("c", b"", same_offset),
            Action("d", b"4\n", REC),
        ]
    )
    copy = pickle.loads(pickle.dumps(chunk))
    assert type(copy) is Actions and copy == chunk
    assert [type(a) for a in copy] == [Action] * 5
    assert copy[0].record is copy[1].record
    assert len({id(a.record) for a in copy}) == 4
    assert copy[0].record.headers == (("h", b"1"),) and copy[2].record.value is None
    assert pickle.loads(pickle.dumps(Actions())) == []


def _message(offset: int, headers: list[tuple[str, bytes]] | None, ts: int | None) -> Message:
    stamp = (TIMESTAMP_CREATE_TIME, ts) if ts is not None else (TIMESTAMP_NOT_AVAILABLE, 0)
    return Message(topic="orders", partition=3, offset=offset, key=b"k%d" % offset,
                   value=b"v%d" % offset, headers=headers, timestamp=stamp)  # fmt: skip


@pytest.mark.parametrize("mixed", [False, True], ids=["messages", "messages-and-records"])
def test_actions_that_kept_their_message_pickle_as_records(mixed: bool) -> None:
    """An action whose origin is the consumed message (`flows.process`' common case)
    crosses the exchange as the same columns and comes back with its `Record`; a
    chunk may hold both kinds (a record off the common case)."""
    messages = [_message(0, [("h", b"1")], 5), _message(1, None, None), _message(2, [], 7)]
    origins: list[Any] = list(messages)
    if mixed:
        origins[1] = record_of(messages[1])
    chunk = Actions(Action(f"k{i}", b"%d\n" % i, o) for i, o in enumerate(origins))
    want = [
        ("k0", b"0\n", Record("orders", 3, 0, 5, b"k0", b"v0", (("h", b"1"),))),
        ("k1", b"1\n", Record("orders", 3, 1, None, b"k1", b"v1", ())),
        ("k2", b"2\n", Record("orders", 3, 2, 7, b"k2", b"v2", ())),
    ]
    assert [(a.id, a.data, a.record) for a in chunk] == want
    copy = pickle.loads(pickle.dumps(chunk))
    assert type(copy) is Actions
    assert [(a.id, a.data, a.origin) for a in copy] == want
    alone = pickle.loads(pickle.dumps(chunk[0]))
    assert (alone.id, alone.data, alone.origin) == want[0]


def test_flows_record_reexports_the_model() -> None:
    import flows.record

    assert flows.record.Doc is Doc
    assert flows.record.Record is Record
    assert flows.record.DeadLetter is DeadLetter


def test_get_with_a_default_folds_missing_only() -> None:
    p = FieldPath("a.b")
    assert p.get({"a": {}}, None) is None
    assert p.get({"a": None}, "d") == "d"
    assert p.get({"a": {"b": None}}, "d") is None  # a null is still a value
    assert p.get({"a": {"b": 0}}, None) == 0
