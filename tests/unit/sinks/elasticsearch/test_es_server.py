"""sinks.elasticsearch.server: what the client finds at ES_HOSTS, the one-line refusals, and
the `compatible-with` it then sends (a fake node answers; the real ones are in
tests/integration/test_es_versions.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from elastic_transport import ApiResponseMeta, BaseNode, ConnectionTimeout, HttpHeaders
from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport._node import NodeApiResponse
from elastic_transport.client_utils import DEFAULT
from elasticsearch import ApiError, AuthenticationException, Elasticsearch

from flows.config import Settings
from sinks import failing
from sinks.elasticsearch import bootstrap
from sinks.elasticsearch import bulk as bulks
from sinks.elasticsearch.client import make_client, server_of
from sinks.elasticsearch.partition import EsSinkPartition, clear_refusals
from sinks.elasticsearch.server import CLIENT_MAJOR, DETECT_TIMEOUT_S, Server, from_root, refusal
from sinks.errors import ConfigError
from tests.unit.sinks.elasticsearch.test_es_partition import FakeClock, make_actions

ELASTIC = {"x-elastic-product": "Elasticsearch"}
WHY = "(Elasticsearch 8.x, 9.x or OpenSearch 2.x, 3.x)"


def root(number: str, **version: str) -> dict[str, Any]:
    return {"version": {"number": number, **version}, "tagline": "You Know, for Search"}


OPENSEARCH_ROOT = {
    "version": {"distribution": "opensearch", "number": "2.19.3"},
    "tagline": "The OpenSearch Project: https://opensearch.org/",
}

Answer = tuple[int, dict[str, str], Any]
Route = Callable[[str, str, HttpHeaders], Answer]


class FakeNode(BaseNode):
    """Answers with `FakeNode.route` and keeps every request it got (and its timeout)."""

    route: Route
    seen: list[tuple[str, str, HttpHeaders]]
    timeouts: list[tuple[str, object]]

    def perform_request(  # type: ignore[override]
        self,
        method: str,
        target: str,
        body: bytes | None = None,
        headers: Any = None,
        request_timeout: object = DEFAULT,
        **_: Any,
    ) -> NodeApiResponse:
        h = HttpHeaders(headers or {})
        type(self).seen.append((method, target, h))
        type(self).timeouts.append((target, request_timeout))
        status, out, data = type(self).route(method, target, h)
        out = {"content-type": "application/json", **out}
        meta = ApiResponseMeta(status, "1.1", HttpHeaders(out), 0.0, self.config)
        raw = data.encode() if isinstance(data, str) else json.dumps(data).encode()
        return NodeApiResponse(meta, raw)


def client_with(
    route: Route, timeouts: list[tuple[str, object]] | None = None
) -> tuple[Elasticsearch, list[tuple[str, str, HttpHeaders]]]:
    """The sink's own client (`make_client`) in front of a fake node."""
    attrs = {
        "route": staticmethod(route),
        "seen": [],
        "timeouts": [] if timeouts is None else timeouts,
    }
    node = type("Node", (FakeNode,), attrs)
    s = Settings.load({"KAFKA_TOPICS": "t", "ES_HOSTS": "http://127.0.0.1:9"})
    conn = s.es_connection
    real = Elasticsearch.__init__

    def init(self: Elasticsearch, **kwargs: Any) -> None:
        real(self, **{**kwargs, "node_class": node})  # in place of the sink's own

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Elasticsearch, "__init__", init)
        client = make_client(conn)
    return client, node.seen


def es(
    number: str | None, *, root_status: int = 200, nodes_status: int = 200, **version: str
) -> Route:
    """A fake Elasticsearch `number` (the major's media-type rules) whose `GET /` answers
    `root_status` and `_nodes` answers `nodes_status`."""
    major = int(number.split(".")[0]) if number else CLIENT_MAJOR

    def route(method: str, target: str, headers: HttpHeaders) -> Answer:
        accept = headers.get("accept", "")
        if "compatible-with=" in accept:
            asked = int(accept.rsplit("=", 1)[1])
            if asked not in (major, major - 1):
                reason = f"Accept version must be either version {major} or {major - 1}"
                body = {"error": {"type": "media_type_header_exception", "caused_by": reason}}
                return 400, ELASTIC, body
        if target == "/":
            return root_status, ELASTIC, root(number or "?", **version)
        if target.startswith("/_nodes/_local"):
            return nodes_status, ELASTIC, {"nodes": {"n1": {"version": number}}}
        if target.endswith("_bulk"):
            return 200, ELASTIC, {"errors": False}
        return 200, ELASTIC, {"status": "green"}

    return route


