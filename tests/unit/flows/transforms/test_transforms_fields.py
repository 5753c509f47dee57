"""flows.transforms.fields: insert_field, rename, drop, keep, mask, extract."""

from __future__ import annotations

import re
from typing import Any

import pytest

from flows.transforms import apply_transforms, build_transforms
from tests.support.transforms import (
    TS,
    make_doc,
    run,
    run_one,
)

# ------------------------------------------------------------------------- insert_field


def test_insert_static_value_top_level_and_nested() -> None:
    out = run(
        [
            {"type": "insert_field", "field": "env", "value": "prod"},
            {"type": "insert_field", "field": "meta.source.name", "value": 7},
            {"type": "insert_field", "field": "meta.flag", "value": None},
        ],
        make_doc({"a": 1, "meta": {"x": 1}}),
    )
    assert out[0].source == {
        "a": 1,
        "env": "prod",
        "meta": {"x": 1, "source": {"name": 7}, "flag": None},
    }


def test_insert_static_object_is_copied_per_record() -> None:
    chain = build_transforms([{"type": "insert_field", "field": "tags", "value": {"list": [1]}}])
    [first] = apply_transforms(chain, make_doc({}))
    assert first.source is not None
    first.source["tags"]["list"].append(2)
    [second] = apply_transforms(chain, make_doc({}))
    assert second.source == {"tags": {"list": [1]}}


@pytest.mark.parametrize(
    ("origin", "extra", "expected"),
    [
        ("topic", {}, "orders"),
        ("partition", {}, 3),
        ("offset", {}, 42),
        ("timestamp", {}, TS),
        ("timestamp", {"format": "epoch_ms"}, TS),
        ("timestamp", {"format": "iso"}, "2024-05-01T12:00:00.123Z"),
        ("key", {}, "k1"),
    ],
)
def test_insert_from_record(origin: str, extra: dict[str, Any], expected: Any) -> None:
    out = run_one({"type": "insert_field", "field": "m.v", "from": origin, **extra}, make_doc({}))
    assert out.source == {"m": {"v": expected}}


def test_insert_timestamp_when_record_has_none() -> None:
    spec = {"type": "insert_field", "field": "ts", "from": "timestamp", "format": "iso"}
    assert run_one(spec, make_doc({}, timestamp=None)).source == {"ts": None}


def test_insert_key_uses_the_key_set_by_an_earlier_transform() -> None:
    out = run(
        [
            {"type": "key_from_field", "field": "user"},
            {"type": "insert_field", "field": "k", "from": "key"},
        ],
        make_doc({"user": "u9"}),
    )
    assert out[0].source == {"user": "u9", "k": "u9"}


def test_insert_into_a_non_object_raises() -> None:
    with pytest.raises(ValueError, match=r"cannot set a\.b: a holds str"):
        run_one({"type": "insert_field", "field": "a.b", "value": 1}, make_doc({"a": "text"}))


def test_insert_leaves_a_tombstone_alone() -> None:
    out = run_one({"type": "insert_field", "field": "a", "value": 1}, make_doc(None))
    assert out.source is None


# ------------------------------------------------------------------------- rename / drop / keep


def test_rename_top_level_nested_and_missing() -> None:
    out = run_one(
        {
            "type": "rename",
            "fields": {"a": "alpha", "user.name": "name", "b": "x.y.b", "missing": "m", "p.q": "r"},
        },
        make_doc({"a": 1, "b": 2, "user": {"name": "n", "age": 3}, "p": "not-object"}),
    )
    assert out.source == {
        "alpha": 1,
        "x": {"y": {"b": 2}},
        "user": {"age": 3},
        "name": "n",
        "p": "not-object",
    }


def test_rename_keeps_null_values() -> None:
    out = run_one({"type": "rename", "fields": {"a": "b"}}, make_doc({"a": None}))
    assert out.source == {"b": None}


def test_drop_fields() -> None:
    out = run_one(
        {"type": "drop", "fields": ["a", "u.secret", "missing", "u.deeper.x", "s.x"]},
        make_doc({"a": 1, "b": 2, "u": {"secret": 1, "name": "n"}, "s": "str"}),
    )
    assert out.source == {"b": 2, "u": {"name": "n"}, "s": "str"}


def test_keep_fields_keeps_nested_structure() -> None:
    src = {
        "a": 1,
        "b": 2,
        "u": {"name": "n", "pw": "x", "addr": {"city": "c", "zip": "z"}},
        "v": {"other": 1},
        "w": "scalar",
    }
    out = run_one(
        {"type": "keep", "fields": ["a", "u.name", "u.addr.city", "v.missing", "w.x", "nope"]},
        make_doc(src),
    )
    assert out.source == {"a": 1, "u": {"name": "n", "addr": {"city": "c"}}}


def test_keep_shorter_path_wins() -> None:
    src = {"u": {"name": "n", "pw": "x"}, "z": 1}
    for fields in (["u", "u.name"], ["u.name", "u"]):
        out = run_one({"type": "keep", "fields": fields}, make_doc(dict(src)))
        assert out.source == {"u": {"name": "n", "pw": "x"}}


# ------------------------------------------------------------------------- mask / extract


def test_mask_replaces_present_values_of_any_type() -> None:
    out = run_one(
        {"type": "mask", "fields": ["pw", "card", "u.ssn", "u.missing", "absent", "n"]},
        make_doc({"pw": "secret", "card": {"no": 1}, "u": {"ssn": 123}, "n": None, "ok": 1}),
    )
    assert out.source == {"pw": "****", "card": "****", "u": {"ssn": "****"}, "n": "****", "ok": 1}


def test_mask_custom_replacement() -> None:
    out = run_one({"type": "mask", "fields": ["pw"], "replacement": 0}, make_doc({"pw": "s"}))
    assert out.source == {"pw": 0}


def test_extract_makes_the_nested_object_the_document() -> None:
    out = run_one(
        {"type": "extract", "field": "payload.after"}, make_doc({"payload": {"after": {"id": 1}}})
    )
    assert out.source == {"id": 1}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"payload": {}}, "payload.after is missing"),
        ({"payload": {"after": None}}, "payload.after is a NoneType, not an object"),
        ({"payload": {"after": [1]}}, "payload.after is a list, not an object"),
        ({"payload": "x"}, "payload.after is missing"),
    ],
)
def test_extract_missing_or_not_an_object_raises(source: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        run_one({"type": "extract", "field": "payload.after"}, make_doc(source))


def test_extract_passes_a_tombstone() -> None:
    assert run_one({"type": "extract", "field": "a"}, make_doc(None)).source is None
