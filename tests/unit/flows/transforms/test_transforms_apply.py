"""flows.transforms: the transform contract (apply_transforms) and compiling once."""

from __future__ import annotations

import dataclasses
import importlib
import re
from typing import Any, cast

import pytest

from flows.record import Doc
from flows.transforms import Transform, apply_transforms, build_transforms
from sinks.elasticsearch.index_names import IndexName
from tests.support.transforms import (
    SAMPLE,
    make_doc,
    run,
)

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
    monkeypatch.setattr(IndexName, "__init__", forbidden)
    for _ in range(3):
        [out] = apply_transforms(chain, make_doc({"msg": "bye", "user": "u1"}))
        assert out.index == "logs-2024.05.01"
        assert out.routing == "u1"


def test_apply_transforms_compiles_a_chain_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Callers run one chain on many Docs: the chain is compiled the first time only, and a
    callable that cannot be hashed still runs (compiled on each call)."""
    import flows.transforms as package

    compiled: list[object] = []
    compile_once = package.compile_transforms

    def counted(transforms: Any) -> Any:
        compiled.append(transforms)
        return compile_once(transforms)

    monkeypatch.setattr(package, "compile_transforms", counted)

    def tag(doc: Doc) -> Doc:
        assert doc.source is not None
        doc.source["t"] = 1
        return doc

    chain = [tag]
    for _ in range(3):
        [out] = apply_transforms(chain, make_doc({}))
        assert out.source == {"t": 1}
    assert len(compiled) == 1

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, doc: Doc) -> Doc:
            return doc

    assert len(apply_transforms([Unhashable()], make_doc({}))) == 1
