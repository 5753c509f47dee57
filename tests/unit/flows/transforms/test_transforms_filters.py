"""flows.transforms.filters: filter."""

from __future__ import annotations

from typing import Any

import pytest

from flows.record import Doc
from flows.transforms import apply_transforms, build_transforms
from tests.support.transforms import (
    make_doc,
    run,
)

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
