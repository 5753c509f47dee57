"""Record decoders: Kafka key/value bytes to documents, one decoder per role, built at start.

`build_decoder(settings, "value")` returns a callable `Record -> dict` (the document);
`build_decoder(settings, "key")` returns a callable `Record -> Any` (the decoded key). The
callables are never given a null key or value: the caller handles tombstones and null keys.

Formats (VALUE_FORMAT / KEY_FORMAT):

- `json`: `orjson.loads`. Rejected as `DecodeError`: invalid UTF-8 (a byte order mark
  included), invalid JSON, trailing garbage, NaN/Infinity, lone surrogates, nesting deeper
  than 1024, and integer literals outside [-2**63, 2**64 - 1] (orjson would silently turn
  them into floats and lose digits). Values must be JSON objects; keys may be any JSON value.
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
- `string`: strict UTF-8; a value becomes `{VALUE_FIELD: text}`, a key the text.
- `bytes`: base64; a value becomes `{VALUE_FIELD: "<base64>"}`, a key the base64 string.
- `avro`, `json-schema`: Confluent Schema Registry framing (magic byte 0 + schema id, or
  magic byte 1 + schema GUID, or the id in a `__value_schema_id`/`__key_schema_id` header),
  decoded by confluent-kafka's `AvroDeserializer` / `JSONDeserializer` with the writer
  schema fetched by id (cached by the client; subjects use the TOPIC strategy, which only
  matters for data-contract rules). JSON Schema payloads are validated against the writer
  schema and parsed with the same rules as `json`. Avro results are made JSON-compatible:
  bytes/fixed -> base64 string, decimal -> plain decimal string, timestamp/date/time ->
  ISO 8601 string, uuid -> string; a NaN or infinite float is a `DecodeError`.
- `protobuf`: Confluent framing (magic byte 0 + schema id, or magic byte 1 + schema GUID, or
  the id in a `__value_schema_id`/`__key_schema_id` header), then the message-index array
  (zig-zag varints; a single 0 byte means the first message), then the payload. No
  generated classes: confluent-kafka's `ProtobufDeserializer` only parses into a class given
  to it, so this decoder does what it does internally, with the writer schema: fetch the
  schema by id in `serialized` form (a base64 `FileDescriptorProto`) and its references
  (recursively, by subject and version; `google/protobuf/`, `google/type/` and `confluent/`
  files are built in, as in confluent-kafka), build one descriptor pool per schema id and
  one message class (`message_factory.GetMessageClass`) per schema id and message index.
  Both are cached: a record costs the framing, a dict lookup, the upb parse and the
  conversion. No reader schema, migration or data-contract rule is applied. The message
  becomes what `json_format.MessageToDict(preserving_proto_field_name=True,
  always_print_fields_with_no_presence=True)` returns (the proto3 JSON mapping: enums by
  name, bytes base64, `Timestamp` RFC 3339, `Duration` `"1.5s"`, wrappers as their value,
  `Any` with `@type`; fields without presence are always there, with their default when
  unset: proto3 cannot tell unset from 0/""/false, so such values stay searchable and
  every document has the same fields) with two exceptions: int64/uint64/sint64/fixed64
  values are exact JSON integers, not the mapping's strings (Elasticsearch reads
  `long`/`unsigned_long` exactly, and a quoted number would be dynamically mapped as text;
  `MessageToDict`'s `unquote_int64_if_possible` only unquotes values a double holds), and a
  NaN or infinite float/double is a `DecodeError` (as for avro). Fields the writer schema
  lacks are skipped (protobuf's unknown fields). A message index not in the schema, a
  payload the parser rejects (truncated, invalid wire type, invalid UTF-8 in a proto3
  string) or a schema id that is not PROTOBUF is a `DecodeError`.

Errors: `DecodeError` is a bad record (dead-lettered or fatal per ERRORS_TOLERANCE): the
bytes are not in the configured format, the schema id is unknown to the registry (error
codes 40401/40402/40403), the magic byte is wrong, the payload fails schema validation.
`RegistryUnavailableError` is NOT a record error: the registry could not be reached, timed
out, answered 5xx/429, refused the credentials (401/403) or answered something that is not
a Schema Registry error (such as a 404 page from a wrong URL). Every record would fail the
same way, so the caller must stop or retry, never dead-letter. The registry client already
retries a request `max.retries` times (SCHEMA_REGISTRY_CONFIG_MAX_RETRIES, default 3) before
this is raised. Configuration problems found on first use raise `ConfigError`.

The Schema Registry client is created on the first record that needs it, inside the
returned callable, never at import or build time; an unset `timeout` defaults to 30 s (the
client's own default is to wait forever).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import functools
import importlib
import json
import math
import threading
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Literal
from urllib.parse import urlsplit
from uuid import UUID

import orjson

from flows.config import Settings
from flows.deep import deep_recursion
from flows.errors import ConfigError, PipelineError
from flows.record import Record

Role = Literal["value", "key"]
Decoder = Callable[[Record], Any]

__all__ = ["DecodeError", "Decoder", "RegistryUnavailableError", "build_decoder"]


class DecodeError(PipelineError):
    """A record's bytes cannot be decoded in the configured format (a bad record).

    The message says what was wrong and quotes at most the first 64 bytes of the payload.
    """


class RegistryUnavailableError(PipelineError):
    """The Schema Registry could not answer (unreachable, 5xx, 429, auth refused).

    Not a record error: every record would fail the same way, so the flow must stop or
    retry rather than dead-letter records that are fine.
    """


_SNIPPET = 64
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1
# A JSON integer outside [-2**63, 2**64 - 1] has at least 20 digits, or is negative with
# 19. Mapping digits and "-" to "0" and searching for twenty in a row is a C-speed
# pre-check (no hit for 19-digit positive numbers such as nanosecond timestamps); only a
# hit (rare; digits in strings may also cause one) runs the exact, slower check.
_DIGITS_TO_ZERO = bytes.maketrans(b"-123456789", b"0000000000")
_TWENTY_DIGITS = b"0" * 20

_CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_CONNECT_DATE = "org.apache.kafka.connect.data.Date"
# Bytes both logical type names start with: no hit, no schema walk.
_CONNECT_CONVERTED_PREFIX = b"org.apache.kafka.connect.data.D"
_EPOCH = datetime.date(1970, 1, 1)

_REGISTRY_NUMERIC_KEYS = frozenset(
    {
        "timeout",
        "cache.capacity",
        "cache.latest.ttl.sec",
        "max.retries",
        "retries.wait.ms",
        "retries.max.wait.ms",
    }
)
_REGISTRY_DEFAULT_TIMEOUT_S = 30
# Schema Registry error codes that mean "no such schema/subject/version": a record problem.
_NOT_FOUND_CODES = frozenset({40401, 40402, 40403})


def build_decoder(settings: Settings, role: Role) -> Decoder:
    """Build the decoder for record values or keys, as configured.

    Args:
        settings: The flow settings (`value_format`/`key_format`, `value_field`, registry).
        role: `"value"` for documents (must decode to a JSON object) or `"key"`.

    Returns:
        A callable taking a `Record` whose value (or key) is not None, returning a `dict`
        for role value and any JSON-compatible value for role key.

    Raises:
        ConfigError: The format is unknown or the registry settings are invalid.
        ValueError: `role` is neither "value" nor "key".
    """
    if role not in ("value", "key"):
        msg = f"role must be 'value' or 'key', got {role!r}"
        raise ValueError(msg)
    is_value = role == "value"
    fmt = settings.value_format if is_value else settings.key_format
    setting = "VALUE_FORMAT" if is_value else "KEY_FORMAT"

    if fmt == "json":
        return _json_value_decoder() if is_value else _json_key_decoder()
    if fmt == "connect-json":
        return _connect_decoder(is_value)
    if fmt == "string":
        return _string_decoder(is_value, settings.value_field)
    if fmt == "bytes":
        return _bytes_decoder(is_value, settings.value_field)
    if fmt in ("avro", "json-schema", "protobuf"):
        if not settings.schema_registry_url:
            msg = f"SCHEMA_REGISTRY_URL: required when {setting}={fmt}"
            raise ConfigError(msg)
        conf = _registry_conf(settings.schema_registry_url, settings.schema_registry_config)
        return _RegistryDecoder(fmt, is_value, conf)
    msg = f"{setting}: unknown format {fmt!r}"
    raise ConfigError(msg)


# -- helpers shared by the formats


def _snippet(data: bytes) -> str:
    """The first 64 bytes of `data`, repr'd, with the total length when cut."""
    if len(data) <= _SNIPPET:
        return repr(data)
    return f"{data[:_SNIPPET]!r}... ({len(data)} bytes)"


