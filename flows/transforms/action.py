"""The `action` built-in: choose how one record is written (`Doc.action`), from a field or a
header, e.g. an `op` field of `c`/`u`/`d` mapped to index/update/delete."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flows.record import Doc
from flows.transforms.entry import Entry, short
from flows.transforms.headers import header_text
from flows.transforms.registry import Transform, builtin
from sinks.elasticsearch.write_methods import ACTIONS
from sinks.model import MISSING


@builtin(
    "action",
    keys=("field", "header", "map", "default"),
    doc="""field: <path> or header: <name> (its text) names the action of this record alone:
    index, create, update, upsert, script or delete (else WRITE_METHOD applies); map: {value:
    action} translates the values first (`{c: index, u: update, d: delete}`); default: the
    action when the value is missing, null or unmapped (without it: missing or null leaves
    WRITE_METHOD, an unknown value is a ValueError).""",
)
def action(e: Entry) -> Transform:
    source = e.exactly_one(("field", "header"))
    choices = ", ".join(ACTIONS)
    raw_map = e.raw.get("map")
    mapping: dict[str, str] | None = None
    if raw_map is not None:
        if not isinstance(raw_map, dict) or not raw_map:
            e.reject(".map", f"expected a mapping of values to actions, got {raw_map!r}")
        mapping = {}
        for value, target in raw_map.items():
            if target not in ACTIONS:
                e.reject(f".map.{value}", f"expected one of {choices}, got {target!r}")
            mapping[str(value)] = target
    default = e.text("default")
    if default is not None and default not in ACTIONS:
        e.reject(".default", f"expected one of {choices}, got {default!r}")
    known = mapping if mapping is not None else {a: a for a in ACTIONS}
    read = _reader(e, source)
    where = f"{source} {e.raw[source]}"

    def choose(doc: Doc) -> Doc:
        value = read(doc)
        if value is MISSING or value is None:
            if default is not None:
                doc.action = default
            return doc
        text = value if type(value) is str else str(value) if type(value) is int else None
        chosen = None if text is None else known.get(text)
        if chosen is None:
            if default is None:
                msg = f"action: {where} holds {short(value)}, not one of {', '.join(known)}"
                raise ValueError(msg)
            chosen = default
        doc.action = chosen
        return doc

    return choose


def _reader(e: Entry, source: str) -> Callable[[Doc], Any]:
    if source == "header":
        name = e.req_text("header")
        return lambda doc: header_text(doc, name)
    path = e.path("field")
    return lambda doc: path.get(doc.source)
