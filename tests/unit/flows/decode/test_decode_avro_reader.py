"""flows.decode.avro_reader: each value the compiled reader returns is fastavro's, converted
by `jsonable`; whatever it cannot read it refuses (the caller reads it the long way)."""

from __future__ import annotations

import copy
import io
import random
import struct
import time
from typing import Any

import fastavro
import pytest

from flows.decode import DecodeError
from flows.decode.avro import jsonable
from flows.decode.avro_reader import compile_reader

FRAME = b"\x00\x00\x00\x00\x07"

INNER = {
    "type": "record",
    "name": "Inner",
    "fields": [
        {"name": "b", "type": ["null", "bytes", "double", "string"]},
        {"name": "f", "type": {"type": "fixed", "name": "F2", "size": 2}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
    ],
}
SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "n", "type": "int"},
            {"name": "s", "type": "string"},
            {"name": "x", "type": "double"},
            {"name": "y", "type": "float"},
            {"name": "ok", "type": "boolean"},
            {"name": "nothing", "type": "null"},
            {"name": "raw", "type": "bytes"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
    },
    {
        "type": "record",
        "name": "Outer",
        "fields": [
            {"name": "inner", "type": INNER},
            {"name": "again", "type": "Inner"},
            {"name": "many", "type": {"type": "array", "items": "Inner"}},
            {"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "long"}}},
            {"name": "opt", "type": ["null", "Inner"]},
            {"name": "ff", "type": "F2"},
        ],
    },
]


def _value(schema: Any, rng: random.Random, named: dict[str, Any], depth: int = 0) -> Any:
    """A random value of `schema` (unparsed form), edge values included."""
    if isinstance(schema, str) and schema in named:
        return _value(named[schema], rng, named, depth)
    if isinstance(schema, list):
        return _value(rng.choice(schema), rng, named, depth)
    if isinstance(schema, dict):
        kind = schema["type"]
        if kind == "record":
            named[schema["name"]] = schema
            return {f["name"]: _value(f["type"], rng, named, depth + 1) for f in schema["fields"]}
        if kind == "enum":
            named[schema["name"]] = schema
            return rng.choice(schema["symbols"])
        if kind == "fixed":
            named[schema["name"]] = schema
            return bytes(rng.randrange(256) for _ in range(schema["size"]))
        if kind == "array":
            return [_value(schema["items"], rng, named, depth + 1) for _ in range(rng.randrange(4))]
        if kind == "map":
            return {
                f"k{i}\u00e9": _value(schema["values"], rng, named, depth + 1)
                for i in range(rng.randrange(3))
            }
        return _value(kind, rng, named, depth)
    return {
        "null": lambda: None,
        "boolean": lambda: rng.random() < 0.5,
        "int": lambda: rng.choice([0, -1, 1, 63, -64, 64, 2**31 - 1, -(2**31)]),
        "long": lambda: rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randrange(-(2**40), 2**40)]),
        "float": lambda: rng.choice([0.0, -0.0, 1.5, 3.4e38, float("nan"), float("inf")]),
        "double": lambda: rng.choice([0.0, 1e308, -2.5, 5e-324, float("nan"), float("-inf")]),
        "string": lambda: rng.choice(["", "a", "ü €", "x" * 70, "\U0001f600" * 40]),
        "bytes": lambda: bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 63, 64, 200]))),
    }[schema]()


def _long_way(schema: Any, payload: bytes) -> tuple[str, Any]:
    """What flows.decode.avro's fastavro path gives: ("ok", value) or ("error", ...)."""
    try:
        value = fastavro.schemaless_reader(io.BytesIO(payload[5:]), schema, None)
        return "ok", jsonable(copy.deepcopy(value))
    except DecodeError as e:
        return "error", str(e)
    except Exception as e:
        return "error", type(e).__name__


