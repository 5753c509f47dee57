"""flows.transforms.action: the `action` built-in chooses one record's write (`Doc.action`)
from a field or a header; and the start-up checks of the actions it may choose."""

from __future__ import annotations

import json
import tempfile
from typing import Any

import pytest

from flows.config import Settings
from flows.errors import ConfigError
from tests.support.transforms import config_error, make_doc, run_one

CDC = {"type": "action", "field": "op", "map": {"c": "index", "u": "update", "d": "delete"}}


@pytest.mark.parametrize(("op", "action"), [("c", "index"), ("u", "update"), ("d", "delete")])
def test_a_mapped_field_value_chooses_the_action(op: str, action: str) -> None:
    assert run_one(CDC, make_doc({"op": op, "n": 1})).action == action


def test_an_action_name_needs_no_map() -> None:
    spec = {"type": "action", "field": "meta.how"}
    assert run_one(spec, make_doc({"meta": {"how": "create"}})).action == "create"
    with pytest.raises(ValueError, match=r"field n holds 7, not one of index, create, upsert"):
        run_one({**spec, "field": "n"}, make_doc({"n": 7}))


@pytest.mark.parametrize("source", [{"n": 1}, {"op": None}, None])
def test_missing_or_null_leaves_write_method_unless_a_default(source: Any) -> None:
    assert run_one(CDC, make_doc(source)).action is None
    assert run_one({**CDC, "default": "upsert"}, make_doc(source)).action == "upsert"


def test_an_unknown_value_is_an_error_or_the_default() -> None:
    with pytest.raises(ValueError, match=r"action: field op holds 'x', not one of c, u, d"):
        run_one(CDC, make_doc({"op": "x"}))
    assert run_one({**CDC, "default": "index"}, make_doc({"op": "x"})).action == "index"
    with pytest.raises(ValueError, match=r"holds \[1\]"):
        run_one(CDC, make_doc({"op": [1]}))


def test_integer_values_match_the_maps_keys_as_text() -> None:
    spec = {"type": "action", "field": "op", "map": {1: "delete"}}
    assert run_one(spec, make_doc({"op": 1})).action == "delete"


def test_a_header_chooses_the_action() -> None:
    spec = {"type": "action", "header": "x-op", "map": {"del": "delete"}}
    doc = make_doc({"n": 1}, headers=(("x-op", b"del"),))
    assert run_one(spec, doc).action == "delete"
    assert run_one(spec, make_doc({"n": 1})).action is None  # no such header
    with pytest.raises(ValueError, match="header x-op holds"):
        run_one(spec, make_doc({"n": 1}, headers=(("x-op", b"\xff"),)))  # base64 text


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"type": "action"}, "transforms[0].field: give exactly one of field or header"),
        (
            {"type": "action", "field": "a", "header": "h"},
            "transforms[0].header: give exactly one of field or header, not 2",
        ),
        (
            {"type": "action", "field": "a", "map": {"c": "merge"}},
            "transforms[0].map.c: expected one of index, create, upsert, update, script, delete",
        ),
        ({"type": "action", "field": "a", "map": []}, "transforms[0].map: expected a mapping"),
        ({"type": "action", "field": "a", "default": "x"}, "transforms[0].default: expected"),
    ],
)
def test_entry_errors(spec: dict[str, Any], message: str) -> None:
    assert config_error([spec]).startswith(message)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DOC_ID": "none"}, "transforms[0] (action): action delete needs document ids"),
        ({"ES_DATA_STREAM": "true"}, "transforms[0] (action): action delete is refused by data"),
        ({"VERSION": "offset"}, "transforms[0] (action): action update carries no external"),
    ],
)
def test_actions_the_configuration_cannot_write_are_refused_at_start(
    env: dict[str, str], message: str
) -> None:
    entry = {**CDC, "map": {"c": "index", "u": "update", "d": "delete"}}
    if "DOC_ID" in env:
        entry["map"] = {"d": "delete"}
    with pytest.raises(ConfigError) as e:
        load(entry, **env)
    assert str(e.value).startswith(message)


def test_a_script_action_needs_a_script() -> None:
    entry = {"type": "action", "field": "op", "map": {"s": "script"}}
    with pytest.raises(ConfigError, match=r"action script needs ES_SCRIPT_ID or ES_SCRIPT_SOURCE"):
        load(entry)
    assert load(entry, ES_SCRIPT_ID="x").es_script_id == "x"


def load(entry: dict[str, Any], **env: str) -> Settings:
    """Settings with `transforms: [entry]` in a YAML file, and `env`."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        json.dump({"transforms": [entry]}, f)  # JSON is YAML
        f.flush()
        return Settings.load({"KAFKA_TOPICS": "t", "ES_SINK_CONFIG": f.name, **env})
