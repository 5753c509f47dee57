"""What answers at ES_HOSTS: its product and version, from what the credentials may ask
(the transport that then speaks to it is `server.ServerTransport`).

`GET /` says it all. When it does not, each answer means:
- 401: the credentials; raised, the caller's credentials error.
- 429 or 5xx (a load balancer's 502/503/504, a node starting) on any request: transient;
  raised as the ApiError, which the caller retries. Nothing is known then: the next request
  asks again. A major is never guessed from a transient answer.
- anything else, such as 403 (a user without the `monitor` privilege) or 405 (the
  integ-test-zip has no `GET /`): the local node's info may still answer (Elasticsearch
  has sent `build_flavor` there since 6.3; OpenSearch has none). Failing that,
  Elasticsearch says what it is on every answer (`X-Elastic-Product`, since 7.14), and its
  major by what it answers a request with `compatible-with=<client major>`: 8 names the
  versions it accepts (`must be either version 8 or 7`), 9 takes it.
- no such header: OpenSearch's security plugin refusing both (403 `security_exception`, `no
  permissions for [cluster:monitor/main] and User [...]`) says OpenSearch, not which
  version. That, and any other server that does not say what it is (an ingress's 404 page),
  is a ConfigError naming the status and what to grant or check.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import elasticsearch
from elastic_transport import TransportApiResponse
from elasticsearch.exceptions import HTTP_EXCEPTIONS, ApiError

from sinks.errors import ConfigError

CLIENT_MAJOR = int(elasticsearch.__versionstr__.partition(".")[0])
"""The major of the installed elasticsearch-py, the `compatible-with` it sends."""

SUPPORTED_MAJORS = range(8, CLIENT_MAJOR + 1)
"""Elasticsearch majors the sink is tested against (8.19 and 9.x)."""

OPENSEARCH_MAJORS = range(2, 4)
"""OpenSearch majors the sink is tested against (2.19 and 3.x); later ones get a warning."""

SUPPORTED = "Elasticsearch 8.x, 9.x or OpenSearch 2.x, 3.x"

PROBES = 3
"""Requests `detect` makes at most."""

_PLAIN = "application/json"
_MEDIA_VERSIONS = re.compile(r"\bversion (\d+)\b")
_TOOK_IT = frozenset({403, 404, 405})
"""Refusals of a `compatible-with=<client major>` request that mean it was understood."""
_GRANT = "grant the credentials the monitor cluster privilege (OpenSearch: cluster:monitor/main)"


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
    if says_elasticsearch(headers) or body.get("tagline") == "You Know, for Search":
        return Server("Elasticsearch", number, flavor)
    name = str(body.get("tagline") or "an unknown product")[:80]
    return Server(name, number, flavor)


def detect(send: Send) -> Server:
    """Ask the server what it is (see the module docstring). Raises the ApiError of a 401
    or a transient answer, the transport's connection errors, and ConfigError (without the
    ES_HOSTS prefix) for a server that does not say what it is."""
    plain = {"accept": _PLAIN}
    meta, body = _definite(send("GET", "/", plain), "GET /")
    if 200 <= meta.status < 300:
        server = from_root(meta.headers, body)
        if server is not None:
            return server
    first, denied = meta.status, body
    elastic = says_elasticsearch(meta.headers)
    target = "/_nodes/_local?filter_path=nodes.*.version,nodes.*.build_flavor"
    meta, body = _definite(send("GET", target, plain), "GET /_nodes/_local")
    elastic = elastic or says_elasticsearch(meta.headers)
    if 200 <= meta.status < 300 and isinstance(body, dict):
        for node in (body.get("nodes") or {}).values():
            if isinstance(node, dict) and node.get("version"):
                return _from_node(str(node["version"]), elastic or "build_flavor" in node)
    if not elastic:
        if first == 403 and _opensearch_security(denied):
            msg = (
                "OpenSearch's security plugin refused GET / (HTTP 403) and the node's info, "
                "so its version is unknown: grant the credentials cluster:monitor/main "
                "(the cluster_monitor action group), or check the URL"
            )
            raise ConfigError(msg)
        todo = f"{_GRANT}, or check the URL" if first == 403 else "check the URL"
        raise ConfigError(
            f"the server does not say what it is (GET / answered HTTP {first}): {todo}"
        )
    compat = f"application/vnd.elasticsearch+json; compatible-with={CLIENT_MAJOR}"
    meta, body = _definite(send("GET", "/", {"accept": compat}), "GET /")
    if meta.status == 400 and "media_type_header_exception" in str(body):
        accepted = [int(v) for v in _MEDIA_VERSIONS.findall(str(body))]
        if accepted:
            return Server("Elasticsearch", str(max(accepted)))
    if 200 <= meta.status < 300 or meta.status in _TOOK_IT:
        return Server("Elasticsearch", str(CLIENT_MAJOR))
    msg = (
        f"Elasticsearch does not say its version (GET / answered HTTP {first}, then "
        f"{meta.status}): {_GRANT}, or check the URL"
    )
    raise ConfigError(msg)


def _from_node(version: str, elastic: bool) -> Server:
    """The server a node's info describes: Elasticsearch says so (its header, or the
    `build_flavor` it has had since 6.3); OpenSearch has neither, nor has an Elasticsearch
    before 6.3, so a node without them is OpenSearch only for an OpenSearch major (1 to 3;
    1 is then refused by name) and otherwise an unknown product, refused."""
    if elastic:
        return Server("Elasticsearch", version)
    head = version.partition(".")[0]
    if head.isdigit() and 1 <= int(head) <= OPENSEARCH_MAJORS[-1]:
        return Server("OpenSearch", version)
    return Server("a server without a product header", version)


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


def says_elasticsearch(headers: Mapping[str, str]) -> bool:
    return headers.get("x-elastic-product") == "Elasticsearch"


def _definite(answer: TransportApiResponse, what: str) -> TransportApiResponse:
    """`answer`, unless it is a 401 or transient (429, 5xx): then its ApiError."""
    meta, body = answer
    if meta.status in (401, 429) or meta.status >= 500:
        raise HTTP_EXCEPTIONS.get(meta.status, ApiError)(
            message=f"{what} answered HTTP {meta.status}", meta=meta, body=body
        )
    return answer


def _opensearch_security(body: object) -> bool:
    """A refusal by OpenSearch's security plugin (`no permissions for [...] and User [...]`)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or error.get("type") != "security_exception":
        return False
    reason = str(error.get("reason") or "")
    return reason.startswith("no permissions for [") and "and User [" in reason
