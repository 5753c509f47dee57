"""Which server ES_HOSTS points at, and the REST API version the client speaks to it.

elasticsearch-py 9 sends `compatible-with=9` in the Accept and Content-Type of every
request; Elasticsearch 9 accepts 8 and 9, Elasticsearch 8 answers HTTP 400
(`media_type_header_exception`). The client has no setting for it: a client-wide `headers=`
is overridden by each API's own Accept, which the client then turns into `compatible-with=9`
(elasticsearch-py issues 2923, 2927: "use a 9.x server"). So the sink's clients get
`ServerTransport` as their `transport_class`: before the first request it asks the server
what it is (`detect`), refuses what the sink does not support with one line naming
ES_HOSTS, and from then on rewrites `compatible-with=9` to the server's major.

OpenSearch (2.x, 3.x) answers the same `_bulk`, item errors and admin calls the sink uses,
but refuses the vendor media types (HTTP 406) and sends no `X-Elastic-Product`, on which
the client refuses every answer (UnsupportedProductError). For a server detected as
OpenSearch the transport sends plain `application/json` / `x-ndjson` and vouches for its
answers with that header. Tested against OpenSearch 2.19.3 and 3.3.0 (the integ-test-zips);
a later elasticsearch-py may check more and break it: the unit tests would tell.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import elasticsearch
from elastic_transport import HttpHeaders, Transport, TransportApiResponse
from elasticsearch.exceptions import HTTP_EXCEPTIONS, ApiError

from sinks.errors import ConfigError

logger = logging.getLogger(__name__)

CLIENT_MAJOR = int(elasticsearch.__versionstr__.partition(".")[0])
"""The major of the installed elasticsearch-py, the `compatible-with` it sends."""

SUPPORTED_MAJORS = range(8, CLIENT_MAJOR + 1)
"""Elasticsearch majors the sink is tested against (8.19 and 9.x)."""

OPENSEARCH_MAJORS = range(2, 4)
"""OpenSearch majors the sink is tested against (2.19 and 3.x); later ones get a warning."""

SUPPORTED = "Elasticsearch 8.x, 9.x or OpenSearch 2.x, 3.x"

_VENDOR_MEDIA = re.compile(r"application/vnd\.elasticsearch\+([\w.-]+); ?compatible-with=\d+")
"""The client's media types (`application/vnd.elasticsearch+json; compatible-with=9`)."""

_PLAIN = "application/json"
_MEDIA_VERSIONS = re.compile(r"\bversion (\d+)\b")


@dataclass(frozen=True, slots=True)
class Server:
    """What answered at ES_HOSTS."""

    product: str
    """`Elasticsearch`, `OpenSearch`, or what an unknown server calls itself."""
    version: str
    """`8.19.7`; only the major (`8`) when the server would not tell more (see `detect`)."""
    flavor: str = "default"
    """Elasticsearch's `build_flavor`: `default`, or `serverless` (no majors there)."""

    @property
    def major(self) -> int | None:
        head = self.version.partition(".")[0]
        return int(head) if head.isdigit() else None

    def __str__(self) -> str:
        if self.flavor == "serverless":
            return f"{self.product} Serverless"
        return f"{self.product} {self.version}{'' if '.' in self.version else '.x'}"


Send = Callable[[str, str, Mapping[str, str]], TransportApiResponse]
"""`(method, target, headers)` → the transport's answer, whatever its status."""


def from_root(headers: Mapping[str, str], body: object) -> Server | None:
    """The server an answer to `GET /` describes (None if it describes none)."""
    if not isinstance(body, dict) or not isinstance(body.get("version"), dict):
        return None
    version = body["version"]
    number = str(version.get("number", "unknown"))
    flavor = str(version.get("build_flavor", "default"))
    if version.get("distribution") == "opensearch":
        return Server("OpenSearch", number, flavor)
    # Elasticsearch sends X-Elastic-Product since 7.14; older ones still have the tagline.
    if _says_elasticsearch(headers) or body.get("tagline") == "You Know, for Search":
        return Server("Elasticsearch", number, flavor)
    name = str(body.get("tagline") or "an unknown product")[:80]
    return Server(name, number, flavor)


def detect(send: Send) -> Server:
    """Ask the server what it is. `GET /` says it all; a user without the `monitor`
    privilege (403) or a distribution without the root endpoint (the integ-test-zip: 405)
    falls back to the local node's info, and failing that to the product header and what
    the server answers a `compatible-with=<client major>` request: Elasticsearch 8 names
    the versions it accepts (`must be either version 8 or 7`).

    Raises the ApiError of `GET /` for 401, 429 and 5xx (the caller's handling of those
    applies: wrong credentials, or retry), and the transport's connection errors."""
    plain = {"accept": _PLAIN}
    meta, body = send("GET", "/", plain)
    if meta.status in (401, 429) or meta.status >= 500:
        raise HTTP_EXCEPTIONS.get(meta.status, ApiError)(
            message=f"GET / answered HTTP {meta.status}", meta=meta, body=body
        )
    if 200 <= meta.status < 300:
        server = from_root(meta.headers, body)
        if server is not None:
            return server
    elastic = _says_elasticsearch(meta.headers)
    first = meta.status
    meta, body = send("GET", "/_nodes/_local?filter_path=nodes.*.version", plain)
    elastic = elastic or _says_elasticsearch(meta.headers)
    if elastic and 200 <= meta.status < 300 and isinstance(body, dict):
        for node in (body.get("nodes") or {}).values():
            if isinstance(node, dict) and node.get("version"):
                return Server("Elasticsearch", str(node["version"]))
    if not elastic:
        msg = f"the server does not say what it is (GET / answered HTTP {first})"
        raise ConfigError(msg)
    compat = f"application/vnd.elasticsearch+json; compatible-with={CLIENT_MAJOR}"
    meta, body = send("GET", "/", {"accept": compat})
    if meta.status == 400 and "media_type_header_exception" in str(body):
        accepted = [int(v) for v in _MEDIA_VERSIONS.findall(str(body))]
        if accepted:
            return Server("Elasticsearch", str(max(accepted)))
    return Server("Elasticsearch", str(CLIENT_MAJOR))


