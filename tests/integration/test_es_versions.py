"""The server at ES_HOSTS, detected at start: the flow speaks the real node's major (run this
file against Elasticsearch 8.19 and 9.x, and OpenSearch 2.19 and 3.x), and refuses an
unsupported server with one line (a proxy in front of the real node answers `GET /` as
that server)."""

from __future__ import annotations

import json
import re

import orjson
import pytest

from sinks.elasticsearch.client import server_of
from tests.support.es_proxy import EsProxy
from tests.support.flows import count_docs, create_topic, produce, run_flow

pytestmark = [pytest.mark.integration, pytest.mark.compat]


class RootProxy(EsProxy):
    """The real node, except that `GET /` answers `root` (with `headers`)."""

    def __init__(self, upstream: str, root: dict, headers: dict[str, str]) -> None:
        super().__init__(upstream)
        self.root = root
        self.root_headers = headers

    def _forward(self, method, path, headers, body):  # type: ignore[no-untyped-def]
        if method == "GET" and path == "/":
            out = [("Content-Type", "application/json"), *self.root_headers.items()]
            return 200, out, json.dumps(self.root).encode()
        return super()._forward(method, path, headers, body)


def test_the_flow_detects_the_node_and_writes_to_it(services, es, names):
    topic = names("version")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, [(f"k{i}".encode(), orjson.dumps({"i": i})) for i in range(50)])
    node = next(iter(es.nodes.info(node_id="_local")["nodes"].values()))

    run = run_flow(services, {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic})
    assert run.returncode == 0, run.output
    said = rf"ES_HOSTS answers: (Elasticsearch|OpenSearch) {re.escape(node['version'])}\n"
    assert re.search(said, run.output), run.output
    assert count_docs(es, topic) == 50


@pytest.mark.parametrize(
    ("root", "headers", "says"),
    [
        (
            {"version": {"number": "7.17.0"}, "tagline": "You Know, for Search"},
            {"X-Elastic-Product": "Elasticsearch"},
            "runs Elasticsearch 7.17.0, which the sink does not support "
            "(Elasticsearch 8.x, 9.x or OpenSearch 2.x, 3.x)",
        ),
        (
            {"version": {"distribution": "opensearch", "number": "1.3.20"}, "tagline": "x"},
            {},
            "runs OpenSearch 1.3.20, which the sink does not support "
            "(Elasticsearch 8.x, 9.x or OpenSearch 2.x, 3.x)",
        ),
    ],
    ids=["es7", "opensearch1"],
)
def test_an_unsupported_server_stops_the_start_with_one_line(
    services, es, names, root, headers, says
):
    topic = names("unsupported")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, [(b"k", b'{"a": 1}')])
    with RootProxy(services.es_url, root, headers) as proxy:
        run = run_flow(
            services, {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ES_HOSTS": proxy.url}
        )
    assert run.returncode != 0, run.output
    lines = [x for x in run.output.splitlines() if "configuration error" in x]
    assert lines == [f"es_sink: configuration error: ES_HOSTS: {proxy.url} {says}"], run.output
    assert "Traceback" not in run.output and "panicked" not in run.output, run.output
    assert proxy.bulks == [] and count_docs(es, topic) == 0


class SwappedRootProxy(RootProxy):
    """`GET /` answers 503 (a load balancer with no backend yet) the first `outages` times,
    then `root`: the start check cannot tell what runs there, the sink's first bulk can."""

    def __init__(self, upstream: str, root: dict, headers: dict[str, str], outages: int) -> None:
        super().__init__(upstream, root, headers)
        self.outages = outages
        self.roots = 0

    def _forward(self, method, path, headers, body):  # type: ignore[no-untyped-def]
        if method == "GET" and path == "/":
            self.roots += 1
            if self.roots <= self.outages:
                return 503, [("Content-Type", "text/html")], b"<html>503 no backend</html>"
        return super()._forward(method, path, headers, body)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_server_found_unsupported_mid_flow_stops_it_with_one_line(services, es, names, workers):
    """Detection first happens on a bulk (the start check got a 503): the refusal ends the
    flow with the start's one line, not a Python traceback. (With one worker, Bytewax's
    panic hook still prints that the worker panicked, before the line.)"""
    topic = names("swapped")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, [(b"k", b'{"a": 1}')])
    root = {"version": {"number": "7.17.0"}, "tagline": "You Know, for Search"}
    headers = {"X-Elastic-Product": "Elasticsearch"}
    with SwappedRootProxy(services.es_url, root, headers, outages=2) as proxy:
        env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ES_HOSTS": proxy.url}
        run = run_flow(services, env, "-w", workers, timeout=60)
    assert run.returncode == 1, run.output
    assert "answered HTTP 503 at start; the sink will retry" in run.output, run.output
    assert "retrying 1 of 1 actions" in run.output, run.output  # the bulk's 503: retried
    line = (
        f"es_sink: configuration error: ES_HOSTS: {proxy.url} runs Elasticsearch 7.17.0, "
        "which the sink does not support (Elasticsearch 8.x, 9.x or OpenSearch 2.x, 3.x)"
    )
    assert run.output.rstrip().splitlines()[-1] == line, run.output
    assert "Traceback" not in run.output, run.output
    assert proxy.roots == 3 and proxy.bulks == [] and count_docs(es, topic) == 0


