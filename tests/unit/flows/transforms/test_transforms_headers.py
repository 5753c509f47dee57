"""The `header:` sources: insert_field from: header, id_from_field header:, route's
index_header and routing_header; one decoding rule (UTF-8, else base64) for all of them."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

from tests.support.transforms import config_error, make_doc, run_one

BINARY = b"\xff\xfe\x00bin"
HEADERS = (
    ("tenant", b"acme"),
    ("trace", "caf\u00e9 \u2603".encode()),
    ("bin", BINARY),
    ("empty", b""),
    ("null", None),
    ("twice", b"first"),
    ("twice", b"second"),
)


def insert(header: str, **extra: Any) -> dict[str, Any]:
    spec = {"type": "insert_field", "field": "meta.h", "from": "header", "header": header}
    doc = run_one({**spec, **extra}, make_doc({"a": 1}, headers=HEADERS))
    assert doc.source is not None
    return doc.source


# ------------------------------------------------------------------------------ insert_field


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("tenant", "acme"),
        ("trace", "caf\u00e9 \u2603"),
        ("bin", base64.b64encode(BINARY).decode()),  # not UTF-8: base64
        ("empty", ""),
        ("null", None),  # present with a null value
        ("twice", "second"),  # the last of a repeated name
    ],
)
def test_insert_field_from_a_header(header: str, value: Any) -> None:
    assert insert(header) == {"a": 1, "meta": {"h": value}}


def test_a_missing_header_leaves_the_field_out_unless_a_default_is_given() -> None:
    assert insert("absent") == {"a": 1}
    assert insert("absent", default="none") == {"a": 1, "meta": {"h": "none"}}
    assert insert("tenant", default="none") == {"a": 1, "meta": {"h": "acme"}}
    spec = {"type": "insert_field", "field": "h", "from": "header", "header": "x", "default": []}
    first = run_one(spec, make_doc({}))
    second = run_one(spec, make_doc({}))
    assert first.source is not None and second.source is not None
    assert first.source["h"] == [] and first.source["h"] is not second.source["h"]


def test_a_tombstone_passes_unchanged() -> None:
    spec = {"type": "insert_field", "field": "h", "from": "header", "header": "tenant"}
    assert run_one(spec, make_doc(None, headers=HEADERS)).source is None


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"from": "header"}, "transforms[0].header: required for type insert_field"),
        ({"from": "header", "header": ""}, "transforms[0].header: expected a non-empty string"),
        ({"value": 1, "header": "x"}, "transforms[0].header: only valid with from: header"),
        ({"value": 1, "default": 2}, "transforms[0].default: only valid with from: header"),
        ({"from": "topic", "header": "x"}, "transforms[0].header: only valid with from: header"),
        ({"from": "topic", "default": "x"}, "transforms[0].default: only valid with from: header"),
        ({"from": "header", "header": "x", "format": "iso"}, "only valid with from: timestamp"),
    ],
)
def test_insert_field_header_options_are_checked(extra: dict[str, Any], words: str) -> None:
    assert words in config_error([{"type": "insert_field", "field": "h", **extra}])


# ------------------------------------------------------------------------------ id_from_field


def test_id_from_a_header() -> None:
    doc = make_doc({"a": 1}, headers=HEADERS)
    assert run_one({"type": "id_from_field", "header": "tenant"}, doc).id == "acme"
    doc = make_doc(None, headers=HEADERS)  # a tombstone has headers too
    assert (
        run_one({"type": "id_from_field", "header": "bin"}, doc).id
        == base64.b64encode(BINARY).decode()
    )


@pytest.mark.parametrize(
    ("header", "what"), [("absent", "missing"), ("null", "null"), ("empty", "empty")]
)
def test_id_from_a_header_that_gives_none_raises(header: str, what: str) -> None:
    doc = make_doc({"a": 1}, headers=HEADERS)
    with pytest.raises(ValueError, match=re.escape(f"id_from_field: header {header} is {what}")):
        run_one({"type": "id_from_field", "header": header}, doc)


def test_id_from_field_takes_a_field_or_a_header() -> None:
    both = config_error([{"type": "id_from_field", "field": "a", "header": "b"}])
    assert "transforms[0].header: give either field or header, not both" in both
    neither = config_error([{"type": "id_from_field"}])
    assert "transforms[0].field: required for type id_from_field" in neither


# ------------------------------------------------------------------------------ route


def test_route_index_and_routing_from_headers() -> None:
    spec = {"type": "route", "index_header": "tenant", "routing_header": "trace"}
    doc = run_one(spec, make_doc({"a": 1}, headers=HEADERS))
    assert (doc.index, doc.routing) == ("acme", "caf\u00e9 \u2603")
    doc = run_one({"type": "route", "index_header": "tenant"}, make_doc({}, headers=HEADERS))
    assert (doc.index, doc.routing) == ("acme", None)
    spec = {"type": "route", "index": "logs", "routing_header": "bin"}
    doc = run_one(spec, make_doc({}, headers=HEADERS))
    assert (doc.index, doc.routing) == ("logs", base64.b64encode(BINARY).decode())


@pytest.mark.parametrize("key", ["index_header", "routing_header"])
def test_route_from_a_missing_header_raises(key: str) -> None:
    with pytest.raises(ValueError, match="route: header absent is missing"):
        run_one({"type": "route", key: "absent"}, make_doc({}, headers=HEADERS))


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (
            {"index": "x", "index_header": "h"},
            "index_header: give either index or index_header, not both",
        ),
        (
            {"topic_regex": "x", "replacement": "y", "index_header": "h"},
            "give either topic_regex or index_header",
        ),
        ({"routing_field": "a", "routing_header": "h"}, "either routing_field or routing_header"),
        ({"index_header": ""}, "transforms[0].index_header: expected a non-empty string"),
        ({"index_header": "h", "timestamp_field": "t"}, "timestamp_field: only valid with index"),
    ],
)
def test_route_header_options_are_checked(spec: dict[str, Any], words: str) -> None:
    assert words in config_error([{"type": "route", **spec}])
