"""flows.transforms.entry: configuration errors name transforms[i]."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.transforms import (
    SAMPLE,
    config_error,
)

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