def opensearch(number: str) -> Route:
    """A fake OpenSearch: no X-Elastic-Product, and 406 for the client's vendor media types."""

    def route(method: str, target: str, headers: HttpHeaders) -> Answer:
        for name in ("accept", "content-type"):
            if "vnd.elasticsearch" in headers.get(name, ""):
                return 406, {}, {"error": f"{name} header is not supported", "status": 406}
        if target == "/":
            return (
                200,
                {},
                {**OPENSEARCH_ROOT, "version": {**OPENSEARCH_ROOT["version"], "number": number}},
            )
        return 200, {}, {"errors": False} if target.endswith("_bulk") else {"status": "green"}

    return route


def bulk(client: Elasticsearch) -> object:
    return client.bulk(operations=b'{"index":{"_index":"i"}}\n{"a":1}\n').body


# -- what the answers say


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        (ELASTIC, root("8.19.7"), Server("Elasticsearch", "8.19.7")),
        ({}, root("7.10.2"), Server("Elasticsearch", "7.10.2")),  # before X-Elastic-Product
        ({}, OPENSEARCH_ROOT, Server("OpenSearch", "2.19.3")),
        (
            ELASTIC,
            root("8.11.0", build_flavor="serverless"),
            Server("Elasticsearch", "8.11.0", "serverless"),
        ),
        ({}, {"version": {"number": "1.0"}, "tagline": "Hello"}, Server("Hello", "1.0")),
        (ELASTIC, {"error": "nope"}, None),
    ],
)
def test_the_root_answer_names_product_and_version(
    headers: dict[str, str], body: object, expected: Server | None
) -> None:
    assert from_root(headers, body) == expected


@pytest.mark.parametrize(
    ("server", "line"),
    [
        (
            Server("Elasticsearch", "7.17.0"),
            f"ES_HOSTS: h runs Elasticsearch 7.17.0, which the sink does not support {WHY}",
        ),
        (
            Server("OpenSearch", "1.3.20"),
            f"ES_HOSTS: h runs OpenSearch 1.3.20, which the sink does not support {WHY}",
        ),
        (
            Server("Elasticsearch", "unknown"),
            f"ES_HOSTS: h runs Elasticsearch unknown.x, which the sink does not support {WHY}",
        ),
        (
            Server("Hello", "1.0"),
            f"ES_HOSTS: h runs Hello 1.0, which the sink does not support {WHY}",
        ),
    ],
)
def test_an_unsupported_server_is_one_line_naming_es_hosts(server: Server, line: str) -> None:
    error = refusal(server, "h")
    assert error is not None and str(error) == line
    assert "\n" not in str(error)


@pytest.mark.parametrize(
    "server",
    [
        Server("Elasticsearch", "8.0.0"),
        Server("Elasticsearch", "8.19.7"),
        Server("Elasticsearch", "9.5.4"),
        Server("Elasticsearch", "8.11.0", "serverless"),
        Server("OpenSearch", "2.19.3"),
        Server("OpenSearch", "3.3.0"),
    ],
)
def test_elasticsearch_8_and_9_and_opensearch_2_and_3_are_supported(server: Server) -> None:
    assert refusal(server, "h") is None


# -- the client speaks the server's major


def test_elasticsearch_8_gets_compatible_with_8_on_every_request() -> None:
    client, seen = client_with(es("8.19.7"))
    assert bulk(client) == {"errors": False}
    client.indices.put_index_template(name="t", index_patterns=["t-*"])
    assert server_of(client) == Server("Elasticsearch", "8.19.7")
    assert [t for _, t, _ in seen][:1] == ["/"]  # detected before anything else
    for _, target, headers in seen[1:]:
        assert headers["accept"].endswith("compatible-with=8"), target
        if "content-type" in headers:
            assert headers["content-type"].endswith("compatible-with=8"), target


def test_elasticsearch_9_gets_the_clients_own_headers() -> None:
    client, seen = client_with(es("9.5.4"))
    bulk(client)
    assert server_of(client) == Server("Elasticsearch", "9.5.4")
    assert seen[-1][2]["content-type"].endswith(f"compatible-with={CLIENT_MAJOR}")