def refusal(server: Server, hosts: str) -> ConfigError | None:
    """Why the sink cannot write to `server` (None: it can)."""
    major = server.major
    if server.product == "Elasticsearch":
        ok = server.flavor == "serverless" or (major is not None and major >= SUPPORTED_MAJORS[0])
    elif server.product == "OpenSearch":
        ok = major is not None and major >= OPENSEARCH_MAJORS[0]
    else:
        ok = False
    if ok:
        return None
    return ConfigError(
        f"ES_HOSTS: {hosts} runs {server}, which the sink does not support ({SUPPORTED})"
    )


def untested(server: Server) -> bool:
    """A major newer than those the sink was tested against (it is tried, with a warning)."""
    major = server.major
    if major is None or server.flavor == "serverless":
        return False
    newest = OPENSEARCH_MAJORS if server.product == "OpenSearch" else SUPPORTED_MAJORS
    return major > newest[-1]


def _says_elasticsearch(headers: Mapping[str, str]) -> bool:
    return headers.get("x-elastic-product") == "Elasticsearch"


def _headers(given: object) -> HttpHeaders:
    """A copy of a request's headers (a Mapping, or the transport's DEFAULT: none)."""
    return HttpHeaders(given if isinstance(given, Mapping) else None)


class ServerTransport(Transport):
    """The client's transport: detects the server before the first request (once; again
    after a connection error), refuses an unsupported one, and speaks the server's major
    (or, to OpenSearch, plain JSON; see the module docstring).

    Thread-safe: bulk threads may make the first request at once; one detects, the others
    wait for it. The rewrite costs two regex substitutions per request, never per document."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server: Server | None = None
        """What was detected (None until the first request got an answer)."""
        self._lock = threading.Lock()
        self._refusal: ConfigError | None = None
        self._media: str | None = None
        """What `_VENDOR_MEDIA` becomes in Accept and Content-Type (None: unchanged)."""
        self._vouch = False
        """Add `X-Elastic-Product` to the answers (OpenSearch)."""
        hosts = [f"{n.scheme}://{n.host}:{n.port}" for n in self.node_pool.all()]
        self._hosts = ", ".join(hosts)

    def perform_request(self, method: str, target: str, **kwargs: Any) -> TransportApiResponse:
        if self.server is None:
            self._detect(kwargs)
        if self._refusal is not None:
            raise self._refusal
        if self._media is not None:
            kwargs["headers"] = self._rewrite(kwargs.get("headers"), self._media)
        answer = super().perform_request(method, target, **kwargs)
        if not self._vouch:
            return answer
        headers = HttpHeaders(answer.meta.headers)
        headers["x-elastic-product"] = "Elasticsearch"
        return TransportApiResponse(dataclasses.replace(answer.meta, headers=headers), answer.body)

    def _detect(self, request: Mapping[str, Any]) -> None:
        with self._lock:
            if self.server is not None:
                return
            base = _headers(request.get("headers"))  # the client's auth and user agent
            base.pop("content-type", None)
            timeout = request.get("request_timeout")

            def send(method: str, target: str, headers: Mapping[str, str]) -> TransportApiResponse:
                h = HttpHeaders(base)
                h.update(headers)
                extra = {} if timeout is None else {"request_timeout": timeout}
                return super(ServerTransport, self).perform_request(
                    method, target, headers=h, max_retries=0, **extra
                )

            try:
                server = detect(send)
            except ConfigError as e:
                self._refusal = ConfigError(f"ES_HOSTS: {self._hosts}: {e}")
                self.server = Server("unknown", "unknown")
                return
            self._refusal = refusal(server, self._hosts)
            if self._refusal is None:
                self._speak(server)
            self.server = server

    def _speak(self, server: Server) -> None:
        if server.product == "OpenSearch":
            self._media, self._vouch = r"application/\1", True
        elif server.flavor != "serverless" and server.major and server.major < CLIENT_MAJOR:
            self._media = rf"application/vnd.elasticsearch+\1; compatible-with={server.major}"
        if untested(server):
            logger.warning(
                "%s at %s is newer than the versions the sink was tested against",
                server,
                self._hosts,
            )

    @staticmethod
    def _rewrite(headers: object, media: str) -> HttpHeaders:
        out = _headers(headers)
        for name in ("accept", "content-type"):
            value = out.get(name)
            if value:
                out[name] = _VENDOR_MEDIA.sub(media, value)
        return out
