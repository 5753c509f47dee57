"""A stand-in for the Confluent Schema Registry, for tests only.

The real Confluent Schema Registry (a Java service) cannot run here: it is published neither
on Maven Central nor on PyPI. This module serves just enough of its REST API, in memory, for
confluent-kafka's `SchemaRegistryClient`, serializers and deserializers to work against it:

- `POST /subjects/{subject}/versions` register: `{"id": n, "guid": g}`; the same schema
  (text, type and references) always gets the same id, in any subject.
- `POST /subjects/{subject}` look a schema up in a subject.
- `GET /subjects`, `GET /subjects/{subject}/versions`,
  `GET /subjects/{subject}/versions/{latest|n}`, `DELETE /subjects/{subject}`.
- `GET /schemas/ids/{id}` (`{"schema", "schemaType", "references"}`; schemaType is left out
  for AVRO as the real registry does), `GET /schemas/ids/{id}/subjects`,
  `GET /schemas/ids/{id}/versions`, `GET /schemas/guids/{guid}`, `GET /schemas/types`.
- `GET /associations/resources/{namespace}/{name}`: always `[]` (no associations), which the
  client's default ASSOCIATED subject strategy turns into the TOPIC strategy.
- `GET /config`, `GET /config/{subject}`: `{"compatibilityLevel": "BACKWARD"}`.

Unknown ids, subjects and versions answer 404 with the registry's error codes 40403, 40401
and 40402. Nothing is validated or checked for compatibility, and `format=serialized` for
protobuf returns the schema as registered. Every request is appended to `requests`; a
request to any other path answers 404 (error code 404) and is recorded in `unhandled`, so a
test can notice a client calling an endpoint the stand-in lacks. Setting `fail_status` (for
example 503 or 401) makes every request answer that status, to test outages.

Usage::

    with SchemaRegistryStub() as registry:
        client = SchemaRegistryClient({"url": registry.url})
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


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

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        """Answer one request: (HTTP status, JSON body)."""
        parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        route = (method, *(_shape(parts)))
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
                return 200, self._version(parts[1], parts[3])
            if route == ("DELETE", "subjects", "*"):
                versions = list(range(1, len(self._versions(parts[1])) + 1))
                with self._lock:
                    self._subjects.pop(parts[1], None)
                return 200, versions
            if route == ("GET", "schemas", "ids", "#"):
                return 200, self._schema(int(parts[2])).body()
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
                return 200, found[0].body()
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
        self.unhandled.append((method, path))
        return 404, {"error_code": 404, "message": "HTTP 404 Not Found"}

    def _lookup(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        ids = self._versions(subject)
        schema_type = body.get("schemaType") or "AVRO"
        for n, schema_id in enumerate(ids, start=1):
            stored = self._schema(schema_id)
            if stored.schema == body.get("schema") and stored.schema_type == schema_type:
                return self._full(stored, subject, n)
        raise _NotFoundError(40403, "Schema not found")


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
        else:
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                status, payload = 400, {"error_code": 400, "message": "invalid JSON body"}
            else:
                # Query parameters (normalize, format, deleted...) are ignored.
                status, payload = self.registry.handle(method, split.path, body)
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
