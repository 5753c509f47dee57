"""Per-record transforms: change, drop, route or fan out documents before they are indexed.

A transform is any callable `transform(doc) -> Doc | list[Doc] | None`:

* return the `Doc` (changed in place, or a new one) to keep it;
* return `None` (or an empty list) to drop the record: nothing is indexed, its offset is
  still committed;
* return a list of Docs to fan out: every later transform runs on each of them.

A transform may set `doc.index`, `doc.id`, `doc.routing`, `doc.key`, `doc.delete`,
`doc.meta` and change or replace `doc.source`. It must not modify `doc.record`, and every Doc
it returns must carry the same `record` object: the record's offset is what gets committed
and its original bytes are what goes to the dead-letter topic, whatever the transforms did.
Fanned-out Docs may share a `source` dict; copy it when the copies must differ.

An exception raised by a transform dead-letters the record (stage `transform`), so a
transform should raise rather than guess when a record does not fit.

The configured chain (`transforms:` in YAML, or TRANSFORMS=pkg.mod:func,...) is compiled
once by `build_transforms`: dotted paths are split, regexes compiled and functions imported
at start, so a mistake (including an unknown type or key) fails the start with a
`ConfigError` naming `transforms[i]`, and the per-record work is only the transform itself.

Built-in types (`{type: <name>, ...}`, modelled on Kafka Connect SMTs):

* insert_field: field, and value (static) or from (topic, partition, offset, timestamp,
  key = the decoded doc.key); format: iso|epoch_ms only with from: timestamp.
* rename: fields {old.path: new.path}; drop: fields [...]; keep: fields [...] (nested paths
  keep the nesting; an object none of whose listed fields exist is left out);
  mask: fields [...], replacement (default "****"). Missing fields are skipped.
* extract: field; that object becomes the body (missing or not an object: ValueError).
* key_from_field / id_from_field: field (missing: ValueError; an id is a non-empty string or
  an integer, made a string).
* timestamp_convert: field, to iso|epoch_ms|epoch_s, unit ms|s (of numeric input, default
  ms), from_format (strptime). Accepts integers and floats (epoch in `unit`; floats rounded
  to the millisecond) and strings: `from_format` when given, else ISO-8601 as
  `datetime.fromisoformat` reads it (`2024-05-01`, `2024-05-01T12:00:00.123Z`, `+02:00`
  offsets); no offset means UTC. Output: `2024-05-01T12:00:00.123Z`, or integer ms/s
  (truncated). Missing or null: unchanged; anything else: ValueError.
* filter: drops matching records (negate: true keeps only them); exactly one of topic
  (regex, full match), header (name present), tombstone: true, or field with op
  eq|ne|gt|ge|lt|le|in|regex (full match)|exists (default eq) and value. A missing field
  never matches, nor do values that do not compare (`"a" > 1`).
* route: index (template such as `logs-{yyyy.MM.dd}`, dated by the record timestamp or by
  timestamp_field: epoch ms or ISO string), or topic_regex + replacement (`idx-$1`,
  `idx-\\1`, `${name}`; index left unchanged unless the topic fully matches); routing_field
  sets doc.routing.
* python: `pkg.mod:func` imported at start; with config: {...}, `func(**config)` is called
  once and must return the transform.

Dotted paths (`a.b.c`) walk nested objects; they do not index into lists, and a field whose
name contains a dot cannot be addressed. A tombstone (`source` None) passes unchanged through
the body edits (insert_field, rename, drop, keep, mask, extract, timestamp_convert);
key_from_field, id_from_field and route's timestamp_field/routing_field raise for it, as for
any missing field.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeAlias

from flows.errors import ConfigError
from flows.naming import IndexTemplate
from flows.record import Doc, Record

__all__ = ["Transform", "apply_transforms", "build_transforms"]

Transform: TypeAlias = Callable[[Doc], Doc | list[Doc] | None]
"""A callable that keeps (returns the Doc), drops (None) or fans out (list of Docs)."""

_Source: TypeAlias = "dict[str, Any] | None"
_Path: TypeAlias = tuple[tuple[str, ...], str]
"""A compiled dotted path: (parent keys, last key)."""
_Cond: TypeAlias = Callable[[Doc], bool]

_MISSING: Any = object()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
_ONE_MS = timedelta(milliseconds=1)
_CACHE_LIMIT = 10_000


# ---------------------------------------------------------------------------------- running


def apply_transforms(transforms: Sequence[Transform], doc: Doc) -> list[Doc]:
    """Run `transforms` in order on `doc` and return the resulting Docs.

    Args:
        transforms: The compiled chain (`build_transforms`), plain functions, or both.
        doc: The document made from one Kafka record.

    Returns:
        The Docs to index: `[doc]` when nothing dropped or fanned out, `[]` when dropped.

    Raises:
        TypeError: A transform returned something other than a Doc, a list of Docs or None.
        ValueError: A transform returned a Doc that does not carry the input's `record`.
        Exception: Whatever a transform raised, unchanged (the caller dead-letters it).
    """
    if not transforms:
        return [doc]
    record = doc.record
    it = iter(transforms)
    for transform in it:
        out = transform(doc)
        if out is doc:
            continue
        if out is None:
            return []
        if isinstance(out, Doc):
            if out.record is not record:
                raise _foreign_record(transform)
            doc = out
            continue
        if isinstance(out, list):
            return _fan_out(list(it), transform, out, record)
        msg = (
            f"transform {_name(transform)} returned {type(out).__name__}; "
            "expected a Doc, a list of Docs or None"
        )
        raise TypeError(msg)
    return [doc]


def _fan_out(
    rest: list[Transform], transform: Transform, docs: list[Any], record: Record
) -> list[Doc]:
    seen: set[int] = set()
    for d in docs:
        if not isinstance(d, Doc):
            msg = (
                f"transform {_name(transform)} returned a list holding {type(d).__name__}; "
                "expected a Doc, a list of Docs or None"
            )
            raise TypeError(msg)
        if d.record is not record:
            raise _foreign_record(transform)
        if id(d) in seen:
            msg = f"transform {_name(transform)} returned the same Doc object twice"
            raise ValueError(msg)
        seen.add(id(d))
    if not rest:
        return list(docs)
    out: list[Doc] = []
    for d in docs:
        out.extend(apply_transforms(rest, d))
    return out


def _foreign_record(transform: Transform) -> ValueError:
    return ValueError(
        f"transform {_name(transform)} returned a Doc with a different record; "
        "every Doc must keep the input's `record` object (offsets and dead letters use it)"
    )


def _name(transform: Transform) -> str:
    name = getattr(transform, "__qualname__", None)
    if not isinstance(name, str):
        return repr(transform)[:100]
    module = getattr(transform, "__module__", None)
    return f"{module}.{name}" if module and module != __name__ else name


# ---------------------------------------------------------------------------------- building


def build_transforms(specs: Sequence[Mapping[str, Any]]) -> list[Transform]:
    """Compile the configured transform entries, in order, once at start.

    Args:
        specs: Entries as in Settings.transforms: `{type: <name>, ...}` for a built-in, or
            `{python: "pkg.mod:func"}` (optionally with `config: {...}` for a factory).

    Returns:
        The transforms, ready for `apply_transforms`.

    Raises:
        ConfigError: An entry is invalid; the message starts with `transforms[i]`.
    """
    if isinstance(specs, str | bytes | Mapping):
        msg = f"transforms: expected a list of entries, got {type(specs).__name__}"
        raise ConfigError(msg)
    out: list[Transform] = []
    for i, entry in enumerate(specs):
        e = _Entry(i, entry)
        transform = _BUILDERS[e.type](e)
        if e.type != "python":
            _label(transform, f"transforms[{i}] ({e.type})")
        out.append(transform)
    return out


def _label(closure: Any, label: str) -> None:
    """Name a built-in's closure after its entry, so errors point at the configuration."""
    closure.__qualname__ = closure.__name__ = label


