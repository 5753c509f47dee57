"""A fault-injecting HTTP proxy in front of the real Elasticsearch, for integration tests.

It listens on 127.0.0.1 (an ephemeral port) and forwards every request unchanged to the
node, except the `_bulk` requests a test's rule changes. Elasticsearch cannot be made to
answer some things on demand (an item-level 429 followed by a 413, an ingest-side rejection
of one item of a bulk, a missing privilege without security enabled): a rule rewrites just
that, and everything else is the real node's answer.

    with EsProxy(services.es_url) as proxy:
        proxy.rule = my_rule           # called with each `BulkCall`, in order
        run_flow(services, {"ES_HOSTS": proxy.url, ...})

A rule inspects `call.actions` and may, for this request only:
- `call.answer(status, body)`: answer the whole request itself, forwarding nothing;
- `call.fake(i, status, error)`: not forward action `i`, and answer it with this item;
- `call.rewrite(i, status, error)`: forward action `i`, but replace its answer;
- `call.hold(seconds)`: forward the request only after `seconds`, whatever became of the
  client meanwhile, as a node executes a bulk it queued. While held, `GET _tasks?group_by=none`
  lists it as a bulk task with the request's X-Opaque-Id, as a node lists a queued bulk.
Every `_bulk` that reached the proxy is in `proxy.bulks` (with the changes made).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


@dataclass
class BulkAction:
    """One action of a `_bulk` body: its operation, metadata and raw lines."""

    op: str
    meta: dict[str, Any]
    lines: bytes

    @property
    def id(self) -> str | None:
        return self.meta.get("_id")

    @property
    def source(self) -> Any:
        """The document line, decoded (None for a delete)."""
        if self.op == "delete":
            return None
        return json.loads(self.lines.split(b"\n")[1])


@dataclass
class BulkCall:
    """One `_bulk` request as the proxy saw it, and what the rule decided for it."""

    n: int
    actions: list[BulkAction]
    opaque_id: str | None = None
    status: int | None = None
    body: Any = None
    faked: dict[int, dict[str, Any]] = field(default_factory=dict)
    rewritten: dict[int, dict[str, Any]] = field(default_factory=dict)
    held_s: float = 0.0
    forwarded: threading.Event = field(default_factory=threading.Event)
    """Set once a held request's answer came back from the node."""

    def ids(self) -> list[str | None]:
        return [a.id for a in self.actions]

    def answer(self, status: int, body: Any) -> None:
        self.status, self.body = status, body

    def fake(self, i: int, status: int, error: dict[str, Any] | None = None) -> None:
        self.faked[i] = _item(status, error)

    def rewrite(self, i: int, status: int, error: dict[str, Any] | None = None) -> None:
        self.rewritten[i] = _item(status, error)

    def hold(self, seconds: float) -> None:
        self.held_s = seconds


Rule = Callable[[BulkCall], None]


def _item(status: int, error: dict[str, Any] | None) -> dict[str, Any]:
    return {"status": status, **({"error": error} if error is not None else {})}


def parse_bulk(body: bytes) -> list[BulkAction]:
    lines = body.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out, i = [], 0
    while i < len(lines):
        ((op, meta),) = json.loads(lines[i]).items()
        n = 1 if op == "delete" else 2
        out.append(BulkAction(op, meta, b"\n".join(lines[i : i + n]) + b"\n"))
        i += n
    return out


