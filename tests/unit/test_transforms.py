"""flows.transforms: the transform contract, every built-in, and configuration errors."""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from flows.errors import ConfigError
from flows.naming import IndexTemplate
from flows.record import Doc, Record
from flows.transforms import Transform, apply_transforms, build_transforms

# `sample_transforms` sits next to this file; import it by whatever name pytest gave us.
_PACKAGE = __name__.rpartition(".")[0]
SAMPLE = f"{_PACKAGE}.sample_transforms" if _PACKAGE else "sample_transforms"
if not _PACKAGE and str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))
sample = importlib.import_module(SAMPLE)

TS = 1_714_564_800_123  # 2024-05-01T12:00:00.123Z


def make_doc(
    source: dict[str, Any] | None = None,
    *,
    topic: str = "orders",
    timestamp: int | None = TS,
    key: Any = "k1",
    headers: tuple[tuple[str, bytes | None], ...] = (),
    index: str | None = None,
    id: str | None = None,
) -> Doc:
    value = None if source is None else b"{...}"
    record = Record(topic, 3, 42, timestamp, b"k1", value, headers)
    return Doc(record=record, source=source, key=key, index=index, id=id)


def run(specs: list[dict[str, Any]], doc: Doc) -> list[Doc]:
    return apply_transforms(build_transforms(specs), doc)


def run_one(spec: dict[str, Any], doc: Doc) -> Doc:
    out = run([spec], doc)
    assert len(out) == 1
    return out[0]


def config_error(specs: list[Any]) -> str:
    with pytest.raises(ConfigError) as info:
        build_transforms(specs)
    return str(info.value)


# ------------------------------------------------------------------------- apply_transforms


def test_empty_chain_returns_the_doc_itself() -> None:
    doc = make_doc({"a": 1})
    out = apply_transforms([], doc)
    assert out == [doc]
    assert out[0] is doc
    assert build_transforms([]) == []


def test_plain_function_works_without_configuration() -> None:
    def my_transform(doc: Doc) -> Doc | list[Doc] | None:
        assert doc.source is not None
        doc.source["seen"] = True
        doc.id = "custom"
        return doc

    chain: list[Transform] = [*build_transforms([{"type": "drop", "fields": ["a"]}]), my_transform]
    [out] = apply_transforms(chain, make_doc({"a": 1, "b": 2}))
    assert out.source == {"b": 2, "seen": True}
    assert out.id == "custom"


def recorder(seen: list[Doc]) -> Transform:
    def remember(doc: Doc) -> Doc:
        seen.append(doc)
        return doc

    return remember


def test_a_new_doc_with_the_same_record_replaces_the_old_one() -> None:
    doc = make_doc({"a": 1})
    replaced = Doc(record=doc.record, source={"new": True})
    seen: list[Doc] = []
    out = apply_transforms([lambda d: replaced, recorder(seen)], doc)
    assert out == [replaced]
    assert seen[0] is replaced


@pytest.mark.parametrize("result", [None, []])
def test_none_or_empty_list_drops_and_stops_the_chain(result: Any) -> None:
    later: list[Doc] = []
    out = apply_transforms([lambda d: result, recorder(later)], make_doc({}))
    assert out == []
    assert later == []


def test_fan_out_runs_later_transforms_on_every_doc() -> None:
    doc = make_doc({"id": "o1", "n": 1})
    out = run(
        [
            {"python": f"{SAMPLE}:fan_out"},
            {"type": "insert_field", "field": "tagged", "value": "yes"},
        ],
        doc,
    )
    assert [d.id for d in out] == ["o1-0", "o1-1"]
    assert [d.source for d in out] == [
        {"id": "o1", "n": 1, "part": 0, "tagged": "yes"},
        {"id": "o1", "n": 1, "part": 1, "tagged": "yes"},
    ]
    assert all(d.record is doc.record for d in out)
    assert out[0].source is not out[1].source


def test_fan_out_uses_the_id_set_by_an_earlier_transform_and_later_filters_apply() -> None:
    out = run(
        [
            {"type": "id_from_field", "field": "order.no"},
            {"python": f"{SAMPLE}:fan_out"},
            {"type": "filter", "field": "part", "op": "eq", "value": 0},
        ],
        make_doc({"order": {"no": 77}}),
    )
    assert [d.id for d in out] == ["77-1"]