class _Entry:
    """One configuration entry with typed, checked access; every error names `transforms[i]`."""

    def __init__(self, index: int, raw: Any) -> None:
        self.where = f"transforms[{index}]"
        if not isinstance(raw, Mapping):
            self.reject("", f"expected a mapping with a type: or python: key, got {raw!r}")
        self.raw = raw
        kind = raw.get("type")
        if kind is None and "python" in raw:
            kind = "python"
        if kind is None:
            self.reject("", "each entry needs a `type:` or a `python:` key")
        if not isinstance(kind, str) or kind not in _KEYS:
            choices = ", ".join(sorted(_KEYS))
            self.reject(".type", f"unknown transform type {kind!r} (expected one of {choices})")
        self.type = kind
        allowed = _KEYS[kind] | {"type"}
        for key in raw:
            if key not in allowed:
                near = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                keys = ", ".join(sorted(allowed))
                self.reject(f".{key}", f"unknown key for type {kind} (allowed: {keys}){hint}")

    def reject(self, key: str, problem: str) -> NoReturn:
        """Raise ConfigError `transforms[i]<key>: <problem>` (key is `""` or `.name`)."""
        msg = f"{self.where}{key}: {problem}"
        raise ConfigError(msg) from None

    def has(self, key: str) -> bool:
        return key in self.raw

    def required(self, key: str) -> Any:
        if key not in self.raw or self.raw[key] is None:
            self.reject(f".{key}", f"required for type {self.type}")
        return self.raw[key]

    def text(self, key: str, default: str | None = None) -> str | None:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, str) or not value:
            self.reject(f".{key}", f"expected a non-empty string, got {value!r}")
        return value

    def req_text(self, key: str) -> str:
        self.required(key)
        value = self.text(key)
        assert value is not None
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.reject(f".{key}", f"expected true or false, got {value!r}")
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str | None = None) -> str:
        value = self.text(key, default)
        if value is None:
            self.reject(f".{key}", f"required for type {self.type}")
        if value not in choices:
            self.reject(f".{key}", f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    def path(self, key: str, value: Any = _MISSING) -> _Path:
        if value is _MISSING:
            value = self.required(key)
        if not isinstance(value, str) or not value or "" in value.split("."):
            self.reject(f".{key}", f"expected a dotted field path like a.b.c, got {value!r}")
        parts = tuple(value.split("."))
        return parts[:-1], parts[-1]

    def paths(self, key: str) -> list[_Path]:
        value = self.required(key)
        if not isinstance(value, list | tuple) or not value:
            self.reject(f".{key}", f"expected a non-empty list of field paths, got {value!r}")
        return [self.path(key, v) for v in value]

    def regex(self, key: str, value: Any = _MISSING) -> re.Pattern[str]:
        if value is _MISSING:
            value = self.required(key)
        if not isinstance(value, str):
            self.reject(f".{key}", f"expected a regular expression string, got {value!r}")
        try:
            return re.compile(value)
        except re.error as e:
            self.reject(f".{key}", f"invalid regular expression: {e}")

    def exactly_one(self, keys: tuple[str, ...]) -> str:
        given = [k for k in keys if k in self.raw]
        if len(given) != 1:
            which = " or ".join(keys)
            problem = f"give exactly one of {which}" + (f", not {len(given)}" if given else "")
            self.reject(f".{given[1] if len(given) > 1 else keys[0]}", problem)
        return given[0]


# ---------------------------------------------------------------------------------- paths


def _parent(src: _Source, head: tuple[str, ...]) -> dict[str, Any] | None:
    """The object holding the last key of a path, or None when the path does not exist."""
    obj: Any = src
    for key in head:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj if isinstance(obj, dict) else None


def _get(src: _Source, path: _Path) -> Any:
    head, last = path
    parent = _parent(src, head) if head else src
    return _MISSING if parent is None else parent.get(last, _MISSING)


def _pop(src: _Source, path: _Path) -> Any:
    head, last = path
    parent = _parent(src, head) if head else src
    return _MISSING if parent is None else parent.pop(last, _MISSING)


def _set(src: dict[str, Any], path: _Path, value: Any) -> None:
    head, last = path
    obj = src
    for key in head:
        child = obj.get(key, _MISSING)
        if child is _MISSING or child is None:
            child = obj[key] = {}
        elif not isinstance(child, dict):
            kind = type(child).__name__
            msg = f"cannot set {_dotted(path)}: {key} holds {kind}, not an object"
            raise ValueError(msg)
        obj = child
    obj[last] = value


def _dotted(path: _Path) -> str:
    return ".".join((*path[0], path[1]))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ---------------------------------------------------------------------------------- timestamps


def _epoch_ms(value: Any, seconds: bool = False, fmt: str | None = None) -> int:
    """Epoch milliseconds from a number (ms, or s when `seconds`) or a date string.

    Integers are taken as they are; floats are rounded to the nearest millisecond. Strings
    are parsed with `fmt` (strptime) when given, else as ISO-8601 (`datetime.fromisoformat`:
    `2024-05-01`, `2024-05-01T12:00:00.123Z`, `...+02:00`, `20240501T120000Z`); a string
    without an offset is UTC. Sub-millisecond digits are truncated. Booleans, other types,
    NaN/infinity and unparsable strings raise ValueError.
    """
    kind = type(value)
    if kind is int:
        return value * 1000 if seconds else value
    if kind is float:
        if not math.isfinite(value):
            msg = f"not a finite number: {value!r}"
            raise ValueError(msg)
        return round(value * 1000 if seconds else value)
    if kind is str:
        try:
            dt = datetime.strptime(value, fmt) if fmt else datetime.fromisoformat(value)
        except ValueError:
            expected = f"the format {fmt!r}" if fmt else "an ISO-8601 date"
            msg = f"cannot parse {_short(value)} as {expected}"
            raise ValueError(msg) from None
        if dt.tzinfo is None:
            return (dt - _EPOCH_NAIVE) // _ONE_MS
        return (dt - _EPOCH) // _ONE_MS
    msg = (
        f"expected epoch milliseconds or a date string, got {type(value).__name__} {_short(value)}"
    )
    raise ValueError(msg)


_ISO_SECONDS: dict[int, str] = {}
"""`2024-05-01T12:00:00` by epoch second: records arrive in time order, so most hit."""


def _iso(ms: int) -> str:
    """`2024-05-01T12:00:00.123Z`: ISO-8601 in UTC with milliseconds."""
    seconds, millis = divmod(ms, 1000)
    prefix = _ISO_SECONDS.get(seconds)
    if prefix is None:
        try:
            prefix = (_EPOCH_NAIVE + timedelta(seconds=seconds)).isoformat()
        except OverflowError:
            msg = f"timestamp {ms} ms is out of range"
            raise ValueError(msg) from None
        if len(_ISO_SECONDS) >= _CACHE_LIMIT:
            _ISO_SECONDS.clear()
        _ISO_SECONDS[seconds] = prefix
    return f"{prefix}.{millis:03d}Z"


# ---------------------------------------------------------------------------------- built-ins


def _insert_field(e: _Entry) -> Transform:
    path = e.path("field")
    head, key = path
    if e.exactly_one(("value", "from")) == "value":
        if e.has("format"):
            e.reject(".format", "only valid with from: timestamp")
        value = e.raw["value"]
        if isinstance(value, dict | list):
            # A fresh copy per record: later transforms may mutate what was inserted.
            def insert_copy(doc: Doc) -> Doc:
                if doc.source is not None:
                    _set(doc.source, path, copy.deepcopy(value))
                return doc

            return insert_copy
        if not head:

            def insert_top(doc: Doc) -> Doc:
                if doc.source is not None:
                    doc.source[key] = value
                return doc

            return insert_top

        def insert_static(doc: Doc) -> Doc:
            if doc.source is not None:
                _set(doc.source, path, value)
            return doc

        return insert_static

    origin = e.choice("from", ("topic", "partition", "offset", "timestamp", "key"))
    fmt = e.choice("format", ("epoch_ms", "iso"), "epoch_ms")
    if e.has("format") and origin != "timestamp":
        e.reject(".format", "only valid with from: timestamp")
    get: Callable[[Doc], Any]
    if origin == "topic":
        get = _record_topic
    elif origin == "partition":
        get = _record_partition
    elif origin == "offset":
        get = _record_offset
    elif origin == "key":
        get = _doc_key
    elif fmt == "iso":
        get = _record_timestamp_iso
    else:
        get = _record_timestamp

    def insert_from(doc: Doc) -> Doc:
        if doc.source is not None:
            _set(doc.source, path, get(doc))
        return doc

    return insert_from


def _record_topic(doc: Doc) -> str:
    return doc.record.topic


def _record_partition(doc: Doc) -> int:
    return doc.record.partition


def _record_offset(doc: Doc) -> int:
    return doc.record.offset


def _record_timestamp(doc: Doc) -> int | None:
    return doc.record.timestamp


def _record_timestamp_iso(doc: Doc) -> str | None:
    ts = doc.record.timestamp
    return None if ts is None else _iso(ts)


def _doc_key(doc: Doc) -> Any:
    return doc.key


def _rename(e: _Entry) -> Transform:
    fields = e.required("fields")
    if not isinstance(fields, Mapping) or not fields:
        e.reject(".fields", f"expected a non-empty map of old.path: new.path, got {fields!r}")
    pairs = [(e.path("fields", old), e.path(f"fields.{old}", new)) for old, new in fields.items()]

    def rename(doc: Doc) -> Doc:
        src = doc.source
        if src is not None:
            for old, new in pairs:
                value = _pop(src, old)
                if value is not _MISSING:
                    _set(src, new, value)
        return doc

    return rename


def _drop(e: _Entry) -> Transform:
    paths = e.paths("fields")

    def drop(doc: Doc) -> Doc:
        src = doc.source
        if src is not None:
            for path in paths:
                _pop(src, path)
        return doc

    return drop


_KeepTree: TypeAlias = "dict[str, _KeepTree | None]"


def _keep(e: _Entry) -> Transform:
    tree: _KeepTree = {}
    for head, last in e.paths("fields"):
        node: _KeepTree | None = tree
        for key in head:
            assert node is not None
            if key in node and node[key] is None:
                node = None  # a shorter path already keeps the whole object
                break
            node = node.setdefault(key, {})
        if node is not None:
            node[last] = None

    def keep(doc: Doc) -> Doc:
        if doc.source is not None:
            doc.source = _kept(doc.source, tree)
        return doc

    return keep


def _kept(src: dict[str, Any], tree: _KeepTree) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, sub in tree.items():
        value = src.get(key, _MISSING)
        if value is _MISSING:
            continue
        if sub is None:
            out[key] = value
        elif isinstance(value, dict) and (inner := _kept(value, sub)):
            out[key] = inner
    return out


def _mask(e: _Entry) -> Transform:
    paths = e.paths("fields")
    replacement = e.raw.get("replacement", "****")
    if isinstance(replacement, dict | list):
        e.reject(".replacement", f"expected a string, number, boolean or null, got {replacement!r}")

    def mask(doc: Doc) -> Doc:
        src = doc.source
        if src is not None:
            for head, last in paths:
                parent = _parent(src, head) if head else src
                if parent is not None and last in parent:
                    parent[last] = replacement
        return doc

    return mask


def _extract(e: _Entry) -> Transform:
    path = e.path("field")
    name = _dotted(path)

    def extract(doc: Doc) -> Doc:
        if doc.source is None:
            return doc
        value = _get(doc.source, path)
        if not isinstance(value, dict):
            what = "missing" if value is _MISSING else f"a {type(value).__name__}, not an object"
            msg = f"extract: field {name} is {what}"
            raise ValueError(msg)
        doc.source = value
        return doc

    return extract


def _required_field(doc: Doc, path: _Path, who: str) -> Any:
    value = _get(doc.source, path)
    if value is _MISSING:
        why = " (tombstone: no body)" if doc.source is None else ""
        msg = f"{who}: field {_dotted(path)} is missing{why}"
        raise ValueError(msg)
    return value


def _id_string(value: Any, path: _Path, who: str) -> str:
    """A document id or routing value: a non-empty string, or an integer as text."""
    if type(value) is str and value:
        return value
    if type(value) is int:
        return str(value)
    got = _short(value)
    msg = f"{who}: field {_dotted(path)} must be a non-empty string or an integer, got {got}"
    raise ValueError(msg)


def _key_from_field(e: _Entry) -> Transform:
    path = e.path("field")

    def key_from_field(doc: Doc) -> Doc:
        doc.key = _required_field(doc, path, "key_from_field")
        return doc

    return key_from_field


def _id_from_field(e: _Entry) -> Transform:
    path = e.path("field")

    def id_from_field(doc: Doc) -> Doc:
        value = _required_field(doc, path, "id_from_field")
        doc.id = _id_string(value, path, "id_from_field")
        return doc

    return id_from_field


def _timestamp_convert(e: _Entry) -> Transform:
    path = e.path("field")
    head, last = path
    to = e.choice("to", ("iso", "epoch_ms", "epoch_s"))
    seconds = e.choice("unit", ("ms", "s"), "ms") == "s"
    fmt = e.text("from_format")
    name = _dotted(path)

    def timestamp_convert(doc: Doc) -> Doc:
        parent = _parent(doc.source, head) if head else doc.source
        if parent is None:
            return doc
        value = parent.get(last)
        if value is None:
            return doc
        try:
            ms = _epoch_ms(value, seconds, fmt)
            parent[last] = _iso(ms) if to == "iso" else ms if to == "epoch_ms" else ms // 1000
        except ValueError as exc:
            msg = f"timestamp_convert: field {name}: {exc}"
            raise ValueError(msg) from None
        return doc

    return timestamp_convert


_OPS = ("eq", "ne", "gt", "ge", "lt", "le", "exists", "in", "regex")


def _filter(e: _Entry) -> Transform:
    kind = e.exactly_one(("topic", "header", "tombstone", "field"))
    if kind != "field":
        for key in ("op", "value"):
            if e.has(key):
                e.reject(f".{key}", "only valid with field:")
    cond: _Cond
    if kind == "topic":
        cond = _topic_cond(e.regex("topic"))
    elif kind == "header":
        cond = _header_cond(e.req_text("header"))
    elif kind == "tombstone":
        if e.raw["tombstone"] is not True:
            e.reject(".tombstone", "must be true (use negate: true to keep only tombstones)")
        cond = _is_tombstone
    else:
        cond = _field_cond(e)

    if e.flag("negate"):

        def keep_matching(doc: Doc) -> Doc | None:
            return doc if cond(doc) else None

        return keep_matching

    def drop_matching(doc: Doc) -> Doc | None:
        return None if cond(doc) else doc

    return drop_matching


def _is_tombstone(doc: Doc) -> bool:
    return doc.source is None or doc.record.value is None


def _topic_cond(pattern: re.Pattern[str]) -> _Cond:
    cache: dict[str, bool] = {}

    def topic_matches(doc: Doc) -> bool:
        topic = doc.record.topic
        hit = cache.get(topic)
        if hit is None:
            if len(cache) > _CACHE_LIMIT:
                cache.clear()
            hit = cache[topic] = pattern.fullmatch(topic) is not None
        return hit

    return topic_matches


def _header_cond(name: str) -> _Cond:
    def has_header(doc: Doc) -> bool:
        for key, _ in doc.record.headers:  # noqa: SIM110 - a loop beats any() over a generator
            if key == name:
                return True
        return False

    return has_header


def _field_cond(e: _Entry) -> _Cond:
    path = e.path("field")
    op = e.choice("op", _OPS, "eq")
    if op == "exists":
        if e.has("value"):
            e.reject(".value", "not used with op: exists")

        def exists(doc: Doc) -> bool:
            return _get(doc.source, path) is not _MISSING

        return exists
    if not e.has("value"):
        e.reject(".value", f"required for op: {op}")
    value = e.raw["value"]

    if op == "regex":
        pattern = e.regex("value")

        def regex(doc: Doc) -> bool:
            v = _get(doc.source, path)
            return type(v) is str and pattern.fullmatch(v) is not None

        return regex
    if op == "in":
        if not isinstance(value, list | tuple):
            e.reject(".value", f"expected a list for op: in, got {value!r}")
        try:
            choices: frozenset[Any] | tuple[Any, ...] = frozenset(value)
        except TypeError:  # unhashable members (objects, lists): compare one by one
            choices = tuple(value)
        compare: Callable[[Any, Any], bool] = _is_in
    elif op in ("eq", "ne"):
        choices = ()
        compare = _COMPARE[op]
    else:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            e.reject(".value", f"expected a number or a string for op: {op}, got {value!r}")
        choices = ()
        compare = _COMPARE[op]
    operand = choices if op == "in" else value

    def compare_field(doc: Doc) -> bool:
        v = _get(doc.source, path)
        if v is _MISSING:
            return False
        try:
            return compare(v, operand)
        except TypeError:  # e.g. "abc" > 5, or an object looked up in a set
            return False

    return compare_field


def _is_in(v: Any, choices: Any) -> bool:
    return v in choices


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda a, b: bool(a == b),
    "ne": lambda a, b: bool(a != b),
    "gt": lambda a, b: bool(a > b),
    "ge": lambda a, b: bool(a >= b),
    "lt": lambda a, b: bool(a < b),
    "le": lambda a, b: bool(a <= b),
}

