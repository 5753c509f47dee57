"""The server at ES_HOSTS, detected at start: the flow speaks the real node's major (run this
file against Elasticsearch 8.19 and 9.x, and OpenSearch 2.19 and 3.x), and refuses an
unsupported server with one line (a proxy in front of the real node answers `GET /` as
that server)."""

from __future__ import annotations

import json
import re

import orjson
import pytest

from tests.conftest import count_docs, create_topic, produce, run_flow
from tests.es_proxy import EsProxy

pytestmark = pytest.mark.integration


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
