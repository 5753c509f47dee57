"""A stand-in for the Confluent Schema Registry, for the unit tier and the bench only.

The integration tier runs against a real registry (Apicurio Registry's Confluent-compatible
API, `scripts/stack up registry`); the unit tier reaches no service, so this module serves
just enough of the REST API, in process and in memory, for confluent-kafka's
`SchemaRegistryClient`, serializers and deserializers to work against it, and plays the
answers of outages and of both registries that the decoders must handle:

- `POST /subjects/{subject}/versions` register: `{"id": n, "guid": g}`; the same schema
  (text, type and references) always gets the same id, in any subject. Each reference
  (`name`, `subject`, `version`) must name a registered subject version (else 422, error
  code 42201, as the real registry answers).
- `POST /subjects/{subject}` look a schema up in a subject (text, type and references).
- `GET /subjects`, `GET /subjects/{subject}/versions`,
  `GET /subjects/{subject}/versions/{latest|n}`, `DELETE /subjects/{subject}`.
- `GET /schemas/ids/{id}` (`{"schema", "schemaType", "references"}`; schemaType is left out
  for AVRO as the real registry does), `GET /schemas/ids/{id}/subjects`,
  `GET /schemas/ids/{id}/versions`, `GET /schemas/guids/{guid}`, `GET /schemas/types`.
- `GET /associations/resources/{namespace}/{name}`: always `[]` (no associations), which the
  client's default ASSOCIATED subject strategy turns into the TOPIC strategy.
- `GET /config`, `GET /config/{subject}`: `{"compatibilityLevel": "BACKWARD"}`.

PROTOBUF schemas (what confluent-kafka's `ProtobufSerializer` registers, and what it and
flows.decode fetch back with `?format=serialized`, references included) must be registered
in the serialized form: a base64 `FileDescriptorProto`. The stand-in has no `.proto`
parser, so `.proto` text is refused with 422 (the real registries accept both); every import
in the file must be a reference's `name` unless it is one of the files clients have built in
(`google/protobuf/`, `google/type/`, `confluent/`). A protobuf schema is answered in the
serialized form for `format=serialized` and also without `format`, as Apicurio Registry
answers a schema registered serialized; any other `format` for a protobuf schema is treated
as an unhandled request (below). Two switches play the real registries' other answers:
`protobuf_as_text` answers a placeholder `.proto` text without `format` (Confluent's
registry keeps `.proto` text and serializes on request), `serialized_status` answers
`format=serialized` with that HTTP status (Apicurio Registry's 500 for a schema registered
serialized). Avro and JSON schemas are not validated,
and nothing is checked for compatibility.

Unknown ids, subjects and versions answer 404 with the registry's error codes 40403, 40401
and 40402. Every request is appended to `requests` (path and query); a
request to any other path answers 404 (error code 404) and is recorded in `unhandled`, so a
test can notice a client calling an endpoint the stand-in lacks. Setting `fail_status` (for
example 503 or 401) makes every request answer that status, to test outages. Paths that
start with one of `missing` (e.g. `/schemas/guids/`) answer a bare 404 with an empty body,
as Apicurio Registry answers endpoints it lacks.

Usage::

    with SchemaRegistryStub() as registry:
        client = SchemaRegistryClient({"url": registry.url})
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
import socket
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_PROTOBUF_BUILTIN_FILES = ("google/protobuf/", "google/type/", "confluent/")


@dataclass
class _Stored:
    id: int
    guid: str
    schema: str
    schema_type: str
    references: list[dict[str, Any]]
    extra: dict[str, Any] = field(default_factory=dict)  # metadata, ruleSet

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": self.schema}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = self.references
        out.update(self.extra)
        return out


class _NotFoundError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _UnhandledError(Exception):
    """A request the stand-in does not serve (answered like an unknown path)."""


class SchemaRegistryStub:
    """An in-memory Schema Registry REST API on 127.0.0.1, on an ephemeral port.

    Use as a context manager, or call `start()` and `stop()` (a pytest fixture can yield it).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[int, _Stored] = {}
        self._by_key: dict[str, int] = {}
        self._subjects: dict[str, list[int]] = {}  # subject -> schema ids, version = index + 1
        self.requests: list[tuple[str, str]] = []
        self.unhandled: list[tuple[str, str]] = []
        self.fail_status: int | None = None
        self.protobuf_as_text = False
        self.missing: tuple[str, ...] = ()
        self.serialized_status: int | None = None
        self._connections: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>`; only while started."""
        if self._server is None:
            msg = "SchemaRegistryStub is not started"
            raise RuntimeError(msg)
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> SchemaRegistryStub:
        """Listen on an ephemeral port and serve from a background thread."""
        if self._server is not None:
            return self
        stub = self

        class Handler(_Handler):
            registry = stub

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="schema-registry-stub",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the port (the schemas are kept)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        with self._lock:  # end keep-alive connections too, as a real shutdown would
            connections, self._connections = self._connections, set()
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> SchemaRegistryStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the registry

    def register(self, subject: str, body: dict[str, Any]) -> _Stored:
        """Register `body` (`schema`, `schemaType`, `references`) under `subject`."""
        schema = body.get("schema")
        if not isinstance(schema, str):
            raise ValueError("schema must be a string")
        schema_type = body.get("schemaType") or "AVRO"
        references = body.get("references") or []
        extra = {k: body[k] for k in ("metadata", "ruleSet") if body.get(k) is not None}
        self._check_references(references)
        if schema_type == "PROTOBUF":
            _check_serialized_protobuf(schema, references)
        key = json.dumps([schema, schema_type, references, extra], sort_keys=True)
        with self._lock:
            schema_id = self._by_key.get(key)
            if schema_id is None:
                schema_id = len(self._by_id) + 1
                self._by_id[schema_id] = _Stored(
                    schema_id, str(uuid.uuid4()), schema, schema_type, references, extra
                )
                self._by_key[key] = schema_id
            versions = self._subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return self._by_id[schema_id]

    def _check_references(self, references: Any) -> None:
        if not isinstance(references, list):
            raise ValueError("references must be a list")
        for ref in references:
            if not isinstance(ref, dict) or not all(
                ref.get(k) not in (None, "") for k in ("name", "subject", "version")
            ):
                raise ValueError(f"a reference needs name, subject and version: {ref!r}")
            try:
                self._version(str(ref["subject"]), str(ref["version"]))
            except _NotFoundError:
                msg = f"reference {ref['name']!r}: {ref['subject']} version {ref['version']}"
                raise ValueError(msg + " is not registered") from None

    def _schema(self, schema_id: int) -> _Stored:
        with self._lock:
            stored = self._by_id.get(schema_id)
        if stored is None:
            raise _NotFoundError(40403, "Schema not found")
        return stored

    def _versions(self, subject: str) -> list[int]:
        with self._lock:
            versions = self._subjects.get(subject)
        if not versions:
            raise _NotFoundError(40401, f"Subject '{subject}' not found.")
        return list(versions)

    def _version(self, subject: str, version: str) -> dict[str, Any]:
        ids = self._versions(subject)
        if version in ("latest", "-1"):
            n = len(ids)
        elif version.isdigit() and 1 <= int(version) <= len(ids):
            n = int(version)
        else:
            raise _NotFoundError(40402, "Version not found.")
        return self._full(self._schema(ids[n - 1]), subject, n)

    def _full(self, stored: _Stored, subject: str, version: int) -> dict[str, Any]:
        return {
            "subject": subject,
            "version": version,
            "id": stored.id,
            "guid": stored.guid,
            **stored.body(),
        }

    def _subjects_of(self, schema_id: int) -> list[tuple[str, int]]:
        with self._lock:
            return [
                (subject, ids.index(schema_id) + 1)
                for subject, ids in self._subjects.items()
                if schema_id in ids
            ]

    def handle(
        self, method: str, path: str, body: Any, query: dict[str, list[str]] | None = None
    ) -> tuple[int, Any]:
        """Answer one request: (HTTP status, JSON body). `query` as `parse_qs` makes it."""
        parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        route = (method, *(_shape(parts)))
        fmt = (query or {}).get("format", [None])[-1]
        try:
            if route == ("POST", "subjects", "*", "versions"):
                stored = self.register(parts[1], body or {})
                return 200, {"id": stored.id, "guid": stored.guid}
            if route == ("POST", "subjects", "*"):
                return 200, self._lookup(parts[1], body or {})
            if route == ("GET", "subjects"):
                with self._lock:
                    return 200, sorted(s for s, ids in self._subjects.items() if ids)
            if route == ("GET", "subjects", "*", "versions"):
                return 200, list(range(1, len(self._versions(parts[1])) + 1))
            if route == ("GET", "subjects", "*", "versions", "*"):
                found = self._version(parts[1], parts[3])
                return self._formatted(found, fmt)
            if route == ("DELETE", "subjects", "*"):
                versions = list(range(1, len(self._versions(parts[1])) + 1))
                with self._lock:
                    self._subjects.pop(parts[1], None)
                return 200, versions
            if route == ("GET", "schemas", "ids", "#"):
                return self._formatted(self._schema(int(parts[2])).body(), fmt)
            if route == ("GET", "schemas", "ids", "#", "subjects"):
                self._schema(int(parts[2]))
                return 200, [s for s, _ in self._subjects_of(int(parts[2]))]
            if route == ("GET", "schemas", "ids", "#", "versions"):
                self._schema(int(parts[2]))
                return 200, [
                    {"subject": s, "version": v} for s, v in self._subjects_of(int(parts[2]))
                ]
            if route == ("GET", "schemas", "guids", "*"):
                with self._lock:
                    found = [s for s in self._by_id.values() if s.guid == parts[2]]
                if not found:
                    raise _NotFoundError(40403, "Schema not found")
                return self._formatted(found[0].body(), fmt)
            if route == ("GET", "schemas", "types"):
                return 200, ["JSON", "PROTOBUF", "AVRO"]
            if route == ("GET", "associations", "resources", "*", "*"):
                return 200, []
            if route in (("GET", "config"), ("GET", "config", "*")):
                return 200, {"compatibilityLevel": "BACKWARD"}
        except _NotFoundError as e:
            return 404, {"error_code": e.code, "message": e.message}
        except (ValueError, TypeError) as e:
            return 422, {"error_code": 42201, "message": f"Invalid schema: {e}"}
        except _UnhandledError:
            pass
        self.unhandled.append((method, path))
        return 404, {"error_code": 404, "message": "HTTP 404 Not Found"}

    def _formatted(self, body: dict[str, Any], fmt: str | None) -> tuple[int, Any]:
        """A schema's answer in the `format` asked for (see the module docstring)."""
        _check_format(body.get("schemaType"), fmt)
        if body.get("schemaType") != "PROTOBUF":
            return 200, body
        if fmt == "serialized" and self.serialized_status is not None:
            status = self.serialized_status
            return status, {"error_code": 0, "message": "Syntax error in schema.proto:1:1"}
        if not fmt and self.protobuf_as_text:
            return 200, {**body, "schema": 'syntax = "proto3"; // as registered'}
        return 200, body

    def _lookup(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        ids = self._versions(subject)
        schema_type = body.get("schemaType") or "AVRO"
        references = body.get("references") or []
        for n, schema_id in enumerate(ids, start=1):
            stored = self._schema(schema_id)
            if (
                stored.schema == body.get("schema")
                and stored.schema_type == schema_type
                and stored.references == references
            ):
                return self._full(stored, subject, n)
        raise _NotFoundError(40403, "Schema not found")


def _check_format(schema_type: str | None, fmt: str | None) -> None:
    """A protobuf schema is served for no `format` or `format=serialized` only."""
    if schema_type == "PROTOBUF" and fmt not in (None, "", "serialized"):
        raise _UnhandledError


def _check_serialized_protobuf(schema: str, references: list[dict[str, Any]]) -> None:
    """Raise ValueError unless `schema` is a base64 FileDescriptorProto whose imports are
    built in or named by `references`."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    try:
        raw = base64.b64decode(schema, validate=True)
        file_proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, DecodeError):
        msg = (
            "the stand-in takes protobuf schemas in serialized form only (a base64 "
            "FileDescriptorProto); it cannot parse .proto text"
        )
        raise ValueError(msg) from None
    names = {ref["name"] for ref in references}
    for dependency in file_proto.dependency:
        if not dependency.startswith(_PROTOBUF_BUILTIN_FILES) and dependency not in names:
            raise ValueError(f"import {dependency!r} has no reference")


def _shape(parts: list[str]) -> list[str]:
    """The route shape: fixed words kept, subject-like values `*`, numeric ids `#`."""
    if not parts:
        return []
    head = parts[0]
    if head == "schemas" and len(parts) >= 3 and parts[1] == "ids":
        return ["schemas", "ids", "#" if re.fullmatch(r"\d+", parts[2]) else "?", *parts[3:]]
    if head == "schemas" and len(parts) == 3 and parts[1] == "guids":
        return ["schemas", "guids", "*"]
    if head == "subjects" and len(parts) >= 2:
        rest = parts[2:]
        if len(rest) == 2 and rest[0] == "versions":
            rest = ["versions", "*"]
        return ["subjects", "*", *rest]
    if head == "associations" and len(parts) == 4 and parts[1] == "resources":
        return ["associations", "resources", "*", "*"]
    if head == "config" and len(parts) == 2:
        return ["config", "*"]
    return parts


class _Handler(BaseHTTPRequestHandler):
    registry: SchemaRegistryStub
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        with self.registry._lock:
            self.registry._connections.add(self.connection)

    def finish(self) -> None:
        with self.registry._lock:
            self.registry._connections.discard(self.connection)
        super().finish()

    def _serve(self, method: str) -> None:
        split = urlsplit(self.path)
        self.registry.requests.append((method, self.path))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        status: int
        payload: Any
        if self.registry.fail_status is not None:
            status = self.registry.fail_status
            payload = {"error_code": status * 100, "message": "stub failure"}
        elif self.registry.missing and split.path.startswith(self.registry.missing):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        else:
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                status, payload = 400, {"error_code": 400, "message": "invalid JSON body"}
            else:
                # `format` is honoured (see the module docstring); other query parameters
                # (normalize, deleted, subject...) are ignored.
                status, payload = self.registry.handle(
                    method, split.path, body, parse_qs(split.query)
                )
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", _CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""
