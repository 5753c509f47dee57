"""A reader compiled from one Avro writer schema: Confluent-framed bytes to JSON-compatible
values in one pass, for `flows.decode.avro`.

Why: fastavro's reader calls the payload's `read()` once per byte of every integer and once
or twice per field, and its values still need a pass to become JSON-compatible; the
function this module writes for a schema walks the bytes by index and makes each value
JSON-compatible as it reads it (bytes and fixed as base64 text), with nothing to look up per
record.

It reads what it is sure to read as fastavro would, and raises `Unread` on anything else:
a truncated payload, a negative length, an integer past 64 bits, a union or enum index out
of range, invalid UTF-8, a NaN or infinite float. The caller then decodes the record the
long way (fastavro and `jsonable`), whose value or error is the one that counts: so a value
it returns is fastavro's, converted as `jsonable` converts it. Schemas with logical types or
recursive named types, and schemas too deeply nested for one Python function, get no
reader (`compile_reader` returns None).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from flows.decode.common import b64

__all__ = ["Unread", "compile_reader"]


class Unread(Exception):  # not an error: "read it the long way"
    """The compiled reader leaves this record to fastavro."""


_MAX_LINES = 20_000
"""Past this many lines of source a schema is left to fastavro: named types reused inside
named types are written out at each use, so the source can grow exponentially with depth."""

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


class _Unsupported(Exception):
    """The schema holds something the compiler does not read."""


def compile_reader(schema: dict[str, Any], start: int = 5) -> Callable[[bytes], Any] | None:
    """`payload -> value` for payloads of this parsed (fastavro `parse_schema`) writer
    schema, whose Avro body starts at `start`; None when the schema is not one it reads."""
    named = schema.get("__named_schemas", {})
    writer = _Writer(named)
    try:
        result = writer.value(schema, 1, ())
    except _Unsupported:
        return None
    body = "\n".join(writer.lines)
    source = (
        f"def read(data):\n    pos = {start}\n{body}\n"
        f"    if pos > len(data):  # a length past the end\n        raise Unread\n"
        f"    return {result}\n"
    )
    namespace: dict[str, Any] = {
        "Unread": Unread,
        "b64": b64,
        "unpack_float": struct.Struct("<f").unpack_from,
        "unpack_double": struct.Struct("<d").unpack_from,
        "C": writer.constants,
    }
    try:
        exec(compile(source, f"<avro reader {schema.get('name', '')}>", "exec"), namespace)  # noqa: S102  # our own source; names as repr() literals
    except (SyntaxError, RecursionError, MemoryError):  # nested too deep for one function
        return None
    read: Callable[[bytes], Any] = namespace["read"]
    return read


class _Writer:
    """Writes the body of `read`: statements into `lines`, values into fresh variables."""

    def __init__(self, named: dict[str, Any]) -> None:
        self.named = named
        self.lines: list[str] = []
        self.constants: list[Any] = []
        self._n = 0

    def var(self) -> str:
        self._n += 1
        return f"v{self._n}"

    def const(self, value: Any) -> str:
        self.constants.append(value)
        return f"C[{len(self.constants) - 1}]"

    def emit(self, depth: int, line: str) -> None:
        if len(self.lines) >= _MAX_LINES:
            raise _Unsupported
        self.lines.append("    " * depth + line)

    def long(self, depth: int) -> str:
        """Read a zig-zag varint; the variable that holds it. One byte is the common case."""
        n, s = self.var(), self.var()
        for line in (
            f"{n} = data[pos]",
            "pos += 1",
            f"if {n} & 0x80:",
            f"    {n} &= 0x7F",
            f"    {s} = 7",
            "    while True:",
            f"        {s}_b = data[pos]",
            "        pos += 1",
            f"        {n} |= ({s}_b & 0x7F) << {s}",
            f"        if not {s}_b & 0x80:",
            "            break",
            f"        {s} += 7",
            f"    if {n} >> 64:",
            "        raise Unread",
            f"{n} = ({n} >> 1) ^ -({n} & 1)",
        ):
            self.emit(depth, line)
        return n

    def raw(self, depth: int) -> str:
        """Read length-prefixed bytes; the variable that holds them. A slice past the end
        is cut short, and `read` refuses what ends past the end."""
        n, s, out = self.var(), self.var(), self.var()
        for line in (
            f"{n} = data[pos]",
            "pos += 1",
            f"if {n} & 0x81:  # a length of more than one byte, or negative",
            f"    {s}_b = {n}",
            f"    {n} &= 0x7F",
            f"    {s} = 7",
            f"    while {s}_b & 0x80:",
            f"        {s}_b = data[pos]",
            "        pos += 1",
            f"        {n} |= ({s}_b & 0x7F) << {s}",
            f"        {s} += 7",
            f"    if {n} & 1 or {n} >> 64:",
            "        raise Unread",
            f"{n} >>= 1",
            f"{out} = data[pos:pos + {n}]",
            f"pos += {n}",
        ):
            self.emit(depth, line)
        return out

    def value(self, schema: Any, depth: int, stack: tuple[str, ...]) -> str:
        """Emit the statements reading one value of `schema`; the expression that is it."""
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return self.primitive(schema, depth)
            if schema in stack or schema not in self.named:  # recursive, or unknown
                raise _Unsupported
            return self.value(self.named[schema], depth, (*stack, schema))
        if isinstance(schema, list):
            return self.union(schema, depth, stack)
        if not isinstance(schema, dict) or "logicalType" in schema:
            raise _Unsupported
        kind = schema.get("type")
        name = schema.get("name")
        if kind in ("record", "error", "enum", "fixed") and isinstance(name, str):
            stack = (*stack, name)
        if kind in ("record", "error"):
            items = [
                f"{_name(f['name'])}: {self.value(f['type'], depth, stack)}"
                for f in schema["fields"]
            ]
            return "{" + ", ".join(items) + "}"
        if kind == "enum":
            index = self.long(depth)
            self.emit(depth, f"if {index} < 0:")
            self.emit(depth, "    raise Unread")
            return f"{self.const(tuple(schema['symbols']))}[{index}]"
        if kind == "fixed":
            width = schema["size"]
            if type(width) is not int or width < 0:  # fastavro's reader refuses it
                raise _Unsupported
            out = self.var()
            self.emit(depth, f"{out} = b64(data[pos:pos + {width}])")
            self.emit(depth, f"pos += {width}")
            return out
        if kind in ("array", "map"):
            return self.blocks(schema, kind, depth, stack)
        if isinstance(kind, str) and kind in _PRIMITIVES:
            return self.primitive(kind, depth)
        raise _Unsupported

    def primitive(self, kind: str, depth: int) -> str:
        if kind == "null":
            return "None"
        if kind in ("int", "long"):
            return self.long(depth)
        out = self.var()
        if kind == "boolean":
            self.emit(depth, f"{out} = data[pos] != 0")
            self.emit(depth, "pos += 1")
        elif kind in ("float", "double"):
            width = 4 if kind == "float" else 8
            self.emit(depth, f"{out}, = unpack_{kind}(data, pos)  # struct.error if short")
            self.emit(depth, f"pos += {width}")
            self.emit(depth, f"if {out} - {out}:  # NaN or infinite: jsonable's error")
            self.emit(depth, "    raise Unread")
        elif kind == "string":
            self.emit(depth, f"{out} = {self.raw(depth)}.decode()")
        else:  # bytes
            self.emit(depth, f"{out} = b64({self.raw(depth)})")
        return out

    def union(self, branches: list[Any], depth: int, stack: tuple[str, ...]) -> str:
        index, out = self.long(depth), self.var()
        for i, branch in enumerate(branches):
            self.emit(depth, f"{'if' if i == 0 else 'elif'} {index} == {i}:")
            value = self.value(branch, depth + 1, stack)
            self.emit(depth + 1, f"{out} = {value}")
        self.emit(depth, "else:")
        self.emit(depth, "    raise Unread")
        return out

    def blocks(self, schema: dict[str, Any], kind: str, depth: int, stack: tuple[str, ...]) -> str:
        """An array or a map: blocks of items until a block of count 0."""
        out = self.var()
        self.emit(depth, f"{out} = {'[]' if kind == 'array' else '{}'}")
        self.emit(depth, "while True:")
        count = self.long(depth + 1)
        self.emit(depth + 1, f"if {count} == 0:")
        self.emit(depth + 1, "    break")
        self.emit(depth + 1, f"if {count} < 0:")
        self.emit(depth + 1, f"    {count} = -{count}")
        skipped = self.long(depth + 2)  # the block's size in bytes, unused
        self.emit(depth + 2, f"del {skipped}")
        self.emit(depth + 1, f"for _ in range({count}):")
        if kind == "array":
            item = self.value(schema["items"], depth + 2, stack)
            self.emit(depth + 2, f"{out}.append({item})")
        else:
            key = f"{self.raw(depth + 2)}.decode()"
            keyvar = self.var()
            self.emit(depth + 2, f"{keyvar} = {key}")
            item = self.value(schema["values"], depth + 2, stack)
            self.emit(depth + 2, f"{out}[{keyvar}] = {item}")
        return out


def _name(name: Any) -> str:
    """A field name as a Python literal (repr of a str is one, whatever it holds)."""
    if not isinstance(name, str):
        raise _Unsupported
    return repr(name)