def _invalid_json(data: bytes, e: orjson.JSONDecodeError) -> DecodeError:
    return DecodeError(f"invalid JSON: {e}; payload starts {_snippet(data)}")


def _not_object(data: bytes, doc: Any, what: str = "JSON") -> DecodeError:
    return DecodeError(
        f"{what} value must be an object, got {_type_name(doc)}; payload starts {_snippet(data)}"
    )


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _parse_int_checked(text: str) -> int:
    try:
        value = int(text)
    except ValueError:  # more digits than int() accepts (4300)
        value = _INT_MAX + 1
    if not _INT_MIN <= value <= _INT_MAX:
        shown = text if len(text) <= 30 else f"{text[:30]}... ({len(text)} digits)"
        msg = f"integer {shown} does not fit in 64 bits"
        raise DecodeError(msg)
    return value


def _check_big_ints(data: bytes) -> None:
    """Raise DecodeError if valid JSON `data` has an integer outside 64 bits (slow path)."""
    try:
        with deep_recursion():
            json.loads(data, parse_int=_parse_int_checked)
    except RecursionError:
        msg = f"JSON nested too deeply to check its integers; payload starts {_snippet(data)}"
        raise DecodeError(msg) from None


def _loads(data: bytes) -> Any:
    """`orjson.loads` with the extra integer check; any failure is a DecodeError."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise _invalid_json(data, e) from None
    if _TWENTY_DIGITS in data.translate(_DIGITS_TO_ZERO):
        _check_big_ints(data)
    return doc


# -- json


def _json_value_decoder() -> Decoder:
    loads = orjson.loads
    json_error = orjson.JSONDecodeError
    table = _DIGITS_TO_ZERO
    twenty = _TWENTY_DIGITS

    def decode_json_value(record: Record) -> dict[str, Any]:
        data: bytes = record.value  # type: ignore[assignment]  # never None (see module doc)
        try:
            doc = loads(data)
        except json_error as e:
            raise _invalid_json(data, e) from None
        if type(doc) is not dict:
            raise _not_object(data, doc)
        if twenty in data.translate(table):
            _check_big_ints(data)
        return doc

    return decode_json_value


def _json_key_decoder() -> Decoder:
    def decode_json_key(record: Record) -> Any:
        return _loads(record.key)  # type: ignore[arg-type]  # never None

    return decode_json_key


# -- connect-json


def _connect_decoder(is_value: bool) -> Decoder:
    def decode_connect(record: Record) -> Any:
        data: bytes = record.value if is_value else record.key  # type: ignore[assignment]
        msg = _loads(data)
        if type(msg) is dict and len(msg) == 2 and "schema" in msg and "payload" in msg:
            payload = msg["payload"]
            if _CONNECT_CONVERTED_PREFIX in data:
                try:
                    payload = _connect_convert(msg["schema"], payload)
                except RecursionError:
                    err = f"Connect schema nested too deeply; payload starts {_snippet(data)}"
                    raise DecodeError(err) from None
        else:
            payload = msg
        if is_value and type(payload) is not dict:
            raise _not_object(data, payload, "Connect JSON")
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
        msg = f"Connect Decimal: invalid base64 value or scale parameter {value[:_SNIPPET]!r}"
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


# -- string and bytes


def _string_decoder(is_value: bool, value_field: str) -> Decoder:
    def text_of(data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            msg = f"invalid UTF-8 at byte {e.start}: {e.reason}; payload starts {_snippet(data)}"
            raise DecodeError(msg) from None

    if is_value:

        def decode_string_value(record: Record) -> dict[str, Any]:
            return {value_field: text_of(record.value)}  # type: ignore[arg-type]

        return decode_string_value

    def decode_string_key(record: Record) -> Any:
        return text_of(record.key)  # type: ignore[arg-type]

    return decode_string_key


def _b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def _bytes_decoder(is_value: bool, value_field: str) -> Decoder:
    if is_value:

        def decode_bytes_value(record: Record) -> dict[str, Any]:
            return {value_field: _b64(record.value)}  # type: ignore[arg-type]

        return decode_bytes_value

    def decode_bytes_key(record: Record) -> Any:
        return _b64(record.key)  # type: ignore[arg-type]

    return decode_bytes_key


# -- Schema Registry formats


def _registry_conf(url: str, extra: Mapping[str, str]) -> dict[str, Any]:
    """The client configuration: URL, SCHEMA_REGISTRY_CONFIG with numbers as numbers."""
    for u in url.split(","):
        if not u.strip().startswith(("http://", "https://")):
            msg = "SCHEMA_REGISTRY_URL: expected http(s)://host:port URLs separated by commas"
            raise ConfigError(msg)
    conf: dict[str, Any] = {"url": url, "timeout": _REGISTRY_DEFAULT_TIMEOUT_S}
    for key, value in extra.items():
        if key == "url":
            msg = "SCHEMA_REGISTRY_CONFIG_URL: set SCHEMA_REGISTRY_URL instead"
            raise ConfigError(msg)
        if key in _REGISTRY_NUMERIC_KEYS and isinstance(value, str):
            try:
                conf[key] = int(value) if value.strip().lstrip("-").isdigit() else float(value)
            except ValueError:
                name = "SCHEMA_REGISTRY_CONFIG_" + key.upper().replace(".", "_")
                msg = f"{name}: expected a number, got {value!r}"
                raise ConfigError(msg) from None
        else:
            conf[key] = value
    return conf


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The exceptions the registry client raises when it gets no HTTP answer."""
    from confluent_kafka.schema_registry.error import OAuthTokenError

    errors: list[type[BaseException]] = [OAuthTokenError]
    try:  # the HTTP library confluent-kafka uses: httpx2 if installed, else httpx
        httpx = importlib.import_module("httpx2")
    except ImportError:  # pragma: no cover - depends on the installed extras
        httpx = importlib.import_module("httpx")
    errors.append(httpx.TransportError)
    return tuple(errors)