def test_nested_fan_out_multiplies() -> None:
    out = run([{"python": f"{SAMPLE}:fan_out"}] * 2, make_doc({"id": "x"}))
    assert [d.id for d in out] == ["x-0-0", "x-0-1", "x-1-0", "x-1-1"]


def test_fan_out_as_last_transform_returns_a_fresh_list() -> None:
    produced: list[Doc] = []

    def fan(doc: Doc) -> list[Doc]:
        produced[:] = [doc, Doc(record=doc.record, source={})]
        return produced

    out = apply_transforms([fan], make_doc({}))
    assert out == produced
    assert out is not produced


def test_bad_return_type_raises_type_error_naming_the_transform() -> None:
    with pytest.raises(TypeError, match=r"sample_transforms\.bad_return returned str"):
        run([{"python": f"{SAMPLE}:bad_return"}], make_doc({}))


def test_list_with_a_non_doc_raises_type_error() -> None:
    with pytest.raises(
        TypeError, match=r"sample_transforms\.bad_list returned a list holding dict"
    ):
        run([{"python": f"{SAMPLE}:bad_list"}], make_doc({}))


def test_bad_return_of_a_lambda_is_named() -> None:
    with pytest.raises(TypeError, match="<lambda> returned int"):
        apply_transforms([cast(Transform, lambda d: 1)], make_doc({}))


def test_doc_with_another_record_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"new_record returned a Doc with a different record"):
        run([{"python": f"{SAMPLE}:new_record"}], make_doc({}))
    doc = make_doc({})
    with pytest.raises(ValueError, match="different record"):
        apply_transforms([lambda d: [d, make_doc({})]], doc)


def test_same_doc_twice_in_a_fan_out_is_rejected() -> None:
    with pytest.raises(ValueError, match="same Doc object twice"):
        apply_transforms([lambda d: [d, d]], make_doc({}))


def test_exceptions_propagate_unchanged() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        run([{"python": f"{SAMPLE}:boom"}], make_doc({}))


def test_builtin_errors_name_the_entry() -> None:
    chain = build_transforms(
        [{"type": "drop", "fields": ["a"]}, {"type": "rename", "fields": {"a": "b"}}]
    )
    names = [getattr(t, "__qualname__", "") for t in chain]
    assert names == ["transforms[0] (drop)", "transforms[1] (rename)"]


def test_record_is_never_modified_by_builtins() -> None:
    doc = make_doc(
        {"id": 5, "ts": "2024-01-02T00:00:00Z", "user": {"name": "n", "pw": "x"}, "k": "key"},
        headers=(("h", b"v"),),
    )
    before = dataclasses.astuple(doc.record)
    record = doc.record
    out = run(
        [
            {"type": "insert_field", "field": "meta.topic", "from": "topic"},
            {"type": "rename", "fields": {"user.name": "name"}},
            {"type": "mask", "fields": ["user.pw"]},
            {"type": "timestamp_convert", "field": "ts", "to": "epoch_ms"},
            {"type": "key_from_field", "field": "k"},
            {"type": "id_from_field", "field": "id"},
            {"type": "route", "index": "logs-{yyyy.MM.dd}", "timestamp_field": "ts"},
            {"type": "filter", "header": "absent"},
            {"type": "drop", "fields": ["k"]},
            {"type": "keep", "fields": ["meta", "name", "user", "ts", "id"]},
        ],
        doc,
    )
    assert len(out) == 1
    assert out[0].record is record
    assert dataclasses.astuple(record) == before
    assert out[0].source == {
        "id": 5,
        "ts": 1_704_153_600_000,
        "user": {"pw": "****"},
        "name": "n",
        "meta": {"topic": "orders"},
    }
    assert (out[0].key, out[0].id, out[0].index) == ("key", "5", "logs-2024.01.02")


