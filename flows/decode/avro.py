"""The `avro` converter: confluent-kafka's `AvroDeserializer`, and a direct read where it
would only call fastavro.

Confluent framing (magic byte 0 + schema id, or magic byte 1 + schema GUID, or the id in a
`__value_schema_id`/`__key_schema_id` header), decoded with the writer schema fetched by id
(cached by the client; subjects use the TOPIC strategy, which only matters for data-contract
rules). Results are made JSON-compatible: bytes/fixed -> base64 string, decimal -> plain
decimal string, timestamp/date/time -> ISO 8601 string, uuid -> string; a NaN or infinite
float is a `DecodeError`.

Why a direct read: per record, `AvroDeserializer` resolves the subject, looks up and parses
the writer schema in its caches, expands the schema and collects its inline tags for
data-contract rules, whether the schema has rules or not: about three times what fastavro's
own read of the record costs (docs/benchmarks.md, "Figures behind the code"). It also keeps
the record's key for rule actions, which need rules. Where the writer schema is a record
with no references and no domain or encoding rules, and nothing but the payload's prefix
names it, all it does is `schemaless_reader(payload, writer, writer)`; for such records that
call is made here, with the schema it parsed. The first record of each topic and schema id,
and every other record, go through `AvroDeserializer`, which fetches the schema and raises
what it raises (flows.decode.registry classifies it).

Once a schema id is known, its records take a shorter way still (`read_known`, which
`RegistryDecoder` tries before it builds a serialization context): a reader compiled for
that writer schema (flows.decode.avro_reader), which makes values JSON-compatible as it
reads them; for a schema it does not compile, fastavro with a conversion that visits only
the fields whose types need one (`converter`) instead of `jsonable` walking every value. A
record either cannot read is decoded the long way, which raises the error a dead letter
carries.
"""

from __future__ import annotations

import datetime
import io
import math
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from uuid import UUID

from flows.decode.avro_reader import compile_reader
from flows.decode.common import DecodeError, Decoder, b64
from flows.decode.registry import (
    DESERIALIZER_CONF,
    KNOWN_MISS,
    Deserializer,
    Post,
    RegistryDecoder,
    prefix_framed,
    registry_conf,
    schema_id_header,
)

if TYPE_CHECKING:
    from flows.config import Settings

_UNKNOWN: Any = object()
_CACHE_LIMIT = 1_000
"""(topic, schema id) pairs remembered before the memory starts over."""


def build_avro(settings: Settings, is_value: bool) -> Decoder:
    """The `avro` converter: Confluent-framed Avro decoded with the writer schema from the
    Schema Registry; bytes, decimals, dates and uuids become JSON text."""
    return RegistryDecoder(
        "avro", is_value, registry_conf(settings), _avro, settings.schema_registry_retry_budget_s
    )


def _avro(client: Any, is_value: bool) -> tuple[Deserializer, Post]:
    return _AvroDeserializer(client, is_value), jsonable


class _AvroDeserializer:
    """`(data, ctx) -> value`: `AvroDeserializer`, or fastavro directly (module docstring)."""

    def __init__(self, client: Any, is_value: bool) -> None:
        from confluent_kafka.schema_registry.avro import AvroDeserializer
        from fastavro import schemaless_reader

        self._client = client
        self._confluent = AvroDeserializer(client, conf=dict(DESERIALIZER_CONF))
        self._read = schemaless_reader
        self._suffix = "-value" if is_value else "-key"
        self._header = schema_id_header(is_value)
        self._direct: dict[tuple[str, bytes], _Direct | None] = {}
        """(topic, the 4 id bytes) -> its direct reader, or None: not read directly."""
        self._readers: dict[str, _Direct] = {}
        """Schema text -> its reader: topics whose records share a schema share one reader,
        compiled once (compiling a large schema takes a fraction of a second)."""

    def __call__(self, data: bytes, ctx: Any) -> Any:
        if not prefix_framed(data, ctx, self._header):
            return self._confluent(data, ctx)
        key = (ctx.topic, data[1:5])
        direct = self._direct.get(key, _UNKNOWN)
        if direct is _UNKNOWN:
            value = self._confluent(data, ctx)  # fetches the schema, or raises
            try:
                direct = self._direct_reader(*key)
            except Exception:  # the record is decoded; read its kind the long way
                direct = None
            if len(self._direct) >= _CACHE_LIMIT:
                self._direct.clear()
            self._direct[key] = direct
            return value
        if direct is None:
            return self._confluent(data, ctx)
        payload = io.BytesIO(data)
        payload.seek(5)
        return self._read(payload, direct.schema, direct.schema, False)

    def read_known(self, data: bytes, topic: str, headers: Any) -> Any:
        """The JSON-compatible value of a record of a schema id already read directly, or
        `KNOWN_MISS` (anything else, or a record that fails: the long way says why)."""
        if len(data) <= 5 or data[0] != 0:
            return KNOWN_MISS
        direct = self._direct.get((topic, data[1:5]))
        if direct is None or (headers and any(h[0] == self._header for h in headers)):
            return KNOWN_MISS
        try:
            return direct.read(data)
        except Exception:  # decoded again the long way, which raises the error to report
            return KNOWN_MISS

    def _direct_reader(self, topic: str, schema_id: bytes) -> _Direct | None:
        """The reader of the writer schema if `AvroDeserializer` would only call fastavro
        with it, else None."""
        confluent = self._confluent
        # Its own parsed-schema cache, and what would make it do more than read: not public
        # API, so a confluent-kafka without them leaves every record to AvroDeserializer.
        parse = getattr(confluent, "_get_parsed_schema", None)
        more = ("_use_latest_version", "_use_latest_with_metadata", "_from_dict", "_schema")
        if parse is None or any(getattr(confluent, a, True) for a in more):
            return None
        schema = self._client.get_schema(int.from_bytes(schema_id, "big"), topic + self._suffix)
        rules = schema.rule_set
        if schema.schema_type not in (None, "AVRO") or schema.references:
            return None
        if rules is not None and (rules.domain_rules or rules.encoding_rules):
            return None
        parsed = parse(schema)
        if type(parsed) is not dict or parsed.get("type") != "record":
            return None
        direct = self._readers.get(schema.schema_str)
        if direct is None:
            if len(self._readers) >= _CACHE_LIMIT:
                self._readers.clear()
            direct = self._readers[schema.schema_str] = _Direct(parsed)
        return direct


