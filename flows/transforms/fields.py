"""Built-ins that edit the document body: insert_field, rename, drop, keep, mask, extract.

A tombstone (`source` None) passes through them unchanged. Missing fields are skipped
(extract raises: it has nothing to make the body).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from flows.record import Doc
from flows.transforms.compiled import indent, inline, parent_code, path_names, set_code
from flows.transforms.entry import Entry
from flows.transforms.headers import header_text
from flows.transforms.registry import Transform, builtin
from flows.transforms.timestamps import iso
from sinks.model import MISSING, FieldPath


@builtin(
    "insert_field",
    keys=("field", "value", "from", "format", "header", "default"),
    doc="""field, and value (static) or from (topic, partition, offset, timestamp, key = the
    decoded doc.key, header = the value of header: <name> as UTF-8 text, base64 when it is
    not UTF-8; a missing header leaves the field out unless default: is given); format:
    iso|epoch_ms only with from: timestamp.""",
)
def insert_field(e: Entry) -> Transform:
    path = e.path("field")
    head, key, set_path = path.head, path.last, path.set
    if e.exactly_one(("value", "from")) == "value":
        for only in ("format", "header", "default"):
            if e.has(only):
                e.reject(f".{only}", _ONLY_WITH[only])
        value = e.raw["value"]
        if isinstance(value, dict | list):
            # A fresh copy per record: later transforms may mutate what was inserted.
            def insert_copy(doc: Doc) -> Doc:
                if doc.source is not None:
                    set_path(doc.source, copy.deepcopy(value))
                return doc

            return insert_copy
        if not head:

            def insert_top(doc: Doc) -> Doc:
                if doc.source is not None:
                    doc.source[key] = value
                return doc

            code = "if doc.source is not None:\n    doc.source[$key] = $value"
            return inline(insert_top, code, key=key, value=value)

        def insert_static(doc: Doc) -> Doc:
            if doc.source is not None:
                set_path(doc.source, value)
            return doc

        code = "if doc.source is not None:\n    $set(doc.source, $value)"
        return inline(insert_static, code, set=set_path, value=value)

    origin = e.choice("from", ("topic", "partition", "offset", "timestamp", "key", "header"))
    fmt = e.choice("format", ("epoch_ms", "iso"), "epoch_ms")
    for only, needs in (("format", "timestamp"), ("header", "header"), ("default", "header")):
        if e.has(only) and origin != needs:
            e.reject(f".{only}", _ONLY_WITH[only])
    if origin == "header":
        return _insert_header(e.req_text("header"), path, e.has("default"), e.raw.get("default"))
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
            set_path(doc.source, get(doc))
        return doc

    value = _FROM_CODE.get(get, "$get(doc)")
    code = "if doc.source is not None:\n" + indent(set_code("doc.source", value, path))
    return inline(insert_from, code, get=get, **path_names(path))


_ONLY_WITH = {
    "format": "only valid with from: timestamp",
    "header": "only valid with from: header",
    "default": "only valid with from: header",
}


def _insert_header(name: str, path: FieldPath, has_default: bool, default: Any) -> Transform:
    """`from: header`: the header's text (see flows.transforms.headers), or `default`."""
    mutable = isinstance(default, dict | list)  # then a fresh copy per record
    set_path = path.set

    def insert_header(doc: Doc) -> Doc:
        if doc.source is not None:
            value = header_text(doc, name)
            if value is not MISSING:
                set_path(doc.source, value)
            elif has_default:
                set_path(doc.source, copy.deepcopy(default) if mutable else default)
        return doc

    fallback = "$set(doc.source, $copy($default) if $mutable else $default)"
    code = f"""if doc.source is not None:
    $v = _MISSING
    for $hk, $hv in record.headers:
        if $hk == $name:
            $v = $hv
    if $v is not None and $v is not _MISSING:
        try:
            $v = $v.decode("utf-8")
        except UnicodeDecodeError:
            $v = $b64encode($v).decode("ascii")
    if $v is not _MISSING:
{indent(set_code("doc.source", "$v", path), 2)}
    elif $has_default:
        {fallback}"""
    return inline(
        insert_header,
        code,
        b64encode=base64.b64encode,
        name=name,
        set=path.set,
        **path_names(path),
        has_default=has_default,
        copy=copy.deepcopy,
        mutable=mutable,
        default=default,
    )


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
    return None if ts is None else iso(ts)


def _doc_key(doc: Doc) -> Any:
    return doc.key


_FROM_CODE: dict[Callable[[Doc], Any], str] = {
    _record_topic: "record.topic",
    _record_partition: "record.partition",
    _record_offset: "record.offset",
    _record_timestamp: "record.timestamp",
    _doc_key: "doc.key",
}
"""The compiled chain's expression for an insert_field `from:` (`record` is `doc.record`)."""


