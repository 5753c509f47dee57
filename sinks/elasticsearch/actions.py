"""How a document becomes a bulk action: index, id, version, routing, and the NDJSON bytes.

Everything that does not depend on the record (operation, index name patterns, id
strategy, the write methods' body encoders) is decided once in `ActionBuilder.__init__`;
`build()` does the per-record remainder and encodes the action and source lines with
orjson, so the sink only concatenates bytes.

Per-record actions: a transform may set `Doc.action` to a write method name (`index`,
`create`, `update`, `upsert`, `script`) or `delete` for that record alone. `Doc.delete=True`
is the older spelling of `action="delete"` (tombstones and transforms use it); a Doc with
both `delete=True` and another action is refused. Every write to one id goes through one
sink partition, in order, so mixed actions on a document apply in record order.

Index names: every name a record produces (a `{topic}` or date pattern, or `Doc.index`
from a transform) is held to Elasticsearch's rules and to ES_INDEX_ALLOW once per distinct
name; a refused one is an `InvalidIndexName` (a dead letter at stage `index`), never a
request that fails. With ES_INDEX_NAMING=connect each name is first rewritten as Kafka
Connect's Elasticsearch sink names its indices (`index_names.connect_index_name`).

Coordinates ids (DOC_ID=coordinates, a null key under ON_NULL_KEY=coordinates) join topic,
partition and offset with DOC_ID_SEPARATOR: `-` by default, `+` as Kafka Connect does. With
ES_INDEX_NAMING=connect the topic is the routed one (`Doc.topic`, set by `route`) where a
transform routed the record: Kafka Connect's sink names the id after the topic its routers
made, not the one the record was read from.

Key ids under ES_INDEX_NAMING=connect are held to the connector's rules: a string key is the
id as it is, an integer key its decimal digits, and any other key (a float, a boolean, an
object or array, the bytes of KEY_FORMAT=bytes) is an ActionError, as the connector refuses
it (a DataException), not an id it never wrote.
"""

from __future__ import annotations

import binascii
import json
from dataclasses import dataclass
from typing import Any

import orjson

from sinks.deep import deep_recursion
from sinks.elasticsearch import index_names
from sinks.elasticsearch.config import DocumentConfig
from sinks.elasticsearch.index_names import IndexName
from sinks.elasticsearch.write_methods import ACTIONS, DELETE, WRITE_METHODS, Encode, WriteMethod
from sinks.model import Action, Doc, KafkaMessage, Record, record_of

MAX_ID_BYTES = 512  # Elasticsearch refuses longer ids (and fails the whole bulk request)
SHORT_ID_CHARS = MAX_ID_BYTES // 4
"""An id of at most this many characters is at most MAX_ID_BYTES in UTF-8: no byte count."""
MAX_VERSION = 2**63 - 1
NAME_CACHE_LIMIT = 10_000
"""Distinct index names whose check is remembered before the memory starts over."""

__all__ = [
    "MAX_ID_BYTES",
    "MAX_VERSION",
    "Action",
    "ActionBuilder",
    "ActionError",
    "InvalidIndexName",
]


class ActionError(ValueError):
    """This record cannot become a bulk action (no id, bad version...): dead-letter it."""


# Dead letters name the exception's class in a header (`__connect.errors.exception.class.
# name`) that consumers of the topic match on: it keeps the name it was published under.
ActionError.__module__ = "sinks.actions"


class InvalidIndexName(ActionError):
    """The index name a record produced breaks Elasticsearch's rules, or ES_INDEX_ALLOW."""


InvalidIndexName.__module__ = "sinks.actions"


@dataclass(frozen=True, slots=True)
class _Write:
    """A write method compiled for this configuration."""

    method: WriteMethod
    op: str
    encode: Encode | None
    retry_on_conflict: int
    versioned: bool
    """Its actions carry the external version (VERSION is set and the method allows it)."""


