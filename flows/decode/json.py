"""The `json` and `connect-json` converters.

- `json`: `orjson.loads` with the strict rules of `flows.decode.common` (invalid UTF-8,
  invalid JSON, trailing garbage, NaN/Infinity, lone surrogates, nesting deeper than 1024,
  integers outside 64 bits are a `DecodeError`). Values must be JSON objects; keys may be
  any JSON value.
- `connect-json`: Kafka Connect `JsonConverter`. A message that is an object with exactly
  the keys `schema` and `payload` is an envelope (`schemas.enable=true`) and yields its
  payload; anything else is taken as `schemas.enable=false` and used as is. Where the
  envelope's schema names a Connect logical type, these are converted:
  `org.apache.kafka.connect.data.Decimal` (base64 big-endian unscaled bytes, `scale`
  parameter) becomes a plain decimal *string* such as `"12.30"` (a string keeps every digit;
  Elasticsearch coerces it into numeric fields); `org.apache.kafka.connect.data.Date` (days
  since the epoch) becomes `"YYYY-MM-DD"` (as a number Elasticsearch would read it as epoch
  milliseconds). `Timestamp` (epoch milliseconds, what Elasticsearch `date` accepts), `Time`
  and `bytes` fields (already base64 strings) are kept as they are. A `Decimal` written with
  `decimal.format=NUMERIC` is already a number and is kept.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import threading
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson
import simdjson

from flows.decode.common import (
    DIGITS_TO_ZERO,
    SNIPPET,
    TWENTY_DIGITS,
    DecodeError,
    Decoder,
    check_big_ints,
    check_ints,
    invalid_json,
    loads,
    not_object,
    snippet,
)

if TYPE_CHECKING:
    from flows.config import Settings
    from flows.record import Record

_CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_CONNECT_DATE = "org.apache.kafka.connect.data.Date"
# Bytes both logical type names start with: no hit, no schema walk.
_CONNECT_CONVERTED_PREFIX = b"org.apache.kafka.connect.data.D"
_EPOCH = datetime.date(1970, 1, 1)


def build_json(settings: Settings, is_value: bool) -> Decoder:
    """The `json` converter: a value must be an object, a key any JSON value."""
    return _json_value_decoder(check=True) if is_value else _json_key_decoder()


class IntsChecked(NamedTuple):
    """The `json` value decoder with its 64-bit integer check left to the caller.

    The check (`check_ints`) reads every byte of the value: an eighth of a small record's
    processing, a quarter of a 2 KB one's (docs/benchmarks.md, "Figures behind the
    code"). orjson reads an integer beyond 64 bits as a float of magnitude 2**63 or
    more, and orjson (or `json`) writes such a float with an exponent, `e+18` or more. A
    caller that encodes the decoded document whole, unchanged, need only call `check(value)`
    when the encoding holds a `+`: a byte search at C speed.

    One difference, accepted: an integer beyond 64 bits under a key that a later duplicate
    key replaces is not in the decoded document (orjson keeps the last), so its encoding
    holds no `+` and the record is indexed; the checked decoder, which reads the bytes,
    refuses it. No digits are lost either way: the document never holds that integer.
    """

    decode: Decoder
    """`decode_json_value` without the integer check."""
    check: Callable[[bytes], None]
    """Raise the DecodeError the checked decoder would have raised for these bytes."""


def json_ints_checked_later(settings: Settings) -> IntsChecked | None:
    """For VALUE_FORMAT=json, the value decoder whose integer check the caller makes (see
    `IntsChecked`); None for other formats."""
    if settings.value_format != "json":
        return None
    return IntsChecked(_json_value_decoder(check=False), check_ints)


RAW_MAX_BYTES = 1 << 18
"""Larger values take the decoder's way: a simdjson parser keeps the buffers of the largest
document it read (up to ~13 times its size for an array of numbers) for as long as its
thread lives, where orjson's memory goes with each document."""


class RawObjects:
    """Which JSON values can be a `_bulk` source line exactly as they arrived.

    Without transforms, and when the action reads no field of the document (ids from the key
    or the coordinates, no routing field: `ActionBuilder.takes_raw_sources`), the flow needs
    a value only to know that the `json` decoder accepts it as an object. simdjson validates
    without building the dict, and the bytes need no encoding: on the bench's records a
    quarter to a fifth of orjson's decode + encode (docs/benchmarks.md, "Figures behind the
    code").

    `accepts(value)` says yes only to bytes that start with `{`, hold no newline (the
    `_bulk` body is NDJSON), are at most RAW_MAX_BYTES long and that simdjson parses.
    Where simdjson and the decoder's rules differ, simdjson refuses more: a byte order mark
    fails the first byte; its nesting limit is at or below orjson's 1,024 levels; an
    integer outside 64 bits is its BIGINT_ERROR. Whatever it refuses goes the decoder's
    way, with the decoder's verdict and dead letter
    (`test_raw_objects_accept_only_what_the_decoder_accepts` on the fuzz inputs; 6.4 million
    generated and mutated values gave no counterexample).

    What differs for values sent as they are: Elasticsearch reads the producer's text, not
    orjson's. It refuses a duplicate key, which orjson resolves to the last value; a
    number written with more than 1,000 characters (its parser's limit), which orjson
    shortens to a double; and a number written with an exponent in a `date` field
    (`1.7E12`, which orjson wrote `1700000000000.0` and `epoch_millis` reads): each is a
    dead letter at stage `index` with Elasticsearch's reason. Numbers keep their spelling
    (`1E2`, not `100.0`, also in a `keyword` field); `_source` holds the bytes as produced.
    """

    def __init__(self) -> None:
        self._local = threading.local()  # a simdjson parser serves one thread at a time

    def accepts(self) -> Callable[[bytes], bool]:
        """The check for the calling thread (fetch it once per batch, not per record)."""
        check: Callable[[bytes], bool] | None = getattr(self._local, "check", None)
        if check is None:
            parser = simdjson.Parser(max_capacity=RAW_MAX_BYTES)
            check = self._local.check = _raw_object_check(parser.parse)
        return check


