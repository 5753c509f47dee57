"""`es-sink plugins`: the built-in transforms, converters and write methods with their
options, read from the registries the flow itself uses (what Kafka Connect's
`GET /connector-plugins` answers)."""

from __future__ import annotations

import importlib
from typing import Any

import typer
from rich.table import Table

from flows.cli import common


def catalogue() -> dict[str, list[dict[str, Any]]]:
    """Every plugin by kind: the stable `--json` shape."""
    from flows.decode import CONVERTERS
    from flows.transforms import BUILTINS
    from sinks.elasticsearch.write_methods import WRITE_METHODS

    return {
        "transforms": [
            {"name": b.name, "keys": sorted(b.keys), "doc": b.doc} for b in BUILTINS.values()
        ],
        "converters": [
            {
                "name": name,
                "needs_registry": c.needs_registry,
                "builder": c.builder,
                "doc": _builder_doc(c.builder),
            }
            for name, c in CONVERTERS.items()
        ],
        "write_methods": [
            {
                "name": m.name,
                "op": m.op,
                "doc": m.doc,
                "conflict_is_done": m.conflict_is_done,
                "needs_id": m.needs_id,
                "allows_external_version": m.allows_external_version,
                "allows_data_stream": m.allows_data_stream,
            }
            for m in WRITE_METHODS.values()
        ],
    }


def _builder_doc(builder: str) -> str:
    """The first line of the converter builder's docstring ("" when its optional
    dependencies are not installed)."""
    module, _, name = builder.partition(":")
    try:
        doc = getattr(importlib.import_module(module), name).__doc__ or ""
    except ImportError:
        return ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def plugins(
    json_out: bool = typer.Option(False, "--json", help="Print the catalogue as JSON."),
) -> None:
    """List the built-in transforms, converters and write methods."""
    found = catalogue()
    if json_out:
        common.emit_json(found)
        return
    transforms = Table("transform", "keys", "does", title="transforms", title_justify="left")
    for t in found["transforms"]:
        transforms.add_row(*map(common.cell, (t["name"], ", ".join(t["keys"]), t["doc"])))
    converters = Table("format", "registry", "decodes", title="converters", title_justify="left")
    for c in found["converters"]:
        converters.add_row(*map(common.cell, (c["name"], "yes" * c["needs_registry"], c["doc"])))
    methods = Table("write method", "bulk op", "does", title="write methods", title_justify="left")
    for m in found["write_methods"]:
        methods.add_row(*map(common.cell, (m["name"], m["op"], m["doc"])))
    for table in (transforms, converters, methods):
        common.out.print(table)
