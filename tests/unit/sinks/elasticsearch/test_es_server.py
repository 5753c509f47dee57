"""sinks.elasticsearch.server: what the client finds at ES_HOSTS, the one-line refusals, and
the `compatible-with` it then sends (a fake node answers; the real ones are in
tests/integration/test_es_versions.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from elastic_transport import ApiResponseMeta, BaseNode, HttpHeaders
from elastic_transport import ConnectionError as TransportConnectionError
from elastic_transport._node import NodeApiResponse
from elasticsearch import AuthenticationException, Elasticsearch

from flows import sink_config
from flows.config import Settings
from sinks.elasticsearch import bootstrap
from sinks.elasticsearch.client import make_client, server_of
from sinks.elasticsearch.server import CLIENT_MAJOR, Server, from_root, refusal
from sinks.errors import ConfigError

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
    """Answers with `FakeNode.route` and keeps every request it got."""

    route: Route
    seen: list[tuple[str, str, HttpHeaders]]

    def perform_request(  # type: ignore[override]
        self, method: str, target: str, body: bytes | None = None, headers: Any = None, **_: Any
    ) -> NodeApiResponse:
        h = HttpHeaders(headers or {})
        type(self).seen.append((method, target, h))
        status, out, data = type(self).route(method, target, h)
        out = {"content-type": "application/json", **out}
        meta = ApiResponseMeta(status, "1.1", HttpHeaders(out), 0.0, self.config)
        return NodeApiResponse(meta, json.dumps(data).encode())


def client_with(route: Route) -> tuple[Elasticsearch, list[tuple[str, str, HttpHeaders]]]:
    """The sink's own client (`make_client`) in front of a fake node."""
    node = type("Node", (FakeNode,), {"route": staticmethod(route), "seen": []})
    s = Settings.load({"KAFKA_TOPICS": "t", "ES_HOSTS": "http://127.0.0.1:9"})
    conn = sink_config.connection(s)
    real = Elasticsearch.__init__

    def init(self: Elasticsearch, **kwargs: Any) -> None:
        real(self, node_class=node, **kwargs)

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
        (
            lambda m, t, h: (403, {}, {}),
            ": the server does not say what it is (GET / answered HTTP 403)",
        ),
    ],
)
def test_an_unsupported_server_stops_the_start_with_one_line(route: Route, line: str) -> None:
    client, seen = client_with(route)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bootstrap, "shared_client", lambda _c: client)
        with pytest.raises(ConfigError) as e:
            bootstrap.check_credentials(
                sink_config.connection(Settings.load({"KAFKA_TOPICS": "t"}))
            )
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
