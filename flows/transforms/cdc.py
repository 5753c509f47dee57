"""The `debezium` built-in (also `unwrap`, the alias Kafka Connect users know from Debezium's
`ExtractNewRecordState`): Debezium change events become index writes and deletes.

What a record's value may be (decoded by any converter: `json`, `connect-json`, `avro`, ...):

* an envelope `{before, after, source, op, ts_ms, ...}`, alone or inside the JsonConverter
  wrapper `{schema, payload}` (`VALUE_FORMAT=json`; `connect-json` and `avro` hand over the
  envelope itself): `op` c (create), r (snapshot read) and u (update) index `after`; d
  deletes the document (`doc.delete`, no body), or with `soft_delete` indexes `before` with
  that field true. Other ops (t truncate, m message) raise: they name no document.
* a row flattened by `ExtractNewRecordState` with `delete.handling.mode=rewrite` (or
  `delete.tombstone.handling.mode=rewrite`): `__deleted` "true" deletes, "false" indexes the
  row; `__deleted` itself is removed.
* null: the tombstone Debezium writes after each delete, for log compaction. The processor
  hands the null value of a topic this transform handles to the transforms as a Doc with no
  body instead of applying ON_NULL_VALUE (`tombstone_topics`); here it is dropped (counted
  as skipped), or with `tombstones: delete` deletes by the key (for
  `delete.tombstone.handling.mode=tombstone`, where the tombstone is the only delete).

Anything else raises ValueError (a dead letter with stage `transform`): a transform should
refuse a record it does not understand rather than index it as something it is not.

The document id is the Debezium key: a one-field key gives that field's value, a composite
key the values joined with `+` in the key's field order (the key may have the `{schema,
payload}` wrapper too). `id_fields` takes the id from fields of the row instead (the
`before` image for a delete). A string key holding JSON text raises, naming KEY_FORMAT.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from flows.record import Doc
from flows.transforms.entry import Entry, short, topic_matcher
from flows.transforms.registry import Transform, builtin
from sinks.model import MISSING

KEYS = ("topics", "fields", "prefix", "soft_delete", "id_fields", "tombstones")
TYPES = ("debezium", "unwrap")
"""The names this built-in is registered under (the settings check its deletes)."""
_WRITES = frozenset(("c", "r", "u"))
_ENVELOPE = ("op", "ts_ms", "ts_us", "ts_ns", "source", "transaction")
"""What `fields` may name: the envelope's metadata, not its row images."""
_TOPICS_ATTR = "_debezium_topics"
_DOC = """Debezium change events (envelope with or without the {schema, payload} wrapper, or
    rows flattened with __deleted): op c/r/u index `after`, d deletes (soft_delete: <field>
    indexes `before` with that field true; false on the others); the tombstone after a delete
    is dropped whatever ON_NULL_VALUE says (tombstones: delete makes it a delete by key).
    The id is the key (one field: its value; several: values joined with + in key order), or
    id_fields [a, b] of the row. fields [op, source.ts_ms, ...] copies envelope fields as
    prefix (default __) + the path with dots as _ (`__source_ts_ms`). topics (regex, full
    match) limits it to those topics; records of others pass unchanged."""


def tombstone_topics(transforms: Sequence[Transform]) -> Callable[[str], bool] | None:
    """Whether a topic's null values go to the debezium transforms (not ON_NULL_VALUE);
    None when no debezium transform is configured. Called once, at start."""
    found = [t for t in transforms if hasattr(t, _TOPICS_ATTR)]
    if not found:
        return None
    preds: list[Callable[[str], bool]] = [getattr(t, _TOPICS_ATTR) for t in found]
    if len(preds) == 1:
        return preds[0]
    return lambda topic: any(p(topic) for p in preds)


def deleting_entries(entries: Sequence[Mapping[str, Any]]) -> list[int]:
    """The positions of debezium entries that send deletes (no `soft_delete`): their deletes
    have no body, so the settings refuse what could send them elsewhere, as for
    ON_NULL_VALUE=delete (flows.config.document)."""
    return [
        i
        for i, entry in enumerate(entries)
        if entry.get("type") in TYPES and entry.get("soft_delete") is None
    ]