_DOLLAR_GROUP = re.compile(r"\$(?:(\d+)|\{(\w+)\}|(\$))")


def _route(e: _Entry) -> Transform:
    if e.has("index") and e.has("topic_regex"):
        e.reject(".topic_regex", "give either index or topic_regex, not both")
    if not any(e.has(k) for k in ("index", "topic_regex", "routing_field")):
        e.reject(".index", "required for type route (or topic_regex, or routing_field)")
    if e.has("replacement") and not e.has("topic_regex"):
        e.reject(".replacement", "only valid with topic_regex")
    if e.has("timestamp_field") and not e.has("index"):
        e.reject(".timestamp_field", "only valid with index")

    set_index: Callable[[Doc], None] | None = None
    if e.has("index"):
        try:
            template = IndexTemplate(e.req_text("index"))
        except ValueError as exc:
            e.reject(".index", str(exc))
        if e.has("timestamp_field"):
            if not template.has_date:
                e.reject(".timestamp_field", "the index template has no date part")
            set_index = _index_from_field(template, e.path("timestamp_field"))
        else:
            set_index = _index_from_record(template)
    elif e.has("topic_regex"):
        set_index = _index_from_topic(e, e.regex("topic_regex"))

    if not e.has("routing_field"):
        assert set_index is not None
        only_index = set_index

        def route_index(doc: Doc) -> Doc:
            only_index(doc)
            return doc

        return route_index

    routing = e.path("routing_field")

    def route(doc: Doc) -> Doc:
        if set_index is not None:
            set_index(doc)
        doc.routing = _id_string(_required_field(doc, routing, "route"), routing, "route")
        return doc

    return route