class _Direct:
    """The reader of one writer schema: `read(payload)` is the JSON-compatible value of a
    Confluent-framed payload, by the reader compiled for the schema
    (flows.decode.avro_reader), else by fastavro with only the fields that need converting
    visited (`converter`). Either may raise on a record it cannot read."""

    __slots__ = ("read", "schema")

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        compiled = compile_reader(schema)
        self.read: Callable[[bytes], Any] = compiled or _fastavro_reader(schema)


def _fastavro_reader(schema: dict[str, Any]) -> Callable[[bytes], Any]:
    from fastavro import schemaless_reader

    convert = converter(schema)

    def read(data: bytes) -> Any:
        payload = io.BytesIO(data)
        payload.seek(5)
        value = schemaless_reader(payload, schema, None)
        return value if convert is None else convert(value)

    return read


_PLAIN = frozenset({"null", "boolean", "int", "long", "string", "enum"})
"""Types whose decoded values are JSON-compatible as fastavro returns them."""


def converter(schema: Any) -> Callable[[Any], Any] | None:
    """What makes a value fastavro decoded with this (parsed) schema JSON-compatible, as
    `jsonable` would, visiting only what can need it; None: the value already is.

    Floats, bytes, fixed, logical types, unions holding any of them and named-type
    references are left to `jsonable`, so each result and each error is jsonable's."""
    if isinstance(schema, str):
        return None if schema in _PLAIN else jsonable
    if isinstance(schema, list):  # a union: jsonable tells its branches apart by value
        return None if all(converter(s) is None for s in schema) else jsonable
    if not isinstance(schema, dict) or "logicalType" in schema:
        return jsonable
    kind = schema.get("type")
    if kind in ("record", "error"):
        fields = [(f["name"], c) for f in schema["fields"] if (c := converter(f["type"]))]
        return None if not fields else _record(fields)
    if kind == "array":
        items = converter(schema["items"])
        return None if items is None else _array(items)
    if kind == "map":
        values = converter(schema["values"])
        return None if values is None else _map(values)
    return converter(kind) if isinstance(kind, str) and kind != "fixed" else jsonable


def _record(fields: list[tuple[str, Callable[[Any], Any]]]) -> Callable[[Any], Any]:
    def convert(value: dict[str, Any]) -> dict[str, Any]:  # fastavro's fresh dict
        for name, field in fields:
            value[name] = field(value[name])
        return value

    return convert


def _array(items: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: [items(v) for v in value]


def _map(values: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: {k: values(v) for k, v in value.items()}


def jsonable(value: Any) -> Any:
    """Make a decoded Avro value JSON-compatible (see the module docstring)."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is dict:
        return {k if type(k) is str else str(k): jsonable(v) for k, v in value.items()}
    if t is list or t is tuple:
        return [jsonable(v) for v in value]
    if t is float:
        if not math.isfinite(value):
            msg = f"float {value} cannot be indexed (JSON has no NaN or Infinity)"
            raise DecodeError(msg)
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b64(bytes(value))
    if isinstance(value, Decimal):
        return f"{value:f}"
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    return str(value)