def _redacted(url: str) -> str:
    """The registry URL(s) without any user:password part."""
    out = []
    for u in url.split(","):
        parts = urlsplit(u.strip())
        out.append(parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl())
    return ",".join(out)


class _RegistryDecoder:
    """Decodes Confluent Schema Registry framed records (avro, json-schema, protobuf).

    The client and deserializer are created on the first call, under a lock, so building the
    decoder and pickling it never touch the network.
    """

    def __init__(self, fmt: str, is_value: bool, conf: dict[str, Any]) -> None:
        self._fmt = fmt
        self._is_value = is_value
        self._conf = conf
        self._lock = threading.Lock()
        self._deserializer: Callable[[bytes, Any], Any] | None = None
        self._client: Any = None
        self._field: Any = None
        self._ctx: Callable[..., Any] | None = None
        self._registry_error: type[Exception] | None = None
        self._unavailable: tuple[type[BaseException], ...] = ()

    def __getstate__(self) -> dict[str, Any]:
        return {"fmt": self._fmt, "is_value": self._is_value, "conf": self._conf}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["fmt"], state["is_value"], state["conf"])  # type: ignore[misc]

    def _start(self) -> Callable[[bytes, Any], Any]:
        with self._lock:
            if self._deserializer is not None:
                return self._deserializer
            from confluent_kafka.schema_registry import SchemaRegistryClient, SchemaRegistryError
            from confluent_kafka.serialization import MessageField, SerializationContext

            try:
                client = SchemaRegistryClient(self._conf)
            except (TypeError, ValueError) as e:
                msg = f"SCHEMA_REGISTRY_CONFIG: {e}"
                raise ConfigError(msg) from None
            deser_conf = {"subject.name.strategy.type": "TOPIC"}
            deserializer: Callable[[bytes, Any], Any]
            if self._fmt == "avro":
                from confluent_kafka.schema_registry.avro import AvroDeserializer

                deserializer = AvroDeserializer(client, conf=deser_conf)
            elif self._fmt == "protobuf":
                deserializer = _ProtobufDeserializer(client, self._is_value)
            else:
                from confluent_kafka.schema_registry.json_schema import JSONDeserializer

                deserializer = JSONDeserializer(
                    None, schema_registry_client=client, conf=deser_conf, json_decode=_loads
                )
            self._client = client
            self._field = MessageField.VALUE if self._is_value else MessageField.KEY
            self._ctx = SerializationContext
            self._registry_error = SchemaRegistryError
            self._unavailable = _transport_errors()
            self._deserializer = deserializer
            return deserializer

    def __call__(self, record: Record) -> Any:
        """Decode `record.value` (or `record.key`) through the Schema Registry.

        Args:
            record: A record whose value (or key) is not None.

        Returns:
            The decoded value, JSON-compatible; a `dict` for role value.

        Raises:
            DecodeError: The record is not valid for its schema, or its schema is unknown.
            RegistryUnavailableError: The registry did not answer usefully (not a record
                error; see the module docstring).
        """
        deserializer = self._deserializer or self._start()
        data: bytes = record.value if self._is_value else record.key  # type: ignore[assignment]
        assert self._ctx is not None
        ctx = self._ctx(record.topic, self._field, list(record.headers) or None)
        try:
            obj = deserializer(data, ctx)
        except DecodeError:
            raise
        except Exception as e:
            raise self._classify(e, data) from None
        if self._fmt == "avro":
            obj = _jsonable(obj)
        if self._is_value and type(obj) is not dict:
            raise _not_object(data, obj, self._fmt)
        return obj

    def _classify(self, e: Exception, data: bytes) -> Exception:
        fmt = self._fmt
        schema_id = _framed_schema_id(data)
        if self._registry_error is not None and isinstance(e, self._registry_error):
            status = getattr(e, "http_status_code", None)
            code = getattr(e, "error_code", None)
            text = _short(getattr(e, "error_message", "") or "")
            if code in _NOT_FOUND_CODES:
                return DecodeError(f"{fmt}: {schema_id} not in the registry: {text}")
            return RegistryUnavailableError(
                f"schema registry {_redacted(self._conf['url'])} answered HTTP {status} "
                f"(error code {code}) fetching {schema_id}: {text}"
            )
        if isinstance(e, self._unavailable):
            return RegistryUnavailableError(
                f"schema registry {_redacted(self._conf['url'])} unreachable fetching "
                f"{schema_id}: {type(e).__name__}: {_short(str(e))}"
            )
        return DecodeError(
            f"{fmt}: cannot decode record ({schema_id}): "
            f"{type(e).__name__}: {_short(str(e))}; payload starts {_snippet(data)}"
        )


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _framed_schema_id(data: bytes) -> str:
    """`schema id N`, `schema guid G`, the bad magic byte or the empty payload, for messages."""
    if not data:
        return "empty payload"
    if data[0] == 0 and len(data) >= 5:
        return f"schema id {int.from_bytes(data[1:5], 'big')}"
    if data[0] == 1 and len(data) >= 17:
        return f"schema guid {UUID(bytes=bytes(data[1:17]))}"
    return f"magic byte {data[0]}, expected 0"