@pytest.mark.parametrize("number", ["2.19.3", "3.3.0"])
def test_opensearch_gets_plain_json_and_its_answers_are_accepted(number: str) -> None:
    client, seen = client_with(opensearch(number))
    assert bulk(client) == {"errors": False}
    assert client.cluster.health().body == {"status": "green"}
    client.indices.put_index_template(name="t", index_patterns=["t-*"])
    assert server_of(client) == Server("OpenSearch", number)
    kinds = {(h.get("accept"), h.get("content-type")) for _, _, h in seen[1:]}
    assert kinds == {
        ("application/json", "application/x-ndjson"),
        ("application/json", None),
        ("application/json", "application/json"),
    }


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        # the integ-test-zip has no `GET /` (405): the node's info says it
        (es("8.19.7", root_status=405), Server("Elasticsearch", "8.19.7")),
        # no `monitor` privilege: neither answers; ES 8 names the majors it accepts
        (es("8.19.7", root_status=403, nodes_status=403), Server("Elasticsearch", "8")),
        (es("9.5.4", root_status=403, nodes_status=403), Server("Elasticsearch", "9")),
    ],
)
def test_a_server_that_does_not_answer_get_root_is_still_told_apart(
    route: Route, expected: Server
) -> None:
    client, seen = client_with(route)
    assert bulk(client) == {"errors": False}
    assert server_of(client) == expected
    assert seen[-1][2]["content-type"].endswith(f"compatible-with={expected.major}")


@pytest.mark.parametrize(
    ("route", "line"),
    [
        (es("7.17.0"), "runs Elasticsearch 7.17.0, which the sink does not support"),
        (opensearch("1.3.20"), "runs OpenSearch 1.3.20, which the sink does not support"),
    ],
)
def test_an_unsupported_server_stops_the_start_with_one_line(route: Route, line: str) -> None:
    client, seen = client_with(route)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bootstrap, "shared_client", lambda _c: client)
        with pytest.raises(ConfigError) as e:
            bootstrap.check_credentials(Settings.load({"KAFKA_TOPICS": "t"}).es_connection)
    assert str(e.value).startswith("ES_HOSTS: http://127.0.0.1:9")
    assert line in str(e.value) and "\n" not in str(e.value)
    n = len(seen)
    with pytest.raises(ConfigError):  # every later request too, without asking again
        bulk(client)
    assert len(seen) == n


def test_wrong_credentials_at_detection_are_the_credentials_error() -> None:
    body = {"error": {"type": "security_exception", "reason": "unable to authenticate"}}
    client, _ = client_with(lambda m, t, h: (401, ELASTIC, body))
    with pytest.raises(AuthenticationException):
        client.cluster.health()
    assert server_of(client) is None


def test_an_unreachable_node_is_detected_once_it_answers() -> None:
    up = threading.Event()
    answer = es("8.19.7")

    def route(method: str, target: str, headers: HttpHeaders) -> Answer:
        if not up.is_set():
            raise TransportConnectionError("refused")
        return answer(method, target, headers)

    client, seen = client_with(route)
    with pytest.raises(TransportConnectionError):
        bulk(client)
    assert server_of(client) is None
    up.set()
    assert bulk(client) == {"errors": False}
    assert server_of(client) == Server("Elasticsearch", "8.19.7")
    assert seen[-1][2]["content-type"].endswith("compatible-with=8")