class ActionBuilder:
    """Turns transformed `Doc`s into encoded bulk `Action`s per the documents' config."""

    def __init__(self, config: DocumentConfig) -> None:
        self._updates = config.updates
        self._retry_on_conflict = config.retry_on_conflict
        self._versioned = config.version != "none"
        self._writes: dict[str, _Write] = {}
        default = self._default = self._write(config.method)
        self._op = default.op
        self._default_index = IndexName(config.index)
        self._index_map = {t: IndexName(i) for t, i in config.index_map.items()}
        self._allow = config.index_allow
        self._connect_names = config.index_naming == index_names.CONNECT_NAMING
        self._renamed: dict[str, str] = {}
        """A transform's index name → its ES_INDEX_NAMING=connect rewrite."""
        self._sep = config.id_separator
        self._names: dict[str, str] = {}
        """Index name → why it is refused ("" when it is fine), for names records produce."""
        self._id_mode = config.doc_id
        self._key_ids = config.doc_id == "key"
        self._id_path = config.id_field
        if self._id_mode == "field" and self._id_path is None:
            msg = "DOC_ID=field needs a field path"
            raise ValueError(msg)
        self._id_get = self._id_path.get if self._id_path is not None else _no_field
        self._null_key_fails = config.on_null_key in ("dlq", "fail")
        self._null_key_policy = config.on_null_key
        self._connect_keys = self._connect_names and self._key_ids
        self._bytes_keys = self._connect_keys and config.key_format == "bytes"
        """A string key may be the base64 of the record's bytes key: not an id."""
        self._str_key_ids = self._key_ids and not self._bytes_keys
        """A short string key is the id as it is (`_derive_id` would give the same)."""
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
            config.routing or self._pipeline or self._data_stream or default.encode
            or default.retry_on_conflict or self._version_offset
            or self._version_header is not None
        )  # fmt: skip
        self._prefixes: dict[str, tuple[bytes, bytes]] = {}
        self._topic_index: dict[str, str] = {}

    @property
    def takes_raw_sources(self) -> bool:
        """Whether `build_raw` may encode this configuration's documents: the action line
        holds only `_index` and `_id`, and neither reads a field of the document."""
        return self._plain and self._id_mode != "field"

    def build_source(self, rec: Record, source: dict[str, Any] | None, key: Any) -> Action:
        """`build(Doc(rec, source, key))` without making the Doc: the common case of a
        decoded value and no transforms, where every choice `build` makes per document is
        the configured default. Same bytes, same errors."""
        if not self._plain or source is None:
            return self.build(Doc(rec, source, key))
        index, doc_id = self._plain_index_id(rec, rec.topic, source, key)
        if doc_id is None:
            return Action(None, self._prefixes_of(index)[1] + _dumps(source) + b"\n", rec)
        prefixes = self._prefixes.get(index) or self._prefixes_of(index)
        try:
            body = _orjson_dumps(source)
            id_json = _orjson_dumps(doc_id)
        except TypeError:  # `_dumps` says why (or encodes what is too deep for orjson)
            body = _dumps(source)  # before the id, as in `build`: the same error
            id_json = _dumps(doc_id)
        return Action(doc_id, b"".join((prefixes[0], id_json, ID_END, body, b"\n")), rec)

    def build_raw(
        self, origin: Record | KafkaMessage, topic: str, source_line: bytes, key: Any
    ) -> Action:
        """`build_source` for a JSON object sent as it arrived, `source_line` (one line,
        no newline) of a record of `topic`: only where `takes_raw_sources` (see
        `flows.decode.json.RawObjects`). `origin` may be the consumed message itself: a
        `Record` is made of it only when the id or index needs more than the key and topic."""
        index, doc_id = self._plain_index_id(origin, topic, None, key)
        if doc_id is None:
            line = b"".join((self._prefixes_of(index)[1], source_line, b"\n"))
            return Action(None, line, origin)
        prefixes = self._prefixes.get(index) or self._prefixes_of(index)
        try:
            id_json = _orjson_dumps(doc_id)
        except TypeError:  # a lone surrogate: `_dumps` raises the ActionError
            id_json = _dumps(doc_id)
        return Action(doc_id, b"".join((prefixes[0], id_json, ID_END, source_line, b"\n")), origin)

    def key_id_head(self, topic: str) -> bytes | None:
        """What `build_raw` writes before the id (`+ id as JSON + ID_END + source line
        + newline`) for a record of `topic` whose string key of 1 to SHORT_ID_CHARS
        characters is its id, so that `flows.process` can write those bytes without a
        call per record. None where the action line holds more than `_index` and `_id`
        (`_plain`), the id is not the key, the index needs more than the topic (a date in
        its name), or the index cannot be written (`build_raw` makes the dead letter)."""
        if not (self._key_ids and self._plain):
            return None
        if self._index_map.get(topic, self._default_index).has_date:
            return None
        try:
            return self._prefixes_of(self._index_of(topic, None))[0]
        except ActionError:  # a refused name, or one JSON cannot hold (a lone surrogate)
            return None

    def _plain_index_id(
        self, origin: Record | KafkaMessage, topic: str, source: dict[str, Any] | None, key: Any
    ) -> tuple[str, str | None]:
        """The configured index and id of a plain action (`build_source`, `build_raw`) of a
        record of `topic`; a `Record` is made of a message `origin` only when they need
        more than the topic and the key (a date in the index name, another id)."""
        index = self._topic_index.get(topic)
        if index is None:
            index = self.index_for(record_of(origin))
        if self._str_key_ids and type(key) is str and 0 < len(key) <= SHORT_ID_CHARS:
            return index, key  # what `_derive_id` gives, and short enough
        doc_id = self._derive_id(record_of(origin), source, key)
        if doc_id is not None:
            _check_id(doc_id)
        return index, doc_id

    def build(self, doc: Doc) -> Action:
        """Encode `doc`; raise ActionError when the record cannot be indexed as configured."""
        rec = doc.record
        index = doc.index
        if index is None:
            index = self._topic_index.get(rec.topic) or self.index_for(rec)
        else:  # set by a transform: held to the rules once per distinct name
            if self._connect_names:
                index = self._rename(index)
            why = self._names.get(index)
            if why is None:
                why = self._judge(index)
            if why:
                raise InvalidIndexName(why)
        # Every transformed document comes here: the common cases (a short string key as the
        # id, a plain action line) take no call beyond the encoding.
        doc_id = doc.id
        if doc_id is not None:
            doc_id = _as_id(doc_id)
            _check_id(doc_id)
        elif self._str_key_ids and type(key := doc.key) is str and 0 < len(key) <= SHORT_ID_CHARS:
            doc_id = key  # what `_derive_id` gives, and short enough
        else:
            routed = doc.topic if self._connect_names else None
            doc_id = self._derive_id(rec, doc.source, doc.key, routed)
            if doc_id is not None:
                _check_id(doc_id)
        kind = doc.action
        if kind is None and not doc.delete:
            source = doc.source
            if self._plain and doc.routing is None and source is not None:
                prefixes = self._prefixes.get(index) or self._prefixes_of(index)
                try:
                    body = _orjson_dumps(source)
                except TypeError:  # `_dumps` says why (or encodes what is too deep for orjson)
                    body = _dumps(source)
                if doc_id is None:
                    return Action(None, prefixes[1] + body + b"\n", rec)
                try:
                    id_json = _orjson_dumps(doc_id)
                except TypeError:  # a lone surrogate: `_dumps` raises the ActionError
                    id_json = _dumps(doc_id)
                return Action(doc_id, b"".join((prefixes[0], id_json, ID_END, body, b"\n")), rec)
            write: _Write | None = self._default
        elif doc.delete or kind == DELETE:
            if kind is not None and kind != DELETE:
                msg = f"the document is marked both delete=True and action={kind!r}"
                raise ActionError(msg)
            write = None
        else:
            write = self._writes.get(kind) if isinstance(kind, str) else None
            if write is None:
                write = self._per_record(kind)
            self._check_per_record(write, doc_id)
        meta: dict[str, Any] = {"_index": index}
        if doc_id is not None:
            meta["_id"] = doc_id
        routing = doc.routing if doc.routing is not None else self._derive_routing(doc)
        if routing is not None:
            meta["routing"] = routing
        if write is None:
            if doc_id is None:
                msg = "a delete needs a document id"
                raise ActionError(msg)
            if self._data_stream:
                msg = "data streams accept only create, not deletes (ES_DATA_STREAM=true)"
                raise ActionError(msg)
            if self._versioned:
                self._version(meta, rec)
            return Action(doc_id, _dumps({"delete": meta}) + b"\n", rec)
        if self._pipeline:
            meta["pipeline"] = self._pipeline
        if write.retry_on_conflict:
            meta["retry_on_conflict"] = write.retry_on_conflict
        if write.versioned:
            self._version(meta, rec)
        source = doc.source
        if source is None:
            msg = "the document is empty (no source) and is not a delete"
            raise ActionError(msg)
        if self._data_stream and "@timestamp" not in source:
            source["@timestamp"] = self._timestamp(doc)
        body = _dumps(source)
        if write.encode is not None:
            body = write.encode(body, rec)
        return Action(doc_id, _dumps({write.op: meta}) + b"\n" + body + b"\n", rec)

    def index_for(self, rec: Record) -> str:
        """The configured index for a record: ES_INDEX_MAP for its topic, else ES_INDEX.
        Raises InvalidIndexName for a name Elasticsearch or ES_INDEX_ALLOW refuses."""
        return self._index_of(rec.topic, rec.timestamp)

    def _index_of(self, topic: str, timestamp: int | None) -> str:
        name = self._topic_index.get(topic)
        if name is not None:
            return name
        pattern = self._index_map.get(topic, self._default_index)
        name = pattern.render(topic, timestamp)
        if self._connect_names:
            name = self._rename(name)
        why = self._names.get(name)
        if why is None:
            why = self._judge(name)
        if why:
            raise InvalidIndexName(why)
        if not pattern.has_date:  # the same for every record of this topic
            self._topic_index[topic] = name
        return name

    def _rename(self, name: str) -> str:
        """ES_INDEX_NAMING=connect: `name` as Kafka Connect's sink would spell it."""
        renamed = self._renamed.get(name)
        if renamed is None:
            if len(self._renamed) >= NAME_CACHE_LIMIT:
                self._renamed.clear()
            renamed = self._renamed[name] = index_names.connect_index_name(name)
        return renamed

    def _coordinates(self, rec: Record, topic: str | None = None) -> str:
        """`topic-partition-offset`, with DOC_ID_SEPARATOR between them; `topic`: the routed
        topic in place of the record's."""
        sep = self._sep
        if topic is None:
            if sep == "-":
                return rec.coordinates
            topic = rec.topic
        return f"{topic}{sep}{rec.partition}{sep}{rec.offset}"

    def _judge(self, name: str) -> str:
        """Why `name` is refused ("" when it is fine), remembered for the next record."""
        why = index_names.problem(name) or ""
        allow = self._allow
        if not why and allow is not None and allow.fullmatch(name) is None:
            why = f"index name {name[:80]!r} does not match ES_INDEX_ALLOW ({allow.pattern})"
        if len(self._names) >= NAME_CACHE_LIMIT:
            self._names.clear()
        self._names[name] = why
        return why

    def _write(self, method: WriteMethod) -> _Write:
        write = self._writes[method.name] = _Write(
            method,
            method.op,
            None if method.body is None else method.body(self._updates),
            self._retry_on_conflict if method.retries_conflicts else 0,
            self._versioned and method.allows_external_version,
        )
        return write

    def _per_record(self, kind: object) -> _Write:
        """The write method a transform chose for one record (`Doc.action`), compiled once."""
        method = WRITE_METHODS.get(kind) if isinstance(kind, str) else None
        if method is None or not isinstance(kind, str):
            msg = f"unknown action {kind!r} (expected one of {', '.join(ACTIONS)})"
            raise ActionError(msg)
        if method.needs_script and self._updates.script is None:
            msg = f"action {kind!r} needs a script: set ES_SCRIPT_ID or ES_SCRIPT_SOURCE"
            raise ActionError(msg)
        return self._write(method)

    def _check_per_record(self, write: _Write, doc_id: str | None) -> None:
        method = write.method
        if method.needs_id and doc_id is None:
            msg = f"action {method.name!r} needs a document id (DOC_ID is none)"
            raise ActionError(msg)
        if self._data_stream and not method.allows_data_stream:
            msg = f"data streams accept only create, not {method.name!r} (ES_DATA_STREAM=true)"
            raise ActionError(msg)
        if self._versioned and not method.allows_external_version:
            msg = f"Elasticsearch does not version {method.name!r} writes (VERSION is set)"
            raise ActionError(msg)

    def _version(self, meta: dict[str, Any], rec: Record) -> None:
        if self._version_offset:
            meta["version"] = rec.offset
            meta["version_type"] = "external"
        elif self._version_header is not None:
            meta["version"] = self._header_version(rec)
            meta["version_type"] = "external"

    def _prefixes_of(self, index: str) -> tuple[bytes, bytes]:
        """Action-line bytes for `index`: (with `_id` still to append, without `_id`)."""
        prefixes = self._prefixes.get(index)
        if prefixes is None:
            head = b'{"' + self._op.encode() + b'":{"_index":' + _dumps(index)
            prefixes = self._prefixes[index] = (head + b',"_id":', head + b"}}\n")
        return prefixes

    def _derive_id(
        self, rec: Record, source: dict[str, Any] | None, key: Any, topic: str | None = None
    ) -> str | None:
        """The configured id; `topic`: the routed topic a coordinates id is named after."""
        mode = self._id_mode
        if mode == "key":
            if key is None:
                if self._null_key_fails:
                    msg = f"the record has no key (DOC_ID=key, ON_NULL_KEY={self._null_key_policy})"
                    raise ActionError(msg)
                return self._coordinates(rec, topic)
            if self._connect_keys:
                return self._connect_key_id(rec, key)
            return _as_id(key)
        if mode == "coordinates":
            return self._coordinates(rec, topic)
        if mode == "field":
            value = self._id_get(source, None)
            if value is None:  # missing or null
                msg = f"document id field {self._id_path} is missing or null"
                raise ActionError(msg)
            return _as_id(value)
        return None

    def _connect_key_id(self, rec: Record, key: Any) -> str:
        """ES_INDEX_NAMING=connect: the id Kafka Connect's sink makes of a key (a string as
        it is, an integer of at most 64 bits in decimal); ActionError for a key it refuses,
        so that no document gets an id the connector never gave."""
        kind = type(key)
        if kind is str:
            raw = rec.key
            if self._bytes_keys and raw is not None and key == _b64(raw):
                msg = (
                    "the key is bytes (KEY_FORMAT=bytes): Kafka Connect's Elasticsearch sink "
                    "takes only a string or an integer key as the document id "
                    "(ES_INDEX_NAMING=connect)"
                )
                raise ActionError(msg)
            return str(key)
        if kind is int and -(2**63) <= key < 2**63:
            return str(key)
        msg = (
            f"the key is {_kind(key)}: Kafka Connect's Elasticsearch sink takes only a string "
            "or an integer key (64 bits) as the document id (ES_INDEX_NAMING=connect)"
        )
        raise ActionError(msg)

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


