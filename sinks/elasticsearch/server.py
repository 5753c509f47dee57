"""The REST API version the client speaks to the server at ES_HOSTS.

elasticsearch-py 9 sends `compatible-with=9` in the Accept and Content-Type of every
request; Elasticsearch 9 accepts 8 and 9, Elasticsearch 8 answers HTTP 400
(`media_type_header_exception`). The client has no setting for it: a client-wide `headers=`
is overridden by each API's own Accept, which the client then turns into `compatible-with=9`
(elasticsearch-py issues 2923, 2927: "use a 9.x server"). So the sink's clients get
`ServerTransport` as their `transport_class`: before the first request it asks the server
what it is (`detection.detect`), refuses what the sink does not support with one line
naming ES_HOSTS, and from then on rewrites `compatible-with=9` to the server's major.

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
from collections.abc import Mapping
from concurrent.futures import Future, wait
from typing import Any

from elastic_transport import ConnectionTimeout, HttpHeaders, Transport, TransportApiResponse
from elastic_transport.client_utils import DEFAULT

from sinks.elasticsearch.detection import (
    CLIENT_MAJOR,
    PROBES,
    SUPPORTED,
    Server,
    detect,
    from_root,
    refusal,
    untested,
)
from sinks.errors import ConfigError

logger = logging.getLogger(__name__)

__all__ = [
    "CLIENT_MAJOR",
    "DETECT_TIMEOUT_S",
    "SUPPORTED",
    "Server",
    "ServerTransport",
    "from_root",
    "refusal",
]

DETECT_TIMEOUT_S = 10.0
"""The longest a detection request waits (less when the request it precedes has less)."""

_VENDOR_MEDIA = re.compile(r"application/vnd\.elasticsearch\+([\w.-]+); ?compatible-with=\d+")
"""The client's media types (`application/vnd.elasticsearch+json; compatible-with=9`)."""


def _headers(given: object) -> HttpHeaders:
    """A copy of a request's headers (a Mapping, or the transport's DEFAULT: none)."""
    return HttpHeaders(given if isinstance(given, Mapping) else None)


class ServerTransport(Transport):
    """The client's transport: detects the server before the first request, refuses an
    unsupported one, and speaks the server's major (or, to OpenSearch, plain JSON; see the
    module docstring).

    One detection at a time, shared: bulk threads may make the first request at once; one
    detects (at most `PROBES` requests of at most DETECT_TIMEOUT_S each), the others wait
    for it, boundedly, and get its outcome, its error included, rather than each asking in
    turn. Only a definite answer is kept: after an error (unreachable, a transient answer,
    a server that does not say what it is) the next request detects again. Once detected,
    a request costs two regex substitutions, never anything per document."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server: Server | None = None
        """What was detected (None until a detection got a definite answer)."""
        self._lock = threading.Lock()
        self._detecting: Future[None] | None = None
        """The detection under way, whose outcome every request arriving meanwhile gets."""
        self._refusal: ConfigError | None = None
        self._media: str | None = None
        """What `_VENDOR_MEDIA` becomes in Accept and Content-Type (None: unchanged)."""
        self._vouch = False
        """Add `X-Elastic-Product` to the answers (OpenSearch)."""
        nodes = self.node_pool.all()
        self._hosts = ", ".join(f"{n.scheme}://{n.host}:{n.port}" for n in nodes)
        self._node_timeout = nodes[0].config.request_timeout if nodes else None

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
        """Detect the server, or wait for the detection under way; raises its error."""
        given = request.get("request_timeout", DEFAULT)
        timeout = self._node_timeout if given is DEFAULT else given
        timeout = DETECT_TIMEOUT_S if timeout is None else min(timeout, DETECT_TIMEOUT_S)
        with self._lock:
            if self.server is not None:
                return
            running, lead = self._detecting, self._detecting is None
            if running is None:
                running = self._detecting = Future()
        if not lead:
            limit = (PROBES + 1) * timeout  # each probe is bounded by `timeout`
            if not wait([running], timeout=limit).done:
                msg = f"ES_HOSTS: {self._hosts}: detecting the server took over {limit:g}s"
                raise ConnectionTimeout(msg)
            running.result()  # the detection's error, if it failed
            return
        try:
            self._identify(request, timeout)
        except BaseException as e:
            with self._lock:
                self._detecting = None
            running.set_exception(e)
            raise
        with self._lock:
            self._detecting = None
        running.set_result(None)

    def _identify(self, request: Mapping[str, Any], timeout: float) -> None:
        """Ask the server (`detect`) with the request's auth and user agent; keep a definite
        answer (`self.server`), and the refusal if the sink does not support it."""
        base = _headers(request.get("headers"))
        base.pop("content-type", None)

        def send(method: str, target: str, headers: Mapping[str, str]) -> TransportApiResponse:
            h = HttpHeaders(base)
            h.update(headers)
            return super(ServerTransport, self).perform_request(
                method, target, headers=h, max_retries=0, request_timeout=timeout
            )

        try:
            server = detect(send)
        except ConfigError as e:
            raise ConfigError(f"ES_HOSTS: {self._hosts}: {e}") from None
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