def test_nothing_is_compiled_or_imported_per_record(monkeypatch: pytest.MonkeyPatch) -> None:
    chain = build_transforms(
        [
            {"python": f"{SAMPLE}:modify"},
            {"type": "filter", "topic": "ord.*", "negate": True},
            {"type": "filter", "field": "msg", "op": "regex", "value": "hello.*"},
            {"type": "route", "topic_regex": r"(\w+)", "replacement": "idx-$1"},
            {"type": "route", "index": "logs-{yyyy.MM.dd}", "routing_field": "user"},
        ]
    )

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("called per record")

    monkeypatch.setattr(re, "compile", forbidden)
    monkeypatch.setattr(importlib, "import_module", forbidden)
    monkeypatch.setattr(IndexTemplate, "__init__", forbidden)
    for _ in range(3):
        [out] = apply_transforms(chain, make_doc({"msg": "bye", "user": "u1"}))
        assert out.index == "logs-2024.05.01"
        assert out.routing == "u1"


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


# ------------------------------------------------------------------------- key / id


def test_key_from_field_sets_any_value() -> None:
    out = run_one({"type": "key_from_field", "field": "k.v"}, make_doc({"k": {"v": {"x": 1}}}))
    assert out.key == {"x": 1}
    assert out.record.key == b"k1"


@pytest.mark.parametrize(("value", "expected"), [("abc", "abc"), (42, "42")])
def test_id_from_field(value: Any, expected: str) -> None:
    assert (
        run_one({"type": "id_from_field", "field": "a.id"}, make_doc({"a": {"id": value}})).id
        == expected
    )


@pytest.mark.parametrize("value", [True, 1.5, None, "", {"x": 1}, [1]])
def test_id_from_field_rejects_non_scalar_ids(value: Any) -> None:
    with pytest.raises(ValueError, match="must be a non-empty string or an integer"):
        run_one({"type": "id_from_field", "field": "id"}, make_doc({"id": value}))


@pytest.mark.parametrize("kind", ["key_from_field", "id_from_field"])
def test_missing_key_or_id_field_raises(kind: str) -> None:
    with pytest.raises(ValueError, match=rf"{kind}: field a\.b is missing$"):
        run_one({"type": kind, "field": "a.b"}, make_doc({"a": {}}))
    with pytest.raises(ValueError, match="tombstone"):
        run_one({"type": kind, "field": "a.b"}, make_doc(None))


# ------------------------------------------------------------------------- timestamp_convert


@pytest.mark.parametrize(
    ("value", "options", "expected"),
    [
        (TS, {"to": "iso"}, "2024-05-01T12:00:00.123Z"),
        (TS, {"to": "epoch_s"}, 1_714_564_800),
        (TS, {"to": "epoch_ms"}, TS),
        (1_714_564_800, {"to": "iso", "unit": "s"}, "2024-05-01T12:00:00.000Z"),
        (1_714_564_800.5, {"to": "epoch_ms", "unit": "s"}, 1_714_564_800_500),
        (1_714_564_800_123.6, {"to": "epoch_ms"}, 1_714_564_800_124),
        (-1, {"to": "iso"}, "1969-12-31T23:59:59.999Z"),
        ("2024-05-01T12:00:00.123Z", {"to": "epoch_ms"}, TS),
        ("2024-05-01T14:00:00.123+02:00", {"to": "epoch_ms"}, TS),
        ("2024-05-01T12:00:00.123999", {"to": "epoch_ms"}, TS),  # naive = UTC, truncated
        ("2024-05-01T14:00:00+02:00", {"to": "iso"}, "2024-05-01T12:00:00.000Z"),
        ("2024-05-01", {"to": "epoch_s"}, 1_714_521_600),
        ("20240501T120000Z", {"to": "epoch_s"}, 1_714_564_800),
        ("01/05/2024 12:00", {"to": "epoch_ms", "from_format": "%d/%m/%Y %H:%M"}, TS - 123),
        (
            "01/05/2024 14:00 +0200",
            {"to": "iso", "from_format": "%d/%m/%Y %H:%M %z"},
            "2024-05-01T12:00:00.000Z",
        ),
    ],
)
def test_timestamp_convert(value: Any, options: dict[str, Any], expected: Any) -> None:
    out = run_one(
        {"type": "timestamp_convert", "field": "e.ts", **options}, make_doc({"e": {"ts": value}})
    )
    assert out.source == {"e": {"ts": expected}}
    assert type(out.source["e"]["ts"]) is type(expected)


