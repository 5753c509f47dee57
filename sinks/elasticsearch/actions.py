"""How a document becomes a bulk action: index, id, version, routing, and the NDJSON bytes.

Everything that does not depend on the record (operation, index name patterns, id
strategy) is decided once in `ActionBuilder.__init__`; `build()` does the per-record
remainder and encodes the action and source lines with orjson, so the sink only
concatenates bytes.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from sinks.deep import deep_recursion
from sinks.elasticsearch.config import DocumentConfig
from sinks.elasticsearch.index_names import IndexName
from sinks.model import Action, Doc, Record

MAX_ID_BYTES = 512  # Elasticsearch refuses longer ids (and fails the whole bulk request)
MAX_VERSION = 2**63 - 1

__all__ = ["MAX_ID_BYTES", "MAX_VERSION", "Action", "ActionBuilder", "ActionError"]


class ActionError(ValueError):
    """This record cannot become a bulk action (no id, bad version...): dead-letter it."""


# Dead letters name the exception's class in a header (`__connect.errors.exception.class.
# name`) that consumers of the topic match on: it keeps the name it was published under.
ActionError.__module__ = "sinks.actions"


class ActionBuilder:
    """Turns transformed `Doc`s into encoded bulk `Action`s per the documents' config."""

    def __init__(self, config: DocumentConfig) -> None:
        method = config.method
        self._op = method.op
        self._wrap = method.wrap
        self._retry_on_conflict = config.retry_on_conflict if method.retries_conflicts else 0
        self._default_index = IndexName(config.index)
        self._index_map = {t: IndexName(i) for t, i in config.index_map.items()}
        self._id_mode = config.doc_id
        self._id_path = config.id_field
        if self._id_mode == "field" and self._id_path is None:
            msg = "DOC_ID=field needs a field path"
            raise ValueError(msg)
        self._id_get = self._id_path.get if self._id_path is not None else _no_field
        self._null_key_dlq = config.on_null_key == "dlq"
        self._version_offset = config.version == "offset"
        self._version_header = config.version_header
        self._routing_key = config.routing == "key"
        self._routing_path = config.routing_field
        self._pipeline = config.pipeline
        self._data_stream = config.data_stream
        self._ts_path = config.timestamp_field
        # The common case (index/create with only _index and _id in the action line) skips
        # the metadata dict: the line is a cached prefix, the id as JSON, and a suffix.
        self._plain = not (
            config.routing or self._pipeline or self._data_stream or self._wrap
            or self._retry_on_conflict or self._version_offset
            or self._version_header is not None
        )  # fmt: skip
        self._prefixes: dict[str, tuple[bytes, bytes]] = {}
        self._topic_index: dict[str, str] = {}

    def build(self, doc: Doc) -> Action:
        """Encode `doc`; raise ActionError when the record cannot be indexed as configured."""
        rec = doc.record
        index = doc.index or self.index_for(rec)
        doc_id = _as_id(doc.id) if doc.id is not None else self._derive_id(doc)
        if doc_id is not None and (
            not doc_id or (len(doc_id) > 128 and _utf8_len(doc_id) > MAX_ID_BYTES)
        ):
            msg = f"document id must be 1 to {MAX_ID_BYTES} bytes (UTF-8), got {doc_id[:40]!r}..."
            raise ActionError(msg)
        if self._plain and doc.routing is None and not doc.delete and doc.source is not None:
            prefixes = self._prefixes.get(index)
            if prefixes is None:
                prefixes = self._prefixes[index] = self._line_prefixes(index)
            body = _dumps(doc.source)
            if doc_id is None:
                return Action(None, prefixes[1] + body + b"\n", rec)
            return Action(doc_id, prefixes[0] + _dumps(doc_id) + b"}}\n" + body + b"\n", rec)
        meta: dict[str, Any] = {"_index": index}
        if doc_id is not None:
            meta["_id"] = doc_id
        routing = doc.routing if doc.routing is not None else self._derive_routing(doc)
        if routing is not None:
            meta["routing"] = routing
        if self._pipeline and not doc.delete:
            meta["pipeline"] = self._pipeline
        if self._retry_on_conflict and not doc.delete:
            meta["retry_on_conflict"] = self._retry_on_conflict
        if self._version_offset:
            meta["version"] = rec.offset
            meta["version_type"] = "external"
        elif self._version_header is not None:
            meta["version"] = self._header_version(rec)
            meta["version_type"] = "external"
        if doc.delete:
            if doc_id is None:
                msg = "a delete needs a document id"
                raise ActionError(msg)
            return Action(doc_id, _dumps({"delete": meta}) + b"\n", rec)
        source = doc.source
        if source is None:
            msg = "the document is empty (no source) and is not a delete"
            raise ActionError(msg)
        if self._data_stream and "@timestamp" not in source:
            source["@timestamp"] = self._timestamp(doc)
        if self._wrap is not None:
            source = self._wrap(source)
        body = _dumps(source)
        return Action(doc_id, _dumps({self._op: meta}) + b"\n" + body + b"\n", rec)

    def index_for(self, rec: Record) -> str:
        """The configured index for a record: ES_INDEX_MAP for its topic, else ES_INDEX."""
        name = self._topic_index.get(rec.topic)
        if name is not None:
            return name
        pattern = self._index_map.get(rec.topic, self._default_index)
        name = pattern.render(rec.topic, rec.timestamp)
        if not pattern.has_date:  # the same for every record of this topic
            self._topic_index[rec.topic] = name
        return name

    def _line_prefixes(self, index: str) -> tuple[bytes, bytes]:
        """Action-line bytes for `index`: (with `_id` still to append, without `_id`)."""
        head = b'{"' + self._op.encode() + b'":{"_index":' + _dumps(index)
        return head + b',"_id":', head + b"}}\n"

    def _derive_id(self, doc: Doc) -> str | None:
        mode = self._id_mode
        if mode == "key":
            if doc.key is None:
                if self._null_key_dlq:
                    msg = "the record has no key (DOC_ID=key, ON_NULL_KEY=dlq)"
                    raise ActionError(msg)
                return doc.record.coordinates
            return _as_id(doc.key)
        if mode == "coordinates":
            return doc.record.coordinates
        if mode == "field":
            value = self._id_get(doc.source, None)
            if value is None:  # missing or null
                msg = f"document id field {self._id_path} is missing or null"
                raise ActionError(msg)
            return _as_id(value)
        return None

    def _derive_routing(self, doc: Doc) -> str | None:
        """ES_ROUTING: the key, or the field; a null key, or a field missing or null, sends
        no routing (the document goes to the shard of its id)."""
        if self._routing_key:
            return None if doc.key is None else _as_id(doc.key)
        if self._routing_path is not None:
            value = self._routing_path.get(doc.source, None)  # missing or null
            return None if value is None else _as_id(value)
        return None

    def _header_version(self, rec: Record) -> int:
        raw = rec.header(self._version_header or "")
        try:
            version = int(raw) if raw is not None else -1
        except ValueError:
            version = -1
        if not 0 <= version <= MAX_VERSION:
            msg = f"header {self._version_header} must hold an integer version 0..2^63-1"
            raise ActionError(msg)
        return version

    def _timestamp(self, doc: Doc) -> Any:
        if self._ts_path is not None:
            value = self._ts_path.get(doc.source, None)
            if value is None:  # missing or null
                msg = f"timestamp field {self._ts_path} is missing (data stream)"
                raise ActionError(msg)
            return value
        if doc.record.timestamp is None:
            msg = "the record has no timestamp for @timestamp (data stream)"
            raise ActionError(msg)
        return doc.record.timestamp


def _dumps(value: Any) -> bytes:
    """orjson, with what it refuses (a transform's non-JSON value, a lone surrogate in an
    id or index name, an integer beyond 64 bits) turned into a dead letter."""
    try:
        return orjson.dumps(value)
    except TypeError as e:
        if "Recursion limit" in str(e):  # deeper than orjson encodes (254 levels)
            try:
                with deep_recursion():
                    text = json.dumps(
                        value, ensure_ascii=False, allow_nan=False, separators=(",", ":")
                    )
                return text.encode()
            except (ValueError, TypeError, RecursionError) as deep_error:
                e = TypeError(str(deep_error))
        msg = f"not JSON-serializable: {e}"
        raise ActionError(msg) from None


def _no_field(source: Any, default: Any) -> Any:
    return default


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _as_id(value: Any) -> str:
    """A document id from a key or field: strings as they are, scalars as JSON text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return _dumps(value).decode()  # a non-JSON value (set by a transform): ActionError
