"""Kafka record headers as document values: the one decoding rule every `header:` source uses.

A header value is bytes; in a document, id, index or routing it becomes text: UTF-8 when it
decodes as UTF-8, else its standard base64 (a binary header still arrives, unmistakably not
text, rather than failing the record). A header present with a null value is None. When a
name repeats (Kafka allows it) the last value wins, as `Record.header` reads it.
"""

from __future__ import annotations

import base64
from typing import Any

from flows.record import Doc
from sinks.model import MISSING


def header_text(doc: Doc, name: str) -> Any:
    """The text of header `name` (None for a null value), or MISSING when it is absent."""
    found: Any = MISSING
    for k, v in doc.record.headers:
        if k == name:
            found = v
    if found is None or found is MISSING:
        return found
    try:
        return found.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(found).decode("ascii")


def required_header(doc: Doc, name: str, who: str) -> str:
    """The header's text for an id, index or routing: ValueError naming `who` when the header
    is missing, null or empty."""
    value = header_text(doc, name)
    if value is MISSING or not value:
        what = "missing" if value is MISSING else "null" if value is None else "empty"
        msg = f"{who}: header {name} is {what}"
        raise ValueError(msg)
    return str(value)