def _build(e: Entry) -> Transform:
    who = e.type
    handles = _topic_filter(e)
    adds = _added_fields(e)
    soft = e.path("soft_delete") if e.has("soft_delete") else None
    id_paths = e.paths("id_fields") if e.has("id_fields") else None
    tomb_delete = e.choice("tombstones", ("ignore", "delete"), "ignore") == "delete"
    if tomb_delete and soft is not None:
        e.reject(".tombstones", "a tombstone has no row to keep as a soft delete (soft_delete)")
    if tomb_delete and id_paths is not None:
        e.reject(".tombstones", "a tombstone has no fields for id_fields: its id is the key")

    def key_id(doc: Doc) -> str:
        return _key_id(doc.key, who)

    def row_id(row: Any, deleted: bool) -> str:
        assert id_paths is not None
        image = "before" if deleted else "after"
        if type(row) is not dict:
            msg = f"{who}: id_fields need the {image} image, which is {short(row)}"
            raise ValueError(msg)
        parts = []
        for path in id_paths:
            value = path.get(row, None)
            if value is None:
                msg = f"{who}: id field {path.dotted} is missing or null in the {image} image"
                raise ValueError(msg)
            parts.append(_id_part(value, path.dotted, who))
        return "+".join(parts)

    def debezium(doc: Doc) -> Doc | None:
        if handles is not None and not handles(doc.record.topic):
            return doc
        value = doc.source
        if value is None:
            if doc.record.value is not None:  # an earlier transform's delete: not ours
                return doc
            if not tomb_delete:
                return None  # the tombstone after a delete: nothing to write
            doc.id = key_id(doc)
            doc.delete = True
            return doc
        if len(value) == 2 and "schema" in value and "payload" in value:
            value = value["payload"]
            if type(value) is not dict:
                msg = f"{who}: the payload is {short(value)}, not a change event"
                raise ValueError(msg)
        envelope: dict[str, Any] | None = None
        if "__deleted" in value:
            flag = value.pop("__deleted")
            if flag == "true" or flag is True:
                deleted = True
            elif flag == "false" or flag is False:
                deleted = False
            else:
                msg = f"{who}: __deleted must be 'true' or 'false', got {short(flag)}"
                raise ValueError(msg)
            row: Any = value
        elif "op" in value and ("after" in value or "before" in value):
            envelope = value
            op = value["op"]
            if op in _WRITES:
                row = value.get("after")
                if type(row) is not dict:
                    msg = f"{who}: op {op} needs an after image (an object), got {short(row)}"
                    raise ValueError(msg)
                deleted = False
            elif op == "d":
                row = value.get("before")
                deleted = True
            else:
                msg = f"{who}: op {short(op)} names no document (only c, r, u and d do)"
                raise ValueError(msg)
        else:
            msg = (
                f"{who}: not a Debezium change event: no op with before/after (an envelope) "
                "and no __deleted (a row flattened with delete.handling.mode=rewrite)"
            )
            raise ValueError(msg)
        doc.id = key_id(doc) if id_paths is None else row_id(row, deleted)
        if deleted and soft is None:
            doc.source = None
            doc.delete = True
            return doc
        source = row if type(row) is dict else {}
        if envelope is not None:
            for get, put in adds:
                found = get(envelope)
                if found is not MISSING:
                    put(source, found)
        if soft is not None:
            soft.set(source, deleted)
        doc.source = source
        doc.delete = False
        return doc

    setattr(debezium, _TOPICS_ATTR, handles or _every_topic)
    return debezium


builtin("debezium", keys=KEYS, doc=_DOC)(_build)
builtin("unwrap", keys=KEYS, doc="debezium under the name Kafka Connect users give it.")(_build)


def _every_topic(topic: str) -> bool:
    return True


def _topic_filter(e: Entry) -> Callable[[str], bool] | None:
    return topic_matcher(e.regex("topics")) if e.has("topics") else None


def _added_fields(e: Entry) -> list[tuple[Callable[[Any], Any], Callable[..., None]]]:
    """`fields` as (read from the envelope, write into the document) pairs."""
    if not e.has("fields"):
        if e.has("prefix"):
            e.reject(".prefix", "only valid with fields")
        return []
    prefix = e.raw.get("prefix", "__")
    if not isinstance(prefix, str):
        e.reject(".prefix", f"expected a string, got {prefix!r}")
    out: list[tuple[Callable[[Any], Any], Callable[..., None]]] = []
    for path in e.paths("fields"):
        if path.keys[0] not in _ENVELOPE:
            allowed = ", ".join(_ENVELOPE)
            e.reject(".fields", f"{path.dotted}: expected a path under one of {allowed}")
        target = e.path("prefix", prefix + path.dotted.replace(".", "_"))
        out.append((path.get, target.set))
    return out


def _key_id(key: Any, who: str) -> str:
    if type(key) is dict and len(key) == 2 and "schema" in key and "payload" in key:
        key = key["payload"]
    if type(key) is dict:
        if not key:
            msg = f"{who}: the key is an empty object"
            raise ValueError(msg)
        if len(key) == 1:
            ((name, value),) = key.items()
            return _id_part(value, f"key field {name}", who)
        return "+".join(_id_part(v, f"key field {k}", who) for k, v in key.items())
    if key is None:
        msg = f"{who}: the record has no key (a table without a primary key?); set id_fields"
        raise ValueError(msg)
    if type(key) is str and key.startswith("{"):
        msg = (
            f"{who}: the key is JSON text; set KEY_FORMAT=json (or connect-json, avro) "
            "so that its fields can be read"
        )
        raise ValueError(msg)
    return _id_part(key, "key", who)


def _id_part(value: Any, name: str, who: str) -> str:
    """One value of an id: a string as it is, a number or boolean as JSON text."""
    kind = type(value)
    if kind is str:
        return value
    if kind is int or kind is float or kind is bool:
        return orjson.dumps(value).decode()
    what = "null" if value is None else f"{short(value)}, not a string, number or boolean"
    msg = f"{who}: {name} is {what}"
    raise ValueError(msg)