def _index_from_record(template: IndexTemplate) -> Callable[[Doc], None]:
    if template.is_static:
        name = template.template

        def static_index(doc: Doc) -> None:
            doc.index = name

        return static_index
    render = template.render

    def record_index(doc: Doc) -> None:
        record = doc.record
        doc.index = render(record.topic, record.timestamp)

    return record_index


def _index_from_field(template: IndexTemplate, path: _Path) -> Callable[[Doc], None]:
    render = template.render
    name = _dotted(path)

    def field_index(doc: Doc) -> None:
        value = _required_field(doc, path, "route")
        try:
            ms = _epoch_ms(value)
        except ValueError as exc:
            msg = f"route: timestamp_field {name}: {exc}"
            raise ValueError(msg) from None
        doc.index = render(doc.record.topic, ms)

    return field_index


def _index_from_topic(e: _Entry, pattern: re.Pattern[str]) -> Callable[[Doc], None]:
    raw = e.req_text("replacement")
    replacement = _DOLLAR_GROUP.sub(
        lambda m: "$" if m.group(3) else f"\\g<{m.group(1) or m.group(2)}>", raw
    )
    try:
        pattern.sub(replacement, "")  # checks group references without a match
    except (re.error, IndexError) as exc:
        e.reject(".replacement", f"invalid replacement {raw!r}: {exc}")
    cache: dict[str, str | None] = {}

    def topic_index(doc: Doc) -> None:
        topic = doc.record.topic
        name = cache.get(topic, _MISSING)
        if name is _MISSING:
            if len(cache) > _CACHE_LIMIT:
                cache.clear()
            m = pattern.fullmatch(topic)
            name = cache[topic] = None if m is None else m.expand(replacement)
        if name is not None:
            doc.index = name

    return topic_index