def _raw_object_check(parse: Callable[[bytes], Any]) -> Callable[[bytes], bool]:
    def accepts(value: bytes) -> bool:
        # `0x0A in value` is memchr; `b"\n" in value` is a substring search, measurably
        # slower per small value, and `value[0]` is cheaper than a slice.
        if not value or value[0] != 0x7B or 0x0A in value:  # `{`, a newline
            return False
        try:
            parse(value)  # the document proxy it returns is dropped at once: reuse is safe
        except Exception:  # any refusal: the decoder decides, and says why
            return False
        return True

    return accepts


def _json_value_decoder(check: bool) -> Decoder:
    orjson_loads = orjson.loads
    json_error = orjson.JSONDecodeError
    table = DIGITS_TO_ZERO
    twenty = TWENTY_DIGITS

    def decode_json_value(record: Record) -> dict[str, Any]:
        data: bytes = record.value  # type: ignore[assignment]  # never None (see flows.decode)
        try:
            doc = orjson_loads(data)
        except json_error as e:
            raise invalid_json(data, e) from None
        if type(doc) is not dict:
            raise not_object(data, doc)
        if check and twenty in data.translate(table):
            check_big_ints(data)
        return doc

    return decode_json_value


def _json_key_decoder() -> Decoder:
    def decode_json_key(record: Record) -> Any:
        return loads(record.key)  # type: ignore[arg-type]  # never None

    return decode_json_key


def build_connect_json(settings: Settings, is_value: bool) -> Decoder:
    """The `connect-json` converter: Kafka Connect `JsonConverter` messages, the `payload`
    of a `{schema, payload}` envelope, else the message itself."""

    def decode_connect(record: Record) -> Any:
        data: bytes = record.value if is_value else record.key  # type: ignore[assignment]
        msg = loads(data)
        if type(msg) is dict and len(msg) == 2 and "schema" in msg and "payload" in msg:
            payload = msg["payload"]
            if _CONNECT_CONVERTED_PREFIX in data:
                try:
                    payload = _connect_convert(msg["schema"], payload)
                except RecursionError:
                    err = f"Connect schema nested too deeply; payload starts {snippet(data)}"
                    raise DecodeError(err) from None
        else:
            payload = msg
        if is_value and type(payload) is not dict:
            raise not_object(data, payload, "Connect JSON")
        return payload

    return decode_connect


def _connect_convert(schema: Any, value: Any) -> Any:
    """Convert the Decimal and Date logical types in `value` as its Connect schema says."""
    if value is None or type(schema) is not dict:
        return value
    name = schema.get("name")
    if name == _CONNECT_DECIMAL:
        return _connect_decimal(schema, value)
    if name == _CONNECT_DATE:
        return _connect_date(value)
    kind = schema.get("type")
    if kind == "struct" and type(value) is dict:
        for fld in schema.get("fields") or ():
            if type(fld) is dict and (fname := fld.get("field")) in value:
                value[fname] = _connect_convert(fld, value[fname])
    elif kind == "array" and type(value) is list:
        items = schema.get("items")
        return [_connect_convert(items, v) for v in value]
    elif kind == "map":
        keys, values = schema.get("keys"), schema.get("values")
        if type(value) is dict:  # string keys: written as an object
            for k in value:
                value[k] = _connect_convert(values, value[k])
        elif type(value) is list:  # other keys: written as [key, value] pairs
            return [
                [_connect_convert(keys, p[0]), _connect_convert(values, p[1])]
                if type(p) is list and len(p) == 2
                else p
                for p in value
            ]
    return value


def _connect_decimal(schema: Mapping[str, Any], value: Any) -> Any:
    if not isinstance(value, str):
        return value  # decimal.format=NUMERIC: already a number
    params = schema.get("parameters")
    try:
        scale = int(params["scale"]) if isinstance(params, Mapping) else 0
        raw = base64.b64decode(value, validate=True)
    except (KeyError, TypeError, ValueError, binascii.Error):
        msg = f"Connect Decimal: invalid base64 value or scale parameter {value[:SNIPPET]!r}"
        raise DecodeError(msg) from None
    unscaled = int.from_bytes(raw, "big", signed=True)
    return f"{Decimal(unscaled).scaleb(-scale):f}"


def _connect_date(value: Any) -> Any:
    if type(value) is not int:
        return value
    try:
        return (_EPOCH + datetime.timedelta(days=value)).isoformat()
    except OverflowError:
        msg = f"Connect Date: {value} days since the epoch is out of range"
        raise DecodeError(msg) from None