def _jsonable(value: Any) -> Any:
    """Make a decoded Avro value JSON-compatible (see the module docstring)."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is dict:
        return {k if type(k) is str else str(k): _jsonable(v) for k, v in value.items()}
    if t is list or t is tuple:
        return [_jsonable(v) for v in value]
    if t is float:
        if not math.isfinite(value):
            msg = f"float {value} cannot be indexed (JSON has no NaN or Infinity)"
            raise DecodeError(msg)
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _b64(bytes(value))
    if isinstance(value, Decimal):
        return f"{value:f}"
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    return str(value)


# -- protobuf

# Files every descriptor pool has built in (`_init_pool`); confluent-kafka neither registers
# nor resolves references to them.
_PROTOBUF_BUILTIN_FILES = ("confluent/", "google/protobuf/", "google/type/")
_FIRST_MESSAGE = (0,)
# The writer schema's file name in its pool (the registry's serialized form has no name
# that matters; references keep their import paths).
_WRITER_FILE = "es_sink/writer_schema.proto"

_SchemaKey = int | UUID
# Per (schema id or GUID, message indexes): the message class's parser, the dict converter
# and the message's full name.
_MessageEntry = tuple[Callable[[bytes], Any], Callable[[Any], Any], str]


class _ProtobufDeserializer:
    """`(data, ctx) -> JSON-compatible value`: Confluent-framed protobuf, no generated class.

    Per schema id (or GUID) it fetches the writer schema in serialized form with its
    references and builds one descriptor pool; per schema id and message index it builds the
    message class and the dict converter. Both are cached (a schema that cannot be loaded is
    remembered as such); a registry failure is never cached. See the module docstring.
    """

    def __init__(self, client: Any, is_value: bool) -> None:
        from confluent_kafka.schema_registry import dual_schema_id_deserializer

        # confluent-kafka's own pool set-up (in its `__all__` despite the name): the same
        # built-in files as its ProtobufDeserializer, so writer schemas resolve the same.
        from confluent_kafka.schema_registry.protobuf import _init_pool
        from confluent_kafka.schema_registry.serde import SchemaId
        from google.protobuf import (  # type: ignore[import-untyped]
            descriptor_pb2,
            descriptor_pool,
            message,
            message_factory,
        )

        self._client = client
        self._header = "__value_schema_id" if is_value else "__key_schema_id"
        self._schema_id = SchemaId
        self._read_schema_id = dual_schema_id_deserializer
        self._init_pool = _init_pool
        self._file_proto = descriptor_pb2.FileDescriptorProto
        self._new_pool = descriptor_pool.DescriptorPool
        self._message_class = message_factory.GetMessageClass
        self._parse_error: type[Exception] = message.DecodeError
        self._new_printer = _protobuf_printer()
        self._lock = threading.Lock()
        self._writers: dict[_SchemaKey, tuple[Any, Any] | DecodeError] = {}
        self._messages: dict[tuple[_SchemaKey, tuple[int, ...]], _MessageEntry] = {}

    def __call__(self, data: bytes, ctx: Any) -> Any:
        key: tuple[_SchemaKey, tuple[int, ...]] | None = None
        # The usual framings are parsed here (faster): magic byte 0 and message indexes [0]
        # (a single 0 byte) or [n], a top-level message n < 64 (count 1 then n, zig-zag: the
        # bytes 2, 2n); unless a schema-id header overrides the payload's framing.
        if len(data) > 5 and data[0] == 0:
            headers = ctx.headers
            if not (headers and any(h[0] == self._header for h in headers)):
                if data[5] == 0:
                    key = (int.from_bytes(data[1:5], "big"), _FIRST_MESSAGE)
                    payload = data[6:]
                elif data[5] == 2 and len(data) > 6 and data[6] < 0x80 and not data[6] & 1:
                    key = (int.from_bytes(data[1:5], "big"), (data[6] >> 1,))
                    payload = data[7:]
        if key is None:  # confluent-kafka's own parser: GUIDs, headers, any message indexes
            sid = self._schema_id("PROTOBUF")
            payload = self._read_schema_id(data, ctx, sid).read()
            schema_key = sid.id if sid.id is not None else sid.guid
            assert schema_key is not None  # from_bytes sets one or raises
            key = (schema_key, tuple(sid.message_indexes or _FIRST_MESSAGE))
        entry = self._messages.get(key) or self._load(key)
        parse, to_dict, name = entry
        try:
            msg = parse(payload)
        except self._parse_error as e:
            err = (
                f"protobuf: not a valid {name} message ({_schema_ref(key[0])}): "
                f"{_short(str(e))}; payload starts {_snippet(data)}"
            )
            raise DecodeError(err) from None
        return to_dict(msg)

    def _load(self, key: tuple[_SchemaKey, tuple[int, ...]]) -> _MessageEntry:
        schema_key, indexes = key
        with self._lock:
            entry = self._messages.get(key)
            if entry is not None:
                return entry
            writer = self._writers.get(schema_key)
            if writer is None:
                writer = self._load_writer(schema_key)
                self._writers[schema_key] = writer
            if isinstance(writer, DecodeError):
                raise DecodeError(str(writer))
            pool, file_proto = writer
            name = _message_name(file_proto, indexes, schema_key)
            cls = self._message_class(pool.FindMessageTypeByName(name))
            entry = (cls.FromString, self._new_printer(pool)._MessageToJsonObject, name)
            self._messages[key] = entry
            return entry

    def _load_writer(self, schema_key: _SchemaKey) -> tuple[Any, Any] | DecodeError:
        """The writer schema's (pool, FileDescriptorProto), or the DecodeError to remember.

        Registry errors propagate (and are not remembered).
        """
        client = self._client
        if isinstance(schema_key, int):
            schema = client.get_schema(schema_key, None, "serialized")
        else:
            schema = client.get_schema_by_guid(str(schema_key), "serialized")
        ref = _schema_ref(schema_key)
        if schema.schema_type != "PROTOBUF":
            return DecodeError(f"protobuf: {ref} is a {schema.schema_type} schema, not PROTOBUF")
        files: list[tuple[str, str]] = []
        self._fetch_references(schema, files, set())
        try:
            pool = self._new_pool()
            self._init_pool(pool)
            for file_name, text in files:
                pool.Add(self._serialized_file(file_name, text))
            file_proto = self._serialized_file(_WRITER_FILE, schema.schema_str)
            pool.Add(file_proto)
        except (ValueError, TypeError, KeyError, self._parse_error) as e:
            return DecodeError(
                f"protobuf: the writer schema ({ref}) cannot be loaded: "
                f"{type(e).__name__}: {_short(str(e))}"
            )
        return pool, file_proto

    def _fetch_references(self, schema: Any, files: list[tuple[str, str]], seen: set[str]) -> None:
        """Append the referenced files (`(import path, serialized)`), dependencies first."""
        for reference in schema.references or ():
            name = reference.name
            if not name or name.startswith(_PROTOBUF_BUILTIN_FILES) or name in seen:
                continue
            seen.add(name)
            registered = self._client.get_version(
                reference.subject, reference.version, True, "serialized"
            )
            self._fetch_references(registered.schema, files, seen)
            files.append((name, registered.schema.schema_str))

    def _serialized_file(self, name: str, text: str) -> Any:
        """The FileDescriptorProto of a schema in the registry's serialized (base64) form."""
        file_proto = self._file_proto.FromString(base64.b64decode(text, validate=True))
        file_proto.name = name
        return file_proto


