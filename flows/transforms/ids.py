"""Built-ins that copy a field into the key or the document id: key_from_field, id_from_field.

`required_field` and `id_string` are also what route's routing_field uses: a missing field
(a tombstone has no body, so every field is missing) raises, and an id or routing value is
a non-empty string or an integer.
"""

from __future__ import annotations

from typing import Any

from flows.record import Doc
from flows.transforms.entry import Entry, short
from flows.transforms.headers import required_header
from flows.transforms.registry import Transform, builtin
from sinks.model import MISSING, FieldPath


def required_field(doc: Doc, path: FieldPath, who: str) -> Any:
    """The value at `path` (None for a null); ValueError naming `who` when it is missing."""
    value = path.get(doc.source)
    if value is MISSING:
        why = " (tombstone: no body)" if doc.source is None else ""
        msg = f"{who}: field {path.dotted} is missing{why}"
        raise ValueError(msg)
    return value


def id_string(value: Any, path: FieldPath, who: str) -> str:
    """A document id or routing value: a non-empty string, or an integer as text."""
    if type(value) is str and value:
        return value
    if type(value) is int:
        return str(value)
    got = short(value)
    msg = f"{who}: field {path.dotted} must be a non-empty string or an integer, got {got}"
    raise ValueError(msg)


@builtin(
    "key_from_field",
    keys=("field",),
    doc="field: its value (any, null included) becomes doc.key; missing: ValueError.",
)
def key_from_field(e: Entry) -> Transform:
    path = e.path("field")

    def key_from_field(doc: Doc) -> Doc:
        doc.key = required_field(doc, path, "key_from_field")
        return doc

    return key_from_field


@builtin(
    "id_from_field",
    keys=("field", "header"),
    doc="""field: its value becomes doc.id (a non-empty string, or an integer made a string;
    missing or anything else: ValueError); or header: <name>, the header's text (UTF-8, or
    base64 when it is not; missing, null or empty: ValueError).""",
)
def id_from_field(e: Entry) -> Transform:
    if e.has("header"):
        if e.has("field"):
            e.reject(".header", "give either field or header, not both")
        name = e.req_text("header")

        def id_from_header(doc: Doc) -> Doc:
            doc.id = required_header(doc, name, "id_from_field")
            return doc

        return id_from_header
    path = e.path("field")

    def id_from_field(doc: Doc) -> Doc:
        value = required_field(doc, path, "id_from_field")
        doc.id = id_string(value, path, "id_from_field")
        return doc

    return id_from_field
