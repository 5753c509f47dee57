"""One meaning of null across the built-ins (their dotted paths are sinks.model.FieldPath).

A field that holds null is there, with the value None; a missing field, or one under a null
or a non-object, is not there. What each built-in then does is its own documented rule.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.transforms import make_doc, run, run_one

NULL = {"a": {"b": None}, "n": None}  # a.b holds null; n.x is under a null


def _body() -> dict[str, Any]:
    return {"a": {"b": None}, "n": None}


@pytest.mark.parametrize(
    ("spec", "kept"),
    [
        ({"type": "filter", "field": "a.b", "op": "exists"}, False),  # null is there: dropped
        ({"type": "filter", "field": "n.x", "op": "exists"}, True),  # under a null: missing
        ({"type": "filter", "field": "a.b", "value": None}, False),  # eq null matches
        ({"type": "filter", "field": "n.x", "value": None}, True),  # a missing field never does
        ({"type": "filter", "field": "a.b", "op": "ne", "value": 1}, False),
        ({"type": "filter", "field": "n.x", "op": "ne", "value": 1}, True),
    ],
)
def test_filter_tells_null_from_missing(spec: dict[str, Any], kept: bool) -> None:
    assert len(run([spec], make_doc(_body()))) == int(kept)


def test_body_edits_treat_null_as_a_value_and_skip_what_is_under_it() -> None:
    out = run_one(
        {"type": "mask", "fields": ["a.b", "n.x"]}, make_doc(_body())
    )  # null is masked, n.x is missing
    assert out.source == {"a": {"b": "****"}, "n": None}
    out = run_one({"type": "rename", "fields": {"a.b": "c", "n.x": "d"}}, make_doc(_body()))
    assert out.source == {"a": {}, "n": None, "c": None}
    out = run_one({"type": "keep", "fields": ["a.b", "n.x"]}, make_doc(_body()))
    assert out.source == {"a": {"b": None}}
    out = run_one({"type": "drop", "fields": ["a.b", "n.x"]}, make_doc(_body()))
    assert out.source == {"a": {}, "n": None}
    out = run_one({"type": "timestamp_convert", "field": "a.b", "to": "iso"}, make_doc(_body()))
    assert out.source == NULL  # null: unchanged
    # Setting a path replaces a null on the way by an object.
    out = run_one({"type": "insert_field", "field": "n.x", "value": 1}, make_doc(_body()))
    assert out.source == {"a": {"b": None}, "n": {"x": 1}}


def test_fields_that_must_exist_accept_null_only_where_a_null_is_a_valid_value() -> None:
    assert run_one({"type": "key_from_field", "field": "a.b"}, make_doc(_body())).key is None
    with pytest.raises(ValueError, match=r"key_from_field: field n\.x is missing"):
        run([{"type": "key_from_field", "field": "n.x"}], make_doc(_body()))
    with pytest.raises(ValueError, match=r"id_from_field: field a\.b must be .*got None"):
        run([{"type": "id_from_field", "field": "a.b"}], make_doc(_body()))
    with pytest.raises(ValueError, match=r"route: field a\.b must be .*got None"):
        run([{"type": "route", "routing_field": "a.b"}], make_doc(_body()))
    with pytest.raises(ValueError, match=r"route: field n\.x is missing"):
        run([{"type": "route", "routing_field": "n.x"}], make_doc(_body()))
    with pytest.raises(ValueError, match=r"extract: field a\.b is a NoneType, not an object"):
        run([{"type": "extract", "field": "a.b"}], make_doc(_body()))
    with pytest.raises(ValueError, match=r"extract: field n\.x is missing"):
        run([{"type": "extract", "field": "n.x"}], make_doc(_body()))
