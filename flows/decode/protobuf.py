"""The `protobuf` converter: Confluent-framed protobuf decoded with the writer schema.

Confluent framing (magic byte 0 + schema id, or magic byte 1 + schema GUID, or the id in a
`__value_schema_id`/`__key_schema_id` header), then the message-index array (zig-zag
varints; a single 0 byte means the first message), then the payload. No generated classes:
confluent-kafka's `ProtobufDeserializer` only parses into a class given to it, so this
decoder does what it does internally, with the writer schema: fetch the schema by id in
`serialized` form (a base64 `FileDescriptorProto`: as registered when it was registered so,
else with `format=serialized`; see `_serialized`) and its references (recursively, by
subject and version; `google/protobuf/`, `google/type/` and `confluent/` files are built in,
as in confluent-kafka), build one descriptor pool per schema id and one message class
(`message_factory.GetMessageClass`) per schema id and message index. Both are cached: a
record costs the framing, a dict lookup, the upb parse and the conversion. No reader
schema, migration or data-contract rule is applied.

The message becomes what `json_format.MessageToDict(preserving_proto_field_name=True,
always_print_fields_with_no_presence=True)` returns (the proto3 JSON mapping: enums by
name, bytes base64, `Timestamp` RFC 3339, `Duration` `"1.5s"`, wrappers as their value,
`Any` with `@type`; fields without presence are always there, with their default when
unset: proto3 cannot tell unset from 0/""/false, so such values stay searchable and every
document has the same fields) with two exceptions: int64/uint64/sint64/fixed64 values are
exact JSON integers, not the mapping's strings (Elasticsearch reads `long`/`unsigned_long`
exactly, and a quoted number would be dynamically mapped as text; `MessageToDict`'s
`unquote_int64_if_possible` only unquotes values a double holds), and a NaN or infinite
float/double is a `DecodeError` (as for avro). Fields the writer schema lacks are skipped
(protobuf's unknown fields). A message index not in the schema, a payload the parser
rejects (truncated, invalid wire type, invalid UTF-8 in a proto3 string) or a schema id
that is not PROTOBUF is a `DecodeError`. The registry client, its laziness and its errors
are flows.decode.registry's.
"""

from __future__ import annotations

import base64
import functools
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from uuid import UUID

from flows.decode.common import DecodeError, Decoder, short, snippet
from flows.decode.registry import (
    Deserializer,
    Post,
    RegistryDecoder,
    prefix_framed,
    registry_conf,
    schema_id_header,
)

if TYPE_CHECKING:
    from flows.config import Settings


def build_protobuf(settings: Settings, is_value: bool) -> Decoder:
    """The `protobuf` converter: Confluent-framed protobuf decoded with the writer schema
    from the Schema Registry, as proto3 JSON with exact 64-bit integers."""
    return RegistryDecoder(
        "protobuf",
        is_value,
        registry_conf(settings),
        _protobuf,
        settings.schema_registry_retry_budget_s,
    )


def _protobuf(client: Any, is_value: bool) -> tuple[Deserializer, Post]:
    return _ProtobufDeserializer(client, is_value), None


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
        self._as_registered = type(client)(client.config())  # see `_serialized`
        self._header = schema_id_header(is_value)
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
        if prefix_framed(data, ctx, self._header):
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
                f"{short(str(e))}; payload starts {snippet(data)}"
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
        if isinstance(schema_key, int):
            schema = self._serialized(lambda c, fmt: c.get_schema(schema_key, None, fmt))
        else:
            schema = self._serialized(lambda c, fmt: c.get_schema_by_guid(str(schema_key), fmt))
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
                f"{type(e).__name__}: {short(str(e))}"
            )
        return pool, file_proto

    def _fetch_references(self, schema: Any, files: list[tuple[str, str]], seen: set[str]) -> None:
        """Append the referenced files (`(import path, serialized)`), dependencies first."""
        for reference in schema.references or ():
            name = reference.name
            if not name or name.startswith(_PROTOBUF_BUILTIN_FILES) or name in seen:
                continue
            seen.add(name)
            fetch = functools.partial(_version_schema, reference.subject, reference.version)
            schema = self._serialized(fetch)
            self._fetch_references(schema, files, seen)
            files.append((name, schema.schema_str))

    def _serialized(self, fetch: Callable[[Any, str | None], Any]) -> Any:
        """A protobuf schema in serialized form (a base64 `FileDescriptorProto`), from
        `fetch(client, format)`: the form it was registered in, if that is the serialized
        one (what confluent-kafka's serializers register), else `format=serialized`.

        Asked in that order because of Apicurio Registry's Confluent-compatible API: it keeps
        a schema in the form it was registered in and answers `format=serialized` for one
        registered serialized with an HTTP 500. Confluent's registry keeps `.proto` text and
        converts on request: one more request per schema. Each form is asked of a client of
        its own, since the client caches a schema by id whatever the format asked for.
        """
        schema = fetch(self._as_registered, None)
        if schema.schema_type != "PROTOBUF" or _is_base64(schema.schema_str):
            return schema
        return fetch(self._client, "serialized")

    def _serialized_file(self, name: str, text: str) -> Any:
        """The FileDescriptorProto of a schema in the registry's serialized (base64) form."""
        try:
            raw = base64.b64decode(text, validate=True)
        except ValueError:  # binascii.Error, or a character beyond ASCII
            msg = (
                "format=serialized answered text, not base64 (Apicurio Registry's answer "
                "for a schema registered as .proto text)"
            )
            raise ValueError(msg) from None
        file_proto = self._file_proto.FromString(raw)
        file_proto.name = name
        return file_proto


def _version_schema(subject: str, version: int, client: Any, fmt: str | None) -> Any:
    """The schema of a subject's version (deleted ones included), in format `fmt`."""
    return client.get_version(subject, version, True, fmt).schema


def _is_base64(text: str | None) -> bool:
    """Whether `text` is base64 (`.proto` text never is: it has spaces, `;` or quotes)."""
    try:
        base64.b64decode(text or "", validate=True)
    except ValueError:  # binascii.Error, or a character beyond ASCII
        return False
    return bool(text)


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
