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
"""

from __future__ import annotations

import datetime
import io
import math
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from uuid import UUID

from flows.decode.common import DecodeError, Decoder, b64
from flows.decode.registry import (
    DESERIALIZER_CONF,
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
        self._direct: dict[tuple[str, bytes], Any] = {}
        """(topic, the 4 id bytes) -> the parsed writer schema, or None: not read directly."""

    def __call__(self, data: bytes, ctx: Any) -> Any:
        if not prefix_framed(data, ctx, self._header):
            return self._confluent(data, ctx)
        key = (ctx.topic, data[1:5])
        schema = self._direct.get(key, _UNKNOWN)
        if schema is _UNKNOWN:
            value = self._confluent(data, ctx)  # fetches the schema, or raises
            try:
                direct = self._direct_schema(*key)
            except Exception:  # the record is decoded; read its kind the long way
                direct = None
            if len(self._direct) >= _CACHE_LIMIT:
                self._direct.clear()
            self._direct[key] = direct
            return value
        if schema is None:
            return self._confluent(data, ctx)
        payload = io.BytesIO(data)
        payload.seek(5)
        return self._read(payload, schema, schema, False)

    def _direct_schema(self, topic: str, schema_id: bytes) -> Any:
        """The parsed writer schema if `AvroDeserializer` would only call fastavro with it."""
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
        return parsed if type(parsed) is dict and parsed.get("type") == "record" else None


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
