"""`es-sink plugins` lists what the flow's own registries hold, nothing else."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from flows.cli import app
from flows.decode import CONVERTERS
from flows.transforms import BUILTINS
from sinks.elasticsearch.write_methods import WRITE_METHODS


def test_the_catalogue_is_the_registries() -> None:
    result = CliRunner().invoke(app, ["plugins", "--json"])
    assert result.exit_code == 0
    found = json.loads(result.stdout)
    assert [t["name"] for t in found["transforms"]] == list(BUILTINS)
    assert [c["name"] for c in found["converters"]] == list(CONVERTERS)
    assert [m["name"] for m in found["write_methods"]] == list(WRITE_METHODS)
    route = next(t for t in found["transforms"] if t["name"] == "route")
    assert route["keys"] == sorted(BUILTINS["route"].keys)
    avro = next(c for c in found["converters"] if c["name"] == "avro")
    assert avro["needs_registry"] is True
    upsert = next(m for m in found["write_methods"] if m["name"] == "upsert")
    assert upsert["op"] == "update" and upsert["needs_id"] is True
    assert all(c["doc"] for c in found["converters"] if not c["needs_registry"])


def test_the_tables_name_every_plugin() -> None:
    result = CliRunner().invoke(app, ["plugins"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for name in [*BUILTINS, *CONVERTERS, *WRITE_METHODS]:
        assert name in result.stdout


def test_an_unknown_subcommand_is_bad_usage() -> None:
    assert CliRunner().invoke(app, ["nope"]).exit_code == 2


def test_every_converter_says_what_it_does() -> None:
    found = json.loads(CliRunner().invoke(app, ["plugins", "--json"]).stdout)
    for c in found["converters"]:
        assert c["doc"] and "docstring" not in c["doc"], c