@builtin("rename", keys=("fields",), doc="fields {old.path: new.path}; missing fields are skipped.")
def rename(e: Entry) -> Transform:
    fields = e.required("fields")
    if not isinstance(fields, Mapping) or not fields:
        e.reject(".fields", f"expected a non-empty map of old.path: new.path, got {fields!r}")
    pairs = [
        (_popper(e.path("fields", old)), e.path(f"fields.{old}", new).set)
        for old, new in fields.items()
    ]

    def rename(doc: Doc) -> Doc:
        src = doc.source
        if src is not None:
            for pop, set_new in pairs:
                value = pop(src)
                if value is not MISSING:
                    set_new(src, value)
        return doc

    lines = ["$src = doc.source", "if $src is not None:"]
    names: dict[str, Any] = {}
    for j, old in enumerate(fields):
        lines.append(indent(_pop_code(f"$v{j}", "$src", e.path("fields", old), str(j)), 1))
        names |= path_names(e.path("fields", old), str(j))
        lines.append(f"    if $v{j} is not _MISSING:")
        lines.append(f"        $set{j}($src, $v{j})")
        names[f"set{j}"] = pairs[j][1]
    return inline(rename, "\n".join(lines), **names)


@builtin("drop", keys=("fields",), doc="fields [...]: removed; missing fields are skipped.")
def drop(e: Entry) -> Transform:
    pops = [_popper(path) for path in e.paths("fields")]

    def drop(doc: Doc) -> Doc:
        src = doc.source
        if src is not None:
            for pop in pops:
                pop(src)
        return doc

    lines = ["$src = doc.source", "if $src is not None:"]
    names: dict[str, Any] = {}
    for j, path in enumerate(e.paths("fields")):
        lines.append(indent(_pop_code("$_", "$src", path, str(j)), 1))
        names |= path_names(path, str(j))
    return inline(drop, "\n".join(lines), **names)


def _pop_code(target: str, src: str, path: FieldPath, tag: str) -> str:
    """Statements setting `target` to what `_popper(path)(src)` returns, and doing its pop."""
    if not path.head:
        return f"{target} = {src}.pop($k{tag}_0, _MISSING)"
    parent = parent_code("$parent", src, path, tag)
    last = f"$k{tag}_{len(path.head)}"
    return f"""{parent}
{target} = _MISSING if $parent is None else $parent.pop({last}, _MISSING)"""


def _popper(path: FieldPath) -> Callable[[dict[str, Any]], Any]:
    """`path.pop`, or for a top-level field the dict's own pop (one call less per record)."""
    if path.head:
        return path.pop
    last = path.last
    return lambda src: src.pop(last, MISSING)


_KeepTree: TypeAlias = "dict[str, _KeepTree | None]"


@builtin(
    "keep",
    keys=("fields",),
    doc="""fields [...]: only these are kept (nested paths keep the nesting; an object none
    of whose listed fields exist is left out).""",
)
def keep(e: Entry) -> Transform:
    tree: _KeepTree = {}
    for path in e.paths("fields"):
        node: _KeepTree | None = tree
        for key in path.head:
            assert node is not None
            if key in node and node[key] is None:
                node = None  # a shorter path already keeps the whole object
                break
            node = node.setdefault(key, {})
        if node is not None:
            node[path.last] = None

    def keep(doc: Doc) -> Doc:
        if doc.source is not None:
            doc.source = _kept(doc.source, tree)
        return doc

    return keep


def _kept(src: dict[str, Any], tree: _KeepTree) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, sub in tree.items():
        value = src.get(key, MISSING)
        if value is MISSING:
            continue
        if sub is None:
            out[key] = value
        elif isinstance(value, dict) and (inner := _kept(value, sub)):
            out[key] = inner
    return out


@builtin(
    "mask",
    keys=("fields", "replacement"),
    doc="""fields [...], replacement (default "****"): present values of any type are
    replaced; missing fields are skipped.""",
)
def mask(e: Entry) -> Transform:
    paths = [(p.head, p.last, p.parent) for p in e.paths("fields")]
    replacement = e.raw.get("replacement", "****")
    if isinstance(replacement, dict | list):
        e.reject(".replacement", f"expected a string, number, boolean or null, got {replacement!r}")

    def mask(doc: Doc) -> Doc:
        src = doc.source
        if src is not None:
            for head, last, parent_of in paths:
                parent = parent_of(src) if head else src
                if parent is not None and last in parent:
                    parent[last] = replacement
        return doc

    lines = ["$src = doc.source", "if $src is not None:"]
    names: dict[str, Any] = {"replacement": replacement}
    for j, path in enumerate(e.paths("fields")):
        last = f"$k{j}_{len(path.head)}"
        lines.append(
            indent(
                parent_code("$parent", "$src", path, str(j)) if path.head else "$parent = $src", 1
            )
        )
        lines.append(f"    if $parent is not None and {last} in $parent:")
        lines.append(f"        $parent[{last}] = $replacement")
        names |= path_names(path, str(j))
    return inline(mask, "\n".join(lines), **names)


@builtin(
    "extract",
    keys=("field",),
    doc="field; that object becomes the body (missing or not an object: ValueError).",
)
def extract(e: Entry) -> Transform:
    path = e.path("field")
    get, name = path.get, path.dotted

    def extract(doc: Doc) -> Doc:
        if doc.source is None:
            return doc
        value = get(doc.source)
        if not isinstance(value, dict):
            what = "missing" if value is MISSING else f"a {type(value).__name__}, not an object"
            msg = f"extract: field {name} is {what}"
            raise ValueError(msg)
        doc.source = value
        return doc

    return extract
