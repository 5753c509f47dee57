"""Tombstone deletes reach the document they delete, or the flow refuses to start, and
the deletes that find nothing are counted.

Against the real broker and a 3-shard index on the real node: a delete without the routing
its document was indexed with goes to another shard, Elasticsearch answers 404, and the
document used to stay while the flow counted the delete as done.
"""

from __future__ import annotations

import re
import signal
import subprocess
import urllib.request
from pathlib import Path

import orjson
import pytest

from tests.support.flows import (
    Services,
    committed_offsets,
    count_docs,
    create_topic,
    produce,
    run_flow,
    search_all,
    start_flow,
)
from tools.chaos.flow import free_ports
from tools.devkit.wait import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.compat("elasticsearch")]

KEYS = 60


def _keyed_then_tombstoned(services: Services, names: object, es: object) -> str:
    topic = names("del")  # type: ignore[operator]
    create_topic(services.kafka, topic, 2)
    es.indices.create(index=topic, settings={"number_of_shards": 3})  # type: ignore[attr-defined]
    docs = [
        (f"k{i}".encode(), orjson.dumps({"tenant": f"tenant-{i % 7}", "n": i})) for i in range(KEYS)
    ]
    tombstones = [(f"k{i}".encode(), None) for i in range(KEYS)]
    produce(services.kafka, topic, [*docs, *tombstones])
    return topic


def test_tombstones_delete_documents_routed_by_key_on_a_multi_shard_index(
    services: Services, es: object, names: object
) -> None:
    topic = _keyed_then_tombstoned(services, names, es)
    # A survivor from the first half proves the routing was applied to the index writes.
    produce(services.kafka, topic, [(b"survivor", b'{"tenant": "x"}')])
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ON_NULL_VALUE": "delete"}
    run = run_flow(services, {**env, "ES_ROUTING": "key"})
    assert run.returncode == 0, run.output[-3000:]
    assert list(search_all(es, topic)) == ["survivor"]
    hit = es.search(index=topic, query={"ids": {"values": ["survivor"]}})  # type: ignore[attr-defined]
    assert hit["hits"]["hits"][0]["_routing"] == "survivor"


@pytest.mark.parametrize(
    ("setting", "value"),
    [("ES_ROUTING", "field:tenant"), ("ES_INDEX", "logs-{yyyy.MM.dd}")],
)
def test_deletes_that_would_miss_their_document_are_refused_at_start(
    services: Services, es: object, names: object, setting: str, value: str
) -> None:
    topic = _keyed_then_tombstoned(services, names, es)
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ON_NULL_VALUE": "delete"}
    if setting == "ES_INDEX":
        value = f"{topic}-{{yyyy.MM.dd}}"
    run = run_flow(services, {**env, setting: value})
    assert run.returncode != 0, "the flow indexed and left documents its tombstones missed"
    line = [x for x in run.output.splitlines() if "configuration error" in x]
    assert line and f"configuration error: {setting}: ON_NULL_VALUE=delete" in line[0], run.output
    assert count_docs(es, topic) == 0  # refused before anything was written


def _metric(url: str, name: str) -> float | None:
    """The value of an unlabelled sample of the flow's /metrics (None: not there)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        text = r.read().decode()
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return None if found is None else float(found[1])


def test_deletes_that_find_nothing_are_counted_when_the_rest_was_written(
    services: Services, es: object, names: object, tmp_path: Path
) -> None:
    """Elasticsearch answers `errors: false` to a bulk whose only non-2xx items are deletes
    of missing documents (404): they used to be counted only beside another failure."""
    topic = names("del404")  # type: ignore[operator]
    create_topic(services.kafka, topic, 1)
    es.indices.create(index=topic)  # type: ignore[attr-defined]  # (no index: an error, counted)
    never = [(f"gone{i}".encode(), None) for i in range(3)]
    produce(services.kafka, topic, [(b"kept", b'{"n": 1}'), *never, (b"kept", None)])
    port = free_ports(1)[0]
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "ON_NULL_VALUE": "delete",
        "KAFKA_STOP_AT_END": "false",
        "API_PORT": str(port),
    }
    log = tmp_path / "flow.log"
    proc = start_flow(services, env, log=log)
    try:
        wait_for(
            lambda: (
                proc.poll() is None and committed_offsets(services.kafka, topic, topic) == {0: 5}
            ),
            120,
            f"every record committed\n{log.read_text(errors='replace')}",
        )
        found = _metric(f"http://127.0.0.1:{port}", "es_sink_deletes_not_found_total")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(40)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert found == 3, log.read_text(errors="replace")[-3000:]
    assert count_docs(es, topic) == 0