class NoMonitorProxy(EsProxy):
    """The real node to credentials without the `monitor` privilege: `GET /` and the node's
    info answer 403 as the node's security would (the compat probe reaches the node)."""

    def __init__(self, upstream: str, opensearch: bool) -> None:
        super().__init__(upstream)
        self.opensearch = opensearch

    def _forward(self, method, path, headers, body):  # type: ignore[no-untyped-def]
        accept = {k.lower(): v for k, v in headers.items()}.get("accept", "")
        probe = path == "/" and "compatible-with" not in accept
        if method == "GET" and (probe or path.startswith("/_nodes/_local")):
            out = [("Content-Type", "application/json")]
            reason = "no permissions for [cluster:monitor/main] and User [name=sink]"
            if not self.opensearch:
                out.append(("X-Elastic-Product", "Elasticsearch"))
                reason = "action [cluster:monitor/main] is unauthorized for user [sink]"
            denied = {"error": {"type": "security_exception", "reason": reason}, "status": 403}
            return 403, out, json.dumps(denied).encode()
        return super()._forward(method, path, headers, body)


def test_without_the_monitor_privilege(services, es, names):
    """Elasticsearch: its major is still found (8 names the majors it accepts, 9 takes the
    client's) and the flow writes; OpenSearch: one line saying what to grant."""
    topic = names("nomonitor")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, [(f"k{i}".encode(), orjson.dumps({"i": i})) for i in range(5)])
    node = next(iter(es.nodes.info(node_id="_local")["nodes"].values()))
    server = server_of(es)
    opensearch = server is not None and server.product == "OpenSearch"
    with NoMonitorProxy(services.es_url, opensearch) as proxy:
        env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ES_HOSTS": proxy.url}
        run = run_flow(services, env, timeout=60)
    if opensearch:
        assert run.returncode != 0, run.output
        line = (
            f"es_sink: configuration error: ES_HOSTS: {proxy.url}: OpenSearch's security plugin "
            "refused GET / (HTTP 403) and the node's info, so its version is unknown: grant the "
            "credentials cluster:monitor/main (the cluster_monitor action group), or check the URL"
        )
        assert line in run.output.splitlines(), run.output
        assert count_docs(es, topic) == 0
        return
    assert run.returncode == 0, run.output
    major = node["version"].split(".")[0]
    assert f"ES_HOSTS answers: Elasticsearch {major}.x\n" in run.output, run.output
    assert count_docs(es, topic) == 5
