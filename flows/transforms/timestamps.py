"""The `timestamp_convert` built-in, and the epoch/ISO helpers other built-ins share."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from flows.record import Doc
from flows.transforms.compiled import inline, parent_code, path_names
from flows.transforms.entry import CACHE_LIMIT, Entry, short
from flows.transforms.registry import Transform, builtin

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
_ONE_MS = timedelta(milliseconds=1)


def epoch_ms(value: Any, seconds: bool = False, fmt: str | None = None) -> int:
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
            msg = f"cannot parse {short(value)} as {expected}"
            raise ValueError(msg) from None
        if dt.tzinfo is None:
            return (dt - _EPOCH_NAIVE) // _ONE_MS
        return (dt - _EPOCH) // _ONE_MS
    msg = f"expected epoch milliseconds or a date string, got {type(value).__name__} {short(value)}"
    raise ValueError(msg)


_ISO_SECONDS: dict[int, str] = {}
"""`2024-05-01T12:00:00` by epoch second: records arrive in time order, so most hit."""
_ISO_MILLIS = tuple(f".{ms:03d}Z" for ms in range(1000))
"""`.123Z` by millisecond: a tuple index, where formatting each one took longer than the rest."""


def iso(ms: int) -> str:
    """`2024-05-01T12:00:00.123Z`: ISO-8601 in UTC with milliseconds."""
    seconds, millis = divmod(ms, 1000)
    prefix = _ISO_SECONDS.get(seconds)
    if prefix is None:
        try:
            prefix = (_EPOCH_NAIVE + timedelta(seconds=seconds)).isoformat()
        except OverflowError:
            msg = f"timestamp {ms} ms is out of range"
            raise ValueError(msg) from None
        if len(_ISO_SECONDS) >= CACHE_LIMIT:
            _ISO_SECONDS.clear()
        _ISO_SECONDS[seconds] = prefix
    return prefix + _ISO_MILLIS[millis]


@builtin(
    "timestamp_convert",
    keys=("field", "to", "unit", "from_format"),
    doc="""field, to iso|epoch_ms|epoch_s, unit ms|s (of numeric input, default ms),
    from_format (strptime). Accepts integers and floats (epoch in `unit`; floats rounded to
    the millisecond) and strings: `from_format` when given, else ISO-8601 as
    `datetime.fromisoformat` reads it (`2024-05-01`, `2024-05-01T12:00:00.123Z`, `+02:00`
    offsets); no offset means UTC. Output: `2024-05-01T12:00:00.123Z`, or integer ms/s
    (truncated). Missing or null: unchanged; anything else: ValueError.""",
)
def timestamp_convert(e: Entry) -> Transform:
    path = e.path("field")
    to = e.choice("to", ("iso", "epoch_ms", "epoch_s"))
    seconds = e.choice("unit", ("ms", "s"), "ms") == "s"
    fmt = e.text("from_format")
    head, last, name, parent_of = path.head, path.last, path.dotted, path.parent

    def timestamp_convert(doc: Doc) -> Doc:
        parent = parent_of(doc.source) if head else doc.source
        if parent is None:
            return doc
        value = parent.get(last)
        if value is None:
            return doc
        try:
            ms = epoch_ms(value, seconds, fmt)
            parent[last] = iso(ms) if to == "iso" else ms if to == "epoch_ms" else ms // 1000
        except ValueError as exc:
            msg = f"timestamp_convert: field {name}: {exc}"
            raise ValueError(msg) from None
        return doc

    parent = parent_code("$parent", "doc.source", path) if head else "$parent = doc.source"
    # `iso` inline for a second it has seen: its cache, then the milliseconds' suffix.
    iso_code = (
        "$iso($ms) if ($p := $seconds_iso.get($ms // 1000)) is None else $p + $millis[$ms % 1000]"
    )
    result = {"iso": iso_code, "epoch_ms": "$ms", "epoch_s": "$ms // 1000"}[to]
    from_int = "$v * 1000" if seconds else "$v"  # epoch_ms's first case, inline
    code = f"""{parent}
if $parent is not None:
    $v = $parent.get($last)
    if $v is not None:
        try:
            $ms = {from_int} if type($v) is int else $epoch_ms($v, $seconds, $fmt)
            $parent[$last] = {result}
        except ValueError as $exc:
            raise ValueError(f"timestamp_convert: field {{$name}}: {{$exc}}") from None"""
    return inline(
        timestamp_convert,
        code,
        last=last,
        epoch_ms=epoch_ms,
        seconds=seconds,
        fmt=fmt,
        iso=iso,
        seconds_iso=_ISO_SECONDS,
        millis=_ISO_MILLIS,
        name=name,
        **path_names(path),
    )
