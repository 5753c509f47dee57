"""The `filter` built-in: drop (or, negated, keep only) the records that match a condition."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeAlias

from flows.record import Doc
from flows.transforms.compiled import Inline, get_code, inline, path_names
from flows.transforms.entry import Entry, topic_matcher
from flows.transforms.registry import Transform, builtin
from sinks.model import MISSING, FieldPath

_Cond: TypeAlias = Callable[[Doc], bool]

_OPS = ("eq", "ne", "gt", "ge", "lt", "le", "exists", "in", "regex")


@builtin(
    "filter",
    keys=("topic", "header", "tombstone", "field", "op", "value", "negate"),
    doc="""drops matching records (negate: true keeps only them); exactly one of topic
    (regex, full match), header (name present), tombstone: true, or field with op
    eq|ne|gt|ge|lt|le|in|regex (full match)|exists (default eq) and value. A missing field
    never matches, nor do values that do not compare (`"a" > 1`).""",
)
def filter_documents(e: Entry) -> Transform:
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

    spec = getattr(cond, "__inline__", None)
    if spec is None:  # the condition is called
        spec = Inline("$m = $cond(doc)", {"cond": cond})
    if e.flag("negate"):

        def keep_matching(doc: Doc) -> Doc | None:
            return doc if cond(doc) else None

        return inline(keep_matching, spec.code + "\nif not $m:\n    return []", **spec.names)

    def drop_matching(doc: Doc) -> Doc | None:
        return None if cond(doc) else doc

    return inline(drop_matching, spec.code + "\nif $m:\n    return []", **spec.names)


def _is_tombstone(doc: Doc) -> bool:
    return doc.source is None or doc.record.value is None


def _topic_cond(pattern: re.Pattern[str]) -> _Cond:
    matches = topic_matcher(pattern)

    def topic_matches(doc: Doc) -> bool:
        return matches(doc.record.topic)

    return inline(topic_matches, "$m = $matches(record.topic)", matches=matches)


def _header_cond(name: str) -> _Cond:
    def has_header(doc: Doc) -> bool:
        for key, _ in doc.record.headers:  # noqa: SIM110 - a loop beats any() over a generator
            if key == name:
                return True
        return False

    return has_header


def _field_cond(e: Entry) -> _Cond:
    path = e.path("field")
    get = path.get
    op = e.choice("op", _OPS, "eq")
    if op == "exists":
        if e.has("value"):
            e.reject(".value", "not used with op: exists")

        def exists(doc: Doc) -> bool:
            return get(doc.source) is not MISSING

        code = get_code("$v", "doc.source", path) + "\n$m = $v is not _MISSING"
        return _inline_cond(exists, code, path)
    if not e.has("value"):
        e.reject(".value", f"required for op: {op}")
    value = e.raw["value"]

    if op == "regex":
        pattern = e.regex("value")

        def regex(doc: Doc) -> bool:
            v = get(doc.source)
            return type(v) is str and pattern.fullmatch(v) is not None

        code = get_code("$v", "doc.source", path)
        code += "\n$m = type($v) is str and $pattern.fullmatch($v) is not None"
        return _inline_cond(regex, code, path, pattern=pattern)
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
        v = get(doc.source)
        if v is MISSING:
            return False
        try:
            return compare(v, operand)
        except TypeError:  # e.g. "abc" > 5, or an object looked up in a set
            return False

    code = get_code("$v", "doc.source", path)
    code += f"""
if $v is _MISSING:
    $m = False
else:
    try:
        $m = {_COMPARE_CODE[op]}
    except TypeError:
        $m = False"""
    return _inline_cond(compare_field, code, path, operand=operand)


_COMPARE_CODE = {
    "eq": "bool($v == $operand)",
    "ne": "bool($v != $operand)",
    "gt": "bool($v > $operand)",
    "ge": "bool($v >= $operand)",
    "lt": "bool($v < $operand)",
    "le": "bool($v <= $operand)",
    "in": "$v in $operand",
}
"""`_COMPARE` (and `_is_in`) as the compiled chain's expressions."""


def _inline_cond(cond: _Cond, code: str, path: FieldPath, **names: Any) -> _Cond:
    """Attach the code setting `$m` to the condition's result (`flows.transforms.compiled`)."""
    return inline(cond, code, **path_names(path), **names)


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