@pytest.mark.parametrize(
    ("value", "options"),
    [
        ("yesterday", {}),
        ("2024-13-01", {}),
        ("1714564800123", {}),  # digits in a string are not an epoch
        ("2024-05-01", {"from_format": "%d/%m/%Y"}),
        (True, {}),
        ({"x": 1}, {}),
        (float("nan"), {}),
        (10**20, {}),  # out of datetime range
    ],
)
def test_timestamp_convert_rejects_unparsable(value: Any, options: dict[str, Any]) -> None:
    spec = {"type": "timestamp_convert", "field": "ts", "to": "iso", **options}
    with pytest.raises(ValueError, match=r"^timestamp_convert: field ts: "):
        run_one(spec, make_doc({"ts": value}))


@pytest.mark.parametrize("source", [{}, {"ts": None}, {"e": "str"}, None])
def test_timestamp_convert_skips_missing_or_null(source: dict[str, Any] | None) -> None:
    out = run_one({"type": "timestamp_convert", "field": "ts", "to": "iso"}, make_doc(source))
    assert out.source == source


# ------------------------------------------------------------------------- filter


def kept(spec: dict[str, Any], doc: Doc) -> bool:
    out = run([{"type": "filter", **spec}], doc)
    assert out in ([], [doc])
    return bool(out)


def test_filter_topic_is_a_full_match() -> None:
    spec = {"topic": "orders|logs-.*"}
    assert not kept(spec, make_doc({}, topic="orders"))
    assert not kept(spec, make_doc({}, topic="logs-eu"))
    assert kept(spec, make_doc({}, topic="orders-eu"))
    assert kept({**spec, "negate": True}, make_doc({}, topic="orders"))
    assert not kept({**spec, "negate": True}, make_doc({}, topic="orders-eu"))


def test_filter_topic_cache_keeps_results_per_topic() -> None:
    chain = build_transforms([{"type": "filter", "topic": "a"}])
    for _ in range(2):
        assert apply_transforms(chain, make_doc({}, topic="a")) == []
        assert len(apply_transforms(chain, make_doc({}, topic="b"))) == 1


def test_filter_header_present() -> None:
    assert not kept({"header": "skip"}, make_doc({}, headers=(("x", b"1"), ("skip", None))))
    assert kept({"header": "skip"}, make_doc({}, headers=(("x", b"1"),)))
    assert not kept({"header": "skip", "negate": True}, make_doc({}))


def test_filter_tombstones() -> None:
    assert not kept({"tombstone": True}, make_doc(None))
    assert kept({"tombstone": True}, make_doc({"a": 1}))
    assert kept({"tombstone": True, "negate": True}, make_doc(None))
    assert not kept({"tombstone": True, "negate": True}, make_doc({"a": 1}))


@pytest.mark.parametrize(
    ("op", "value", "field", "matches"),
    [
        ("eq", "a", "a", True),
        ("eq", 1, 1.0, True),
        ("eq", "1", 1, False),
        ("eq", None, None, True),
        ("ne", "a", "b", True),
        ("ne", "a", "a", False),
        ("gt", 5, 6, True),
        ("gt", 5, 5, False),
        ("gt", 5, "6", False),  # not comparable: no match, no error
        ("ge", 5, 5, True),
        ("lt", 5, 4.5, True),
        ("lt", "m", "a", True),
        ("le", 5, 6, False),
        ("in", ["a", "b"], "b", True),
        ("in", ["a", "b"], "c", False),
        ("in", ["a"], {"x": 1}, False),  # unhashable field value
        ("in", [{"x": 1}, 2], {"x": 1}, True),  # unhashable choices
        ("regex", "err.*", "error", True),
        ("regex", "err", "error", False),  # full match
        ("regex", "5", 5, False),  # only strings match a regex
        ("exists", None, None, True),
    ],
)
def test_filter_field_ops(op: str, value: Any, field: Any, matches: bool) -> None:
    spec: dict[str, Any] = {"field": "a.b", "op": op}
    if op != "exists":
        spec["value"] = value
    doc = make_doc({"a": {"b": field}})
    assert kept(spec, doc) is not matches
    assert kept({**spec, "negate": True}, make_doc({"a": {"b": field}})) is matches