def _check(read: Any, schema: Any, payload: bytes) -> bool:
    """The compiled reader agrees with the long way, or leaves the record to it."""
    try:
        got = read(payload)
    except Exception:
        return False
    assert _long_way(schema, payload) == ("ok", got), payload
    return True


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_compiled_reader_gives_the_long_ways_values(index: int) -> None:
    schema = fastavro.parse_schema(copy.deepcopy(SCHEMAS[index]))
    read = compile_reader(schema)
    assert read is not None
    rng = random.Random(index)
    read_ok = refused = 0
    for _ in range(400):
        value = _value(copy.deepcopy(SCHEMAS[index]), rng, {})
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, value)
        payload = FRAME + buf.getvalue()
        if _long_way(schema, payload)[0] == "ok":
            assert _check(read, schema, payload)  # a valid record is read
            read_ok += 1
        else:  # NaN or infinity: jsonable's error, from the long way
            assert not _check(read, schema, payload)
            refused += 1
        # damaged payloads: cut short, with extra bytes, bytes changed
        _check(read, schema, payload[: rng.randrange(5, len(payload) + 1)])
        _check(read, schema, payload + b"\x01\xff")
        damaged = bytearray(payload)
        for _ in range(rng.randrange(1, 4)):
            damaged[rng.randrange(5, len(damaged))] = rng.randrange(256)
        _check(read, schema, bytes(damaged))
    assert read_ok and refused


def test_integers_past_64_bits_and_negative_lengths_are_left_to_fastavro() -> None:
    schema = fastavro.parse_schema(
        {"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]}
    )
    read = compile_reader(schema)
    assert read is not None
    assert read(FRAME + b"\x06abc") == {"s": "abc"}
    assert read(FRAME + b"\x80\x01" + b"a" * 64) == {"s": "a" * 64}
    for payload in (
        FRAME + b"\x05abc",  # length -3
        FRAME + b"\xff" * 10 + b"\x7f",  # a varint past 64 bits
        FRAME + b"\x08abc",  # 4 bytes announced, 3 there
        FRAME + b"\x02\xff",  # invalid UTF-8
        FRAME,  # nothing
    ):
        with pytest.raises(Exception):  # noqa: B017  # any: the caller reads it again
            read(payload)


def test_schemas_it_does_not_compile() -> None:
    logical = {"type": "long", "logicalType": "timestamp-millis"}
    recursive = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"]}],
    }
    for schema in (
        {"type": "record", "name": "L", "fields": [{"name": "t", "type": logical}]},
        recursive,
    ):
        assert compile_reader(fastavro.parse_schema(schema)) is None
    deep: Any = "long"
    for _ in range(30):  # more nested blocks than one Python function can hold
        deep = {"type": "array", "items": deep}
    nested = {"type": "record", "name": "D", "fields": [{"name": "d", "type": deep}]}
    assert compile_reader(fastavro.parse_schema(nested)) is None


def test_a_fixed_of_negative_size_is_left_to_fastavro() -> None:
    """fastavro refuses every record of it (a dead letter): no reader may index one."""
    schema = {
        "type": "record",
        "name": "F",
        "fields": [
            {"name": "a", "type": {"type": "fixed", "name": "N", "size": -3}},
            {"name": "b", "type": "string"},
        ],
    }
    assert compile_reader(fastavro.parse_schema(schema)) is None


def test_named_types_reused_at_every_depth_are_left_to_fastavro() -> None:
    """Each use of a named type is written out again: a schema reusing one inside another
    level after level would take minutes to compile, so it gets no reader, at once."""
    first = {"type": "record", "name": "L0", "fields": [{"name": "x", "type": "long"}]}
    levels: list[Any] = [first]
    for i in range(1, 17):
        fields = [{"name": f"f{j}", "type": ["null", f"L{i - 1}"]} for j in range(2)]
        levels.append({"type": "record", "name": f"L{i}", "fields": fields})
    top = {"type": "record", "name": "Top", "fields": [{"name": "all", "type": levels}]}
    started = time.monotonic()
    assert compile_reader(fastavro.parse_schema(top)) is None
    assert time.monotonic() - started < 10


def test_floats_read_as_fastavro_reads_them() -> None:
    schema = fastavro.parse_schema(
        {"type": "record", "name": "F", "fields": [{"name": "f", "type": "float"}]}
    )
    read = compile_reader(schema)
    assert read is not None
    for bits in (0x3F800001, 0x00000001, 0x7F7FFFFF, 0x80000000):
        payload = FRAME + struct.pack("<I", bits)
        assert _check(read, schema, payload)
