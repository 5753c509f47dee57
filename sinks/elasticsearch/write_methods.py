"""The write methods (WRITE_METHOD): the one list, read by the configuration checks, the
action encoding (`actions.ActionBuilder`) and the classification of `_bulk` answers
(`bulk.classify`). A new write method is one entry here, plus its tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Body = dict[str, Any]


@dataclass(frozen=True, slots=True)
class WriteMethod:
    """One way to write a document with `_bulk`."""

    name: str
    """The WRITE_METHOD value."""
    op: str
    """The `_bulk` operation of its action line."""
    doc: str
    """One line for the README."""
    wrap: Callable[[Body], Body] | None = None
    """The request body made from the document (None: the document itself)."""
    conflict_is_done: bool = False
    """A 409 means the index already holds this document: done, not a failure."""
    needs_id: bool = False
    """Refused at start with DOC_ID=none."""
    allows_external_version: bool = False
    """VERSION=offset|header:<name> (`version_type=external`) is allowed with it."""
    allows_data_stream: bool = False
    """ES_DATA_STREAM=true is allowed with it (data streams only append)."""
    retries_conflicts: bool = False
    """Its action line carries `retry_on_conflict` (ES_RETRY_ON_CONFLICT)."""


def _as_upsert(source: Body) -> Body:
    return {"doc": source, "doc_as_upsert": True}


WRITE_METHODS: dict[str, WriteMethod] = {
    m.name: m
    for m in (
        WriteMethod(
            "index",
            op="index",
            doc="create or replace the whole document",
            allows_external_version=True,
        ),
        WriteMethod(
            "create",
            op="create",
            doc="write only documents that do not exist yet (a 409 counts as done)",
            conflict_is_done=True,
            allows_data_stream=True,
        ),
        WriteMethod(
            "upsert",
            op="update",
            doc="merge into the existing document, or create it (doc_as_upsert)",
            wrap=_as_upsert,
            needs_id=True,
            # A partial update reads, merges and writes; another writer in between (a
            # second deployment, a script) makes it a 409 that re-running the update fixes.
            retries_conflicts=True,
        ),
    )
}
"""WRITE_METHOD value → its method, in the order the README lists them."""

DATA_STREAM_METHOD = next(m.name for m in WRITE_METHODS.values() if m.allows_data_stream)
"""The write method ES_DATA_STREAM=true implies when WRITE_METHOD is not set."""