@pytest.mark.parametrize(
    ("op", "value"),
    [
        ("eq", 1),
        ("ne", 1),
        ("gt", 1),
        ("ge", 1),
        ("lt", 1),
        ("le", 1),
        ("in", [1]),
        ("regex", ".*"),
        ("exists", None),
    ],
)
@pytest.mark.parametrize("source", [{}, {"a": "not-object"}, None])
def test_filter_missing_field_never_matches(
    op: str, value: Any, source: dict[str, Any] | None
) -> None:
    spec: dict[str, Any] = {"field": "a.b", "op": op}
    if op != "exists":
        spec["value"] = value
    assert kept(spec, make_doc(source))
    assert not kept({**spec, "negate": True}, make_doc(source))


def test_filter_op_defaults_to_eq() -> None:
    assert not kept({"field": "level", "value": "debug"}, make_doc({"level": "debug"}))
    assert kept({"field": "level", "value": "debug"}, make_doc({"level": "info"}))


# ------------------------------------------------------------------------- route


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("logs-{yyyy.MM.dd}", "logs-2024.05.01"),
        ("{topic}-{yyyy.MM}", "orders-2024.05"),
        ("static-index", "static-index"),
    ],
)
def test_route_index_from_record_timestamp(template: str, expected: str) -> None:
    assert run_one({"type": "route", "index": template}, make_doc({})).index == expected


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        (1_700_000_000_000, "logs-2023.11.14"),
        ("2023-01-02T03:04:05Z", "logs-2023.01.02"),
        ("2023-01-02T01:00:00+02:00", "logs-2023.01.01"),  # dates are UTC
        ("2023-01-02", "logs-2023.01.02"),
    ],
)
def test_route_index_from_timestamp_field(ts: Any, expected: str) -> None:
    spec = {"type": "route", "index": "logs-{yyyy.MM.dd}", "timestamp_field": "event.ts"}
    assert run_one(spec, make_doc({"event": {"ts": ts}})).index == expected


@pytest.mark.parametrize(("source", "message"), [({}, "missing"), ({"ts": "soon"}, "cannot parse")])
def test_route_timestamp_field_missing_or_bad_raises(source: dict[str, Any], message: str) -> None:
    spec = {"type": "route", "index": "logs-{yyyy}", "timestamp_field": "ts"}
    with pytest.raises(ValueError, match=message):
        run_one(spec, make_doc(source))


@pytest.mark.parametrize(
    ("replacement", "expected"),
    [
        ("idx-$2-$1", "idx-orders-app"),
        (r"idx-\2-\1", "idx-orders-app"),
        ("idx-${svc}", "idx-orders"),
        (r"idx-\g<svc>", "idx-orders"),
        ("$$-$1", "$-app"),
    ],
)
def test_route_topic_regex(replacement: str, expected: str) -> None:
    spec = {"type": "route", "topic_regex": r"(\w+)\.(?P<svc>\w+)", "replacement": replacement}
    assert run_one(spec, make_doc({}, topic="app.orders")).index == expected


def test_route_topic_regex_needs_a_full_match() -> None:
    spec = {"type": "route", "topic_regex": r"app\.(\w+)", "replacement": "idx-$1"}
    chain = build_transforms([spec])
    for topic in ("other.orders", "app.orders.eu"):
        [out] = apply_transforms(chain, make_doc({}, topic=topic, index="keep-me"))
        assert out.index == "keep-me"
    [out] = apply_transforms(chain, make_doc({}, topic="app.orders"))
    assert out.index == "idx-orders"


def test_route_routing_field() -> None:
    out = run_one(
        {"type": "route", "index": "i-{yyyy}", "routing_field": "tenant.id"},
        make_doc({"tenant": {"id": 7}}),
    )
    assert (out.index, out.routing) == ("i-2024", "7")
    out = run_one({"type": "route", "routing_field": "t"}, make_doc({"t": "abc"}, index="pre"))
    assert (out.index, out.routing) == ("pre", "abc")
    with pytest.raises(ValueError, match=r"route: field t is missing"):
        run_one({"type": "route", "routing_field": "t"}, make_doc({}))


# ------------------------------------------------------------------------- python


def test_python_transforms() -> None:
    out = run(
        [
            {"python": f"{SAMPLE}:modify"},
            {"type": "python", "python": f"{SAMPLE}:set_index_and_routing"},
        ],
        make_doc({"user": "u1"}, topic="t1"),
    )
    assert out[0].source == {"user": "u1", "modified": True}
    assert (out[0].index, out[0].routing) == ("custom-t1", "u1")
    assert run([{"python": f"{SAMPLE}:drop_everything"}], make_doc({})) == []