ID_END = b"}}\n"
"""What closes an action line after its `_id`."""
_orjson_dumps = orjson.dumps


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


def _b64(data: bytes) -> str:
    """What KEY_FORMAT=bytes makes of a key (`flows.decode.text`): standard base64."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def _kind(value: Any) -> str:
    """What a key is, for an error: its type in JSON's words, and a short repr."""
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer beyond 64 bits ({str(value)[:24]})"
    if isinstance(value, float):
        return f"a float ({value!r})"
    if isinstance(value, dict):
        return "an object (a struct or map)"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    return f"a {type(value).__name__}"


def _no_field(source: Any, default: Any) -> Any:
    return default


def _check_id(doc_id: str) -> None:
    """Raise ActionError for an id Elasticsearch refuses: empty, or over MAX_ID_BYTES."""
    if not doc_id or (len(doc_id) > SHORT_ID_CHARS and _utf8_len(doc_id) > MAX_ID_BYTES):
        msg = f"document id must be 1 to {MAX_ID_BYTES} bytes (UTF-8), got {doc_id[:40]!r}..."
        raise ActionError(msg)


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _as_id(value: Any) -> str:
    """A document id from a key or field: strings as they are, scalars as JSON text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return _dumps(value).decode()  # a non-JSON value (set by a transform): ActionError