def _python(e: _Entry) -> Transform:
    target = e.req_text("python")
    func = _import(e, target)
    if not e.has("config"):
        return func
    config = e.raw["config"]
    if not isinstance(config, Mapping) or not all(isinstance(k, str) for k in config):
        e.reject(".config", f"expected a map of keyword arguments, got {config!r}")
    try:
        transform = func(**config)
    except Exception as exc:
        msg = f"{target}(**config) failed: {type(exc).__name__}: {exc}"
        e.reject(".config", msg)
    if not callable(transform):
        e.reject(
            ".config", f"{target}(**config) returned {type(transform).__name__}, not a transform"
        )
    return transform


def _import(e: _Entry, target: str) -> Callable[..., Any]:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        e.reject(".python", f"cannot import {target!r}: expected package.module:function")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        e.reject(".python", f"cannot import {target!r}: {type(exc).__name__}: {exc}")
    if not callable(obj):
        e.reject(".python", f"cannot import {target!r}: {type(obj).__name__} is not callable")
    return obj


_BUILDERS: dict[str, Callable[[_Entry], Transform]] = {
    "insert_field": _insert_field,
    "rename": _rename,
    "drop": _drop,
    "keep": _keep,
    "mask": _mask,
    "extract": _extract,
    "key_from_field": _key_from_field,
    "id_from_field": _id_from_field,
    "timestamp_convert": _timestamp_convert,
    "filter": _filter,
    "route": _route,
    "python": _python,
}

_KEYS: dict[str, frozenset[str]] = {
    "insert_field": frozenset({"field", "value", "from", "format"}),
    "rename": frozenset({"fields"}),
    "drop": frozenset({"fields"}),
    "keep": frozenset({"fields"}),
    "mask": frozenset({"fields", "replacement"}),
    "extract": frozenset({"field"}),
    "key_from_field": frozenset({"field"}),
    "id_from_field": frozenset({"field"}),
    "timestamp_convert": frozenset({"field", "to", "unit", "from_format"}),
    "filter": frozenset({"topic", "header", "tombstone", "field", "op", "value", "negate"}),
    "route": frozenset({"index", "timestamp_field", "topic_regex", "replacement", "routing_field"}),
    "python": frozenset({"python", "config"}),
}