def test_concurrent_first_requests_detect_once() -> None:
    client, seen = client_with(es("8.19.7"))
    threads = [threading.Thread(target=bulk, args=(client,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [t for _, t, _ in seen].count("/") == 1
    assert all(h["accept"].endswith("compatible-with=8") for _, t, h in seen if t != "/")


# -- one detection at a time, with its own timeout


def test_the_detection_has_its_own_short_timeout() -> None:
    timeouts: list[tuple[str, object]] = []
    client, _ = client_with(es("8.19.7", root_status=403, nodes_status=403), timeouts)
    bulk(client)  # with the client's ES_REQUEST_TIMEOUT_S (60 s)
    assert timeouts == [
        ("/", DETECT_TIMEOUT_S),
        ("/_nodes/_local?filter_path=nodes.*.version,nodes.*.build_flavor", DETECT_TIMEOUT_S),
        ("/", DETECT_TIMEOUT_S),
        ("/_bulk", 60.0),
    ]
    timeouts.clear()
    client, _ = client_with(es("8.19.7"), timeouts)
    client.options(request_timeout=2.5).cluster.health()
    assert timeouts == [("/", 2.5), ("/_cluster/health", 2.5)]


def test_waiters_of_a_failed_detection_get_its_error_and_the_next_request_asks_again() -> None:
    up = threading.Event()
    answer = es("8.19.7")

    def route(method: str, target: str, headers: HttpHeaders) -> Answer:
        if not up.is_set():
            time.sleep(0.3)  # the other threads arrive meanwhile, and wait
            raise TransportConnectionError("refused")
        return answer(method, target, headers)

    client, seen = client_with(route)
    errors: list[BaseException] = []

    def first_bulk() -> None:
        try:
            bulk(client)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=first_bulk) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(errors) == 8 and all(isinstance(e, TransportConnectionError) for e in errors)
    assert [t for _, t, _ in seen] == ["/"]  # one detection for all eight, not eight in turn
    assert server_of(client) is None
    up.set()
    assert bulk(client) == {"errors": False}  # the next request detects again
    assert server_of(client) == Server("Elasticsearch", "8.19.7")


def test_a_waiter_does_not_wait_forever_for_a_stuck_detection() -> None:
    release = threading.Event()
    answer = es("8.19.7")

    def route(method: str, target: str, headers: HttpHeaders) -> Answer:
        release.wait(10)  # a node that never answers (the fake ignores the timeout)
        return answer(method, target, headers)

    client, _ = client_with(route)
    leader = threading.Thread(target=bulk, args=(client,))
    leader.start()
    time.sleep(0.1)
    start = time.monotonic()
    with pytest.raises(ConnectionTimeout) as e:
        client.options(request_timeout=0.1).cluster.health()
    assert e.value.message == "ES_HOSTS: http://127.0.0.1:9: detecting the server took over 0.4s"
    assert time.monotonic() - start < 2
    release.set()
    leader.join(5)
    assert server_of(client) == Server("Elasticsearch", "8.19.7")


# -- only definite answers are kept


def flaky(healthy: Route, fail: Callable[[str, HttpHeaders], Answer | None]) -> Route:
    """`healthy`, except where `fail` answers (until `fail.heal` is set)."""
    broken = [True]

    def route(method: str, target: str, headers: HttpHeaders) -> Answer:
        out = fail(target, headers) if broken[0] else None
        return healthy(method, target, headers) if out is None else out

    route.heal = lambda: broken.__setitem__(0, False)  # type: ignore[attr-defined]
    return route


HTML = {"content-type": "text/html"}


@pytest.mark.parametrize(
    ("fail", "status"),
    [
        # a load balancer or ingress with no backend yet: no product header, an HTML page
        (lambda t, h: (502, HTML, "<html>bad gateway</html>") if t == "/" else None, 502),
        (lambda t, h: (503, HTML, "<html>unavailable</html>") if t == "/" else None, 503),
        (lambda t, h: (504, HTML, "<html>timeout</html>") if t == "/" else None, 504),
        (lambda t, h: (429, {}, {"error": "too many requests"}) if t == "/" else None, 429),
        # no monitor privilege, then the node info is transient
        (
            lambda t, h: (503, ELASTIC, {}) if t.startswith("/_nodes") else None,
            503,
        ),
        # no monitor privilege, then the compat probe is transient: never guess major 9
        (
            lambda t, h: (503, ELASTIC, {}) if "compatible-with" in h.get("accept", "") else None,
            503,
        ),
        (
            lambda t, h: (429, ELASTIC, {}) if "compatible-with" in h.get("accept", "") else None,
            429,
        ),
    ],
    ids=["502", "503", "504", "429", "nodes-503", "compat-503", "compat-429"],
)
def test_a_transient_answer_is_retried_and_never_kept(
    fail: Callable[[str, HttpHeaders], Answer | None], status: int
) -> None:
    route = flaky(es("8.19.7", root_status=403, nodes_status=403), fail)
    client, seen = client_with(route)
    with pytest.raises(ApiError) as e:
        bulk(client)
    assert e.value.meta.status == status
    assert server_of(client) is None and not any(t == "/_bulk" for _, t, _ in seen)
    verdict = bulks.classify_failure(e.value, 3)  # what the sink's bulk makes of it
    assert verdict.retry == (0, 1, 2) and verdict.budgeted and verdict.stop is None
    route.heal()  # type: ignore[attr-defined]
    assert bulk(client) == {"errors": False}
    assert server_of(client) == Server("Elasticsearch", "8")  # not 9
    assert seen[-1][2]["content-type"].endswith("compatible-with=8")


def opensearch_security(nodes: Answer) -> Route:
    """OpenSearch with its security plugin, to a user without cluster:monitor/main."""
    denied = {
        "error": {
            "type": "security_exception",
            "reason": "no permissions for [cluster:monitor/main] and User [name=sink, "
            "backend_roles=[], requestedTenant=null]",
        },
        "status": 403,
    }
    plain = opensearch("2.19.3")

    def route(method: str, target: str, headers: HttpHeaders) -> Answer:
        if target == "/" and "vnd.elasticsearch" not in headers.get("accept", ""):
            return 403, {}, denied
        if target.startswith("/_nodes/_local"):
            return nodes
        return plain(method, target, headers)

    return route


def test_opensearch_refusing_get_root_is_told_by_its_node_info() -> None:
    client, seen = client_with(
        opensearch_security((200, {}, {"nodes": {"n": {"version": "2.19.3"}}}))
    )
    assert bulk(client) == {"errors": False}
    assert server_of(client) == Server("OpenSearch", "2.19.3")
    assert seen[-1][2]["content-type"] == "application/x-ndjson"


def test_a_node_without_product_header_or_build_flavor_is_opensearch_only_by_its_major() -> None:
    old = opensearch_security((200, {}, {"nodes": {"n": {"version": "6.2.4"}}}))
    client, _ = client_with(old)  # Elasticsearch before 6.3 (no build_flavor) or a stranger
    with pytest.raises(ConfigError, match=r"runs a server without a product header 6\.2\.4"):
        bulk(client)


@pytest.mark.parametrize(
    ("route", "says"),
    [
        (
            opensearch_security((403, {}, {"error": {"type": "security_exception"}})),
            "OpenSearch's security plugin refused GET / (HTTP 403) and the node's info, so its "
            "version is unknown: grant the credentials cluster:monitor/main (the cluster_monitor "
            "action group), or check the URL",
        ),
        (
            lambda m, t, h: (403, {}, {}),
            "the server does not say what it is (GET / answered HTTP 403): grant the credentials "
            "the monitor cluster privilege (OpenSearch: cluster:monitor/main), or check the URL",
        ),
        (
            lambda m, t, h: (404, HTML, "<html>no such path</html>"),
            "the server does not say what it is (GET / answered HTTP 404): check the URL",
        ),
        (
            lambda m, t, h: (200, HTML, "<html>welcome to nginx</html>"),
            "the server does not say what it is (GET / answered HTTP 200): check the URL",
        ),
    ],
    ids=["opensearch-no-monitor", "403", "ingress-404", "not-a-search-server"],
)
def test_a_server_that_cannot_be_identified_is_one_line_and_asked_again(
    route: Route, says: str
) -> None:
    client, seen = client_with(route)
    with pytest.raises(ConfigError) as e:
        bulk(client)
    assert str(e.value) == f"ES_HOSTS: http://127.0.0.1:9: {says}"
    assert server_of(client) is None
    n = len(seen)
    with pytest.raises(ConfigError):
        bulk(client)
    assert len(seen) > n  # not kept: the URL or the privilege may be fixed meanwhile
    assert not any(t == "/_bulk" for _, t, _ in seen)


def test_an_elasticsearch_without_product_header_is_told_by_its_node_info() -> None:
    old = (200, {}, {"nodes": {"n": {"version": "7.10.2", "build_flavor": "oss"}}})
    client, _ = client_with(
        lambda m, t, h: old if t.startswith("/_nodes") else (405, {}, {"error": "no"})
    )
    with pytest.raises(ConfigError, match=r"runs Elasticsearch 7\.10\.2, which the sink does not"):
        bulk(client)
    assert server_of(client) == Server("Elasticsearch", "7.10.2")  # a definite answer: kept


# -- a refusal found by a bulk stops the flow


@pytest.mark.parametrize("outages", [0, 2])
def test_a_refusal_found_by_a_bulk_stops_the_partition_with_its_line(outages: int) -> None:
    """Detection first happens on a bulk (the start check got no answer): the refusal is
    the partition's error, raised to Bytewax (flows.runtime.config_failure prints its line), after
    the transient answers before it were retried; nothing is sent or dead-lettered."""
    seven = es("7.17.0")
    roots = [0]

    def route(method: str, target: str, headers: HttpHeaders) -> Answer:
        if target == "/":
            roots[0] += 1
            if roots[0] <= outages:
                return 503, HTML, "<html>no backend</html>"
        return seven(method, target, headers)

    client, seen = client_with(route)
    s = Settings.load({"KAFKA_TOPICS": "orders"})
    failing.clear()
    clear_refusals()
    clock = FakeClock()
    part = EsSinkPartition(s.es_sink_config, "es-0000", client, None, clock=clock)
    try:
        part.write_batch([make_actions(s, "a", "b")])
        with pytest.raises(ConfigError) as e:
            part.snapshot()
        assert str(e.value) == (
            "ES_HOSTS: http://127.0.0.1:9 runs Elasticsearch 7.17.0, which the sink does not "
            f"support {WHY}"
        )
        assert failing.failing()
    finally:
        failing.clear()
        clear_refusals()
    assert [t for _, t, _ in seen] == ["/"] * (outages + 1)
    assert len(clock.sleeps) == outages  # each 503 was retried with backoff