class EsProxy:
    """See the module docstring."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 9200)
        self.rule: Rule | None = None
        self.bulks: list[BulkCall] = []
        self._held: list[BulkCall] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                proxy._handle(self)

            do_POST = do_PUT = do_DELETE = do_HEAD = do_GET

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> EsProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- forwarding

    def _forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self._upstream, timeout=120)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.getheaders(), data
        finally:
            conn.close()

    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length) if length else None
        headers = {
            k: v for k, v in req.headers.items() if k.lower() not in _HOP | {"accept-encoding"}
        }
        path = req.path
        bulk = urlsplit(path).path.rstrip("/").endswith("_bulk")
        if req.command in ("POST", "PUT") and bulk and body:
            status, out_headers, data = self._bulk(req.command, path, headers, body)
        else:
            status, out_headers, data = self._forward(req.command, path, headers, body)
            if status == 200 and urlsplit(path).path.rstrip("/") == "/_tasks":
                data = self._with_held(data)
        try:
            req.send_response(status)
            for k, v in out_headers:
                if k.lower() not in _HOP:
                    req.send_header(k, v)
            req.send_header("Content-Length", str(len(data)))
            req.end_headers()
            if req.command != "HEAD":
                req.wfile.write(data)
        except OSError:  # the client went away while its request was held
            pass

    def _with_held(self, data: bytes) -> bytes:
        """A `GET _tasks?group_by=none` answer, listing the held bulks too."""
        with self._lock:
            held = [{"action": "indices:data/write/bulk", "headers": {"X-Opaque-Id": c.opaque_id}}
                    for c in self._held if c.opaque_id]  # fmt: skip
        if not held:
            return data
        answer = json.loads(data)
        answer["tasks"] = [*answer.get("tasks", []), *held]
        return json.dumps(answer).encode()

    def _bulk(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        opaque_id = next((v for k, v in headers.items() if k.lower() == "x-opaque-id"), None)
        with self._lock:
            call = BulkCall(len(self.bulks), parse_bulk(body), opaque_id)
            self.bulks.append(call)
            if self.rule is not None:
                self.rule(call)
            if call.held_s:
                self._held.append(call)
        if call.held_s:
            time.sleep(call.held_s)
            try:
                return self._answer(call, method, path, headers, body)
            finally:
                with self._lock:
                    self._held.remove(call)
                call.forwarded.set()
        return self._answer(call, method, path, headers, body)

    def _answer(
        self, call: BulkCall, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        json_headers = [
            ("Content-Type", "application/json"),
            ("X-Elastic-Product", "Elasticsearch"),
        ]
        if call.status is not None:
            return call.status, json_headers, json.dumps(call.body).encode()
        if not call.faked and not call.rewritten:
            return self._forward(method, path, headers, body)
        sent = [a for i, a in enumerate(call.actions) if i not in call.faked]
        answers: list[dict[str, Any]] = []
        out_headers = json_headers
        if sent:
            status, out_headers, data = self._forward(
                method, path, headers, b"".join(a.lines for a in sent)
            )
            if status != 200:
                return status, out_headers, data
            answers = [next(iter(item.values())) for item in json.loads(data)["items"]]
        items = []
        for i, action in enumerate(call.actions):
            result = call.faked[i] if i in call.faked else answers.pop(0)
            result = call.rewritten.get(i, result)
            items.append({action.op: result})
        errors = any(next(iter(it.values()))["status"] >= 300 for it in items)
        # `errors` first and no spaces: the client skips parsing `{"errors":false...`.
        data = json.dumps({"errors": errors, "items": items}, separators=(",", ":")).encode()
        return 200, [(k, v) for k, v in out_headers if k.lower() != "content-length"], data


BUSY = {"type": "es_rejected_execution_exception", "reason": "rejected execution (test proxy)"}
"""An item's 429, as an ingest-side per-document rejection answers it."""


def refuse_once(
    pick: Callable[[BulkCall], int | None], seen: dict[str, int]
) -> Callable[[BulkCall], None]:
    """A rule that answers 429 (`BUSY`) for the item `pick` chooses in the first bulk where
    it chooses one, once, and forwards the rest; `seen["fault"]` is that bulk's number."""

    def rule(call: BulkCall) -> None:
        if "fault" not in seen and (i := pick(call)) is not None:
            seen["fault"] = call.n
            call.fake(i, 429, BUSY)

    return rule