def test_python_factory_is_called_once_with_config() -> None:
    chain = build_transforms(
        [{"python": f"{SAMPLE}:make_tagger", "config": {"tag": "blue", "field": "color"}}]
    )
    assert len(chain) == 1
    for _ in range(2):
        [out] = apply_transforms(chain, make_doc({}))
        assert out.source == {"color": "blue"}


def test_python_entries_from_the_transforms_environment_variable() -> None:
    from flows.config import Settings

    settings = Settings.load(
        {"KAFKA_TOPICS": "t", "TRANSFORMS": f"{SAMPLE}:modify,{SAMPLE}:fan_out"}
    )
    out = apply_transforms(build_transforms(settings.transforms), make_doc({"id": "a"}))
    assert [(d.id, d.source and d.source["modified"]) for d in out] == [
        ("a-0", True),
        ("a-1", True),
    ]


# ------------------------------------------------------------------------- configuration errors


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("drop", "transforms[0]: expected a mapping"),
        ({"fields": ["a"]}, "transforms[0]: each entry needs a `type:` or a `python:` key"),
        ({"type": "renam"}, "transforms[0].type: unknown transform type 'renam'"),
        ({"type": 3}, "transforms[0].type: unknown transform type 3"),
        ({"type": "rename", "feilds": {}}, "transforms[0].feilds: unknown key for type rename"),
        ({"type": "rename"}, "transforms[0].fields: required for type rename"),
        ({"type": "rename", "fields": ["a"]}, "transforms[0].fields: expected a non-empty map"),
        (
            {"type": "rename", "fields": {"a": "b..c"}},
            "transforms[0].fields.a: expected a dotted field path",
        ),
        ({"type": "drop", "fields": []}, "transforms[0].fields: expected a non-empty list"),
        ({"type": "drop", "fields": "a"}, "transforms[0].fields: expected a non-empty list"),
        (
            {"type": "keep", "fields": ["a", ".b"]},
            "transforms[0].fields: expected a dotted field path",
        ),
        (
            {"type": "mask", "fields": ["a"], "replacement": {}},
            "transforms[0].replacement: expected a string",
        ),
        (
            {"type": "insert_field", "value": 1},
            "transforms[0].field: required for type insert_field",
        ),
        (
            {"type": "insert_field", "field": "a"},
            "transforms[0].value: give exactly one of value or from",
        ),
        (
            {"type": "insert_field", "field": "a", "value": 1, "from": "topic"},
            "transforms[0].from: give exactly one of value or from, not 2",
        ),
        (
            {"type": "insert_field", "field": "a", "from": "headers"},
            "transforms[0].from: expected one of topic",
        ),
        (
            {"type": "insert_field", "field": "a", "from": "topic", "format": "iso"},
            "transforms[0].format: only valid with from: timestamp",
        ),
        (
            {"type": "insert_field", "field": "a", "value": 1, "format": "iso"},
            "transforms[0].format: only valid with from: timestamp",
        ),
        ({"type": "extract", "field": ""}, "transforms[0].field: expected a dotted field path"),
        ({"type": "id_from_field"}, "transforms[0].field: required for type id_from_field"),
        (
            {"type": "timestamp_convert", "field": "t"},
            "transforms[0].to: required for type timestamp_convert",
        ),
        (
            {"type": "timestamp_convert", "field": "t", "to": "date"},
            "transforms[0].to: expected one of iso",
        ),
        (
            {"type": "timestamp_convert", "field": "t", "to": "iso", "unit": "us"},
            "transforms[0].unit: expected",
        ),
        (
            {"type": "filter"},
            "transforms[0].topic: give exactly one of topic or header or tombstone or field",
        ),
        ({"type": "filter", "topic": "a", "header": "b"}, "transforms[0].header: give exactly one"),
        ({"type": "filter", "topic": "a", "op": "eq"}, "transforms[0].op: only valid with field:"),
        ({"type": "filter", "topic": "(a"}, "transforms[0].topic: invalid regular expression"),
        ({"type": "filter", "tombstone": False}, "transforms[0].tombstone: must be true"),
        (
            {"type": "filter", "header": "h", "negate": "yes"},
            "transforms[0].negate: expected true or false",
        ),
        (
            {"type": "filter", "field": "a", "op": "like", "value": 1},
            "transforms[0].op: expected one of eq",
        ),
        ({"type": "filter", "field": "a", "op": "gt"}, "transforms[0].value: required for op: gt"),
        (
            {"type": "filter", "field": "a", "op": "gt", "value": [1]},
            "transforms[0].value: expected a number",
        ),
        (
            {"type": "filter", "field": "a", "op": "exists", "value": 1},
            "transforms[0].value: not used",
        ),
        (
            {"type": "filter", "field": "a", "op": "in", "value": "ab"},
            "transforms[0].value: expected a list",
        ),
        (
            {"type": "filter", "field": "a", "op": "regex", "value": "("},
            "transforms[0].value: invalid regular",
        ),
        ({"type": "route"}, "transforms[0].index: required for type route"),
        (
            {"type": "route", "index": "a", "topic_regex": "b"},
            "transforms[0].topic_regex: give either",
        ),
        (
            {"type": "route", "index": "logs-{date}"},
            "transforms[0].index: unknown placeholder {date}",
        ),
        (
            {"type": "route", "index": "logs", "timestamp_field": "ts"},
            "transforms[0].timestamp_field: the index",
        ),
        (
            {"type": "route", "topic_regex": "a"},
            "transforms[0].replacement: required for type route",
        ),
        (
            {"type": "route", "index": "a", "replacement": "b"},
            "transforms[0].replacement: only valid with",
        ),
        (
            {"type": "route", "topic_regex": "(a)", "replacement": "$2"},
            "transforms[0].replacement: invalid",
        ),
        (
            {"type": "route", "topic_regex": "(a)", "replacement": r"\g<x>"},
            "transforms[0].replacement: invalid",
        ),
        ({"python": "nocolon"}, "transforms[0].python: cannot import 'nocolon'"),
        (
            {"python": "no_such_module_xyz:f"},
            "transforms[0].python: cannot import 'no_such_module_xyz:f'",
        ),
        (
            {"python": f"{SAMPLE}:missing"},
            f"transforms[0].python: cannot import '{SAMPLE}:missing'",
        ),
        ({"python": f"{SAMPLE}:NOT_CALLABLE"}, "transforms[0].python: cannot import"),
        (
            {"python": f"{SAMPLE}:modify", "confg": {}},
            "transforms[0].confg: unknown key for type python",
        ),
        (
            {"python": f"{SAMPLE}:make_tagger", "config": [1]},
            "transforms[0].config: expected a map",
        ),
        ({"python": f"{SAMPLE}:make_tagger", "config": {"x": 1}}, "transforms[0].config: "),
        ({"python": f"{SAMPLE}:failing_factory", "config": {"a": 1}}, "transforms[0].config: "),
        ({"python": f"{SAMPLE}:not_a_factory", "config": {}}, "transforms[0].config: "),
    ],
)
def test_config_errors_name_the_entry(entry: Any, message: str) -> None:
    assert config_error([entry]).startswith(message)


def test_config_error_details() -> None:
    assert "did you mean 'fields'" in config_error([{"type": "drop", "feilds": ["a"]}])
    assert "is not callable" in config_error([{"python": f"{SAMPLE}:NOT_CALLABLE"}])
    assert "ModuleNotFoundError" in config_error([{"python": "no_such_module_xyz:f"}])
    assert "ValueError: bad config ['a']" in config_error(
        [{"python": f"{SAMPLE}:failing_factory", "config": {"a": 1}}]
    )
    assert "returned int, not a transform" in config_error(
        [{"python": f"{SAMPLE}:not_a_factory", "config": {}}]
    )


def test_config_error_names_the_failing_position() -> None:
    message = config_error(
        [{"type": "drop", "fields": ["a"]}, {"type": "keep", "fields": ["a"]}, {"type": "rename"}]
    )
    assert message == "transforms[2].fields: required for type rename"


def test_specs_must_be_a_list() -> None:
    assert config_error("a:b").startswith("transforms: expected a list")  # type: ignore[arg-type]