def _schema_ref(schema_key: _SchemaKey) -> str:
    return f"schema id {schema_key}" if isinstance(schema_key, int) else f"schema guid {schema_key}"


def _message_name(file_proto: Any, indexes: tuple[int, ...], schema_key: _SchemaKey) -> str:
    """The full name of the message that the message indexes select in the file."""
    messages = file_proto.message_type
    names: list[str] = []
    for i in indexes:
        if not 0 <= i < len(messages):
            where = ".".join(names) or "the file"
            msg = (
                f"protobuf: message indexes {list(indexes)} not in the writer schema "
                f"({_schema_ref(schema_key)}): {where} has {len(messages)} message types"
            )
            raise DecodeError(msg)
        names.append(messages[i].name)
        messages = messages[i].nested_type
    return ".".join([file_proto.package, *names] if file_proto.package else names)


@functools.cache
def _protobuf_printer() -> Callable[[Any], Any]:
    """`pool -> printer` whose `_MessageToJsonObject(msg)` is `MessageToDict` as documented.

    `json_format.MessageToDict` builds a `json_format._Printer` for each call and has no
    option for unquoted 64-bit integers (`unquote_int64_if_possible` only unquotes values a
    double holds exactly), so this subclasses the printer (protobuf's own, not public API;
    the unit tests pin the behaviour) and keeps one per writer schema.
    """
    from google.protobuf import descriptor, json_format  # type: ignore[import-untyped,unused-ignore]

    fd = descriptor.FieldDescriptor
    int64 = frozenset({fd.CPPTYPE_INT64, fd.CPPTYPE_UINT64})
    floats = frozenset({fd.CPPTYPE_FLOAT, fd.CPPTYPE_DOUBLE})
    base: Any = json_format._Printer
    field_to_json = base._FieldToJsonObject
    isfinite = math.isfinite

    class DocumentPrinter(base):
        def _FieldToJsonObject(self, field: Any, value: Any) -> Any:
            cpp_type = field.cpp_type
            if cpp_type in int64:
                return value
            if cpp_type in floats and not isfinite(value):
                msg = f"protobuf: {field.full_name} is {value} (JSON has no NaN or Infinity)"
                raise DecodeError(msg)
            return field_to_json(self, field, value)

    def new_printer(pool: Any) -> Any:
        return DocumentPrinter(
            preserving_proto_field_name=True,
            use_integers_for_enums=False,
            descriptor_pool=pool,
            always_print_fields_with_no_presence=True,
        )

    new_printer(None)  # fails now, at start, if this protobuf's printer differs
    return new_printer
