"""The write methods (WRITE_METHOD): the one list, read by the configuration checks, the
action encoding (`actions.ActionBuilder`), the per-record actions a transform may choose
(`Doc.action`) and the classification of `_bulk` answers (`bulk.classify`). A new write
method is one entry here, plus its tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import orjson

from sinks.model import Record

Encode = Callable[[bytes, Record], bytes]
"""The request body made from the document's JSON bytes (and its record, for a script's
`params.record`)."""

ON_MISSING = ("dlq", "ignore", "upsert")
"""ON_MISSING_DOCUMENT: what an update does when the document does not exist."""

DELETE = "delete"
"""The per-record action that is no write method (`Doc.action`, or `Doc.delete=True`)."""


@dataclass(frozen=True, slots=True)
class Updates:
    """What the update-based methods need besides the document: ON_MISSING_DOCUMENT and
    the script (ES_SCRIPT_ID, or ES_SCRIPT_SOURCE + ES_SCRIPT_LANG; ES_SCRIPTED_UPSERT)."""

    on_missing: str = "dlq"
    """`dlq` (a 404 document_missing_exception is a dead letter), `ignore` (done, counted)
    or `upsert` (the update creates the document)."""
    script: Mapping[str, str] | None = field(default=None)
    """`{"id": ...}` or `{"source": ..., "lang": ...}`; the document goes in `params.doc`."""
    scripted_upsert: bool = False
    """A missing document is created by running the script on `{}` (not by inserting the
    document as it is)."""
    record: bool = False
    """The script also gets the record's coordinates as `params.record` (`topic`,
    `partition`, `offset`): a replay runs a script again, and with them the script can
    skip a record it already applied (ES_SCRIPT_RECORD)."""


@dataclass(frozen=True, slots=True)
class WriteMethod:
    """One way to write a document with `_bulk`."""

    name: str
    """The WRITE_METHOD value, and the `Doc.action` that chooses it for one record."""
    op: str
    """The `_bulk` operation of its action line."""
    doc: str
    """One line for docs/elasticsearch.md's table of write methods."""
    body: Callable[[Updates], Encode] | None = None
    """Compiles, once, the encoder of its request body (None: the document itself)."""
    conflict_is_done: bool = False
    """A 409 means the index already holds this document: done, not a failure."""
    needs_id: bool = False
    """Refused at start with DOC_ID=none (an update must name its document)."""
    allows_external_version: bool = False
    """VERSION=offset|header:<name> (`version_type=external`) is allowed with it."""
    allows_data_stream: bool = False
    """ES_DATA_STREAM=true is allowed with it (data streams only append)."""
    retries_conflicts: bool = False
    """Its action line carries `retry_on_conflict` (ES_RETRY_ON_CONFLICT)."""
    on_missing: bool = False
    """A missing document is handled per ON_MISSING_DOCUMENT."""
    needs_script: bool = False
    """Runs the configured script (ES_SCRIPT_ID or ES_SCRIPT_SOURCE)."""


def _as_upsert(_: Updates) -> Encode:
    return lambda source, _: b'{"doc":' + source + b',"doc_as_upsert":true}'


def _partial(updates: Updates) -> Encode:
    if updates.on_missing == "upsert":
        return _as_upsert(updates)
    return lambda source, _: b'{"doc":' + source + b"}"


def _scripted(updates: Updates) -> Encode:
    if updates.script is None:
        msg = "WRITE_METHOD=script needs ES_SCRIPT_ID or ES_SCRIPT_SOURCE"
        raise ValueError(msg)
    # {"script":{<id or source, lang>,"params":{"doc":<document>[,"record":{...}]}}<upsert>}
    head = b'{"script":' + orjson.dumps(dict(updates.script))[:-1] + b',"params":{"doc":'
    params = _record_param if updates.record else _no_param
    if updates.scripted_upsert:
        tail = b'}},"scripted_upsert":true,"upsert":{}}'
    elif updates.on_missing == "upsert":
        return lambda source, rec: head + source + params(rec) + b'}},"upsert":' + source + b"}"
    else:
        tail = b"}}}"
    return lambda source, rec: head + source + params(rec) + tail


def _record_param(rec: Record) -> bytes:
    """`params.record`: the coordinates a script can remember to skip a replayed record."""
    coordinates = {"topic": rec.topic, "partition": rec.partition, "offset": rec.offset}
    return b',"record":' + orjson.dumps(coordinates)


def _no_param(_: Record) -> bytes:
    return b""


# A partial update reads, merges and writes; another writer in between (a second
# deployment, a script) makes it a 409 that re-running the update fixes: the update-based
# methods all retry conflicts.
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
            body=_as_upsert,
            needs_id=True,
            retries_conflicts=True,
        ),
        WriteMethod(
            "update",
            op="update",
            doc="merge into the existing document (partial `doc`); a missing one per "
            "ON_MISSING_DOCUMENT",
            body=_partial,
            needs_id=True,
            retries_conflicts=True,
            on_missing=True,
        ),
        WriteMethod(
            "script",
            op="update",
            doc="run ES_SCRIPT_ID or ES_SCRIPT_SOURCE on the document, the record's "
            "document as `params.doc`; a missing one per ON_MISSING_DOCUMENT",
            body=_scripted,
            needs_id=True,
            retries_conflicts=True,
            on_missing=True,
            needs_script=True,
        ),
    )
}
"""WRITE_METHOD value → its method, in the order the docs list them."""

ACTIONS = (*WRITE_METHODS, DELETE)
"""What `Doc.action` may hold: a write method for this record alone, or `delete`."""

DATA_STREAM_METHOD = next(m.name for m in WRITE_METHODS.values() if m.allows_data_stream)
"""The write method ES_DATA_STREAM=true implies when WRITE_METHOD is not set."""

CONFLICT_DONE_OPS = frozenset(m.op for m in WRITE_METHODS.values() if m.conflict_is_done)
"""`_bulk` operations whose 409 always means the document is there (`create`)."""
