"""Where documents land: data streams, ingest pipelines and routing, on the real node; and
the metrics the flow serves while it runs."""

from __future__ import annotations

import signal
import urllib.request

import orjson
import pytest

from tests.support.flows import count_docs, create_topic, produce, run_flow, start_flow, wait_for
from tools.chaos.flow import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.compat("elasticsearch")]


def test_data_stream_gets_timestamped_creates(services, es, names):
    topic = names("ds")
    stream = f"logs-{topic}"
    es.indices.put_index_template(
        name=topic,
        index_patterns=[f"{stream}*"],
        data_stream={},
        template={"settings": {"number_of_replicas": 0}},
    )
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, [(f"k{i}".encode(), orjson.dumps({"i": i})) for i in range(20)])

    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ES_INDEX": "logs-{topic}",
           "ES_DATA_STREAM": "true"}  # fmt: skip
    run = run_flow(services, env)
    assert run.returncode == 0, run.output

    es.indices.refresh(index=stream)
    hits = es.search(index=stream, size=100)["hits"]["hits"]
    assert len(hits) == 20
    assert all(h["_index"].startswith(f".ds-{stream}-") for h in hits)
    assert all(isinstance(h["_source"]["@timestamp"], int) for h in hits)
    # Replaying the same records is idempotent: create with the same ids is a 409, done.
    run = run_flow(services, {**env, "KAFKA_GROUP_ID": f"{topic}-again"})
    assert run.returncode == 0, run.output
    es.indices.refresh(index=stream)
    assert es.count(index=stream)["count"] == 20


def test_ingest_pipeline_and_routing(services, es, names):
    topic = names("pipe")
    es.ingest.put_pipeline(id=topic, processors=[])  # the integ-test node has no processors
    es.indices.create(index=topic, settings={"number_of_shards": 2, "number_of_replicas": 0})
    create_topic(services.kafka, topic)
    produce(
        services.kafka,
        topic,
        [(f"k{i}".encode(), orjson.dumps({"tenant": f"t{i % 2}"})) for i in range(10)],
    )

    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ES_PIPELINE": topic,
           "ES_ROUTING": "field:tenant"}  # fmt: skip
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    assert count_docs(es, topic) == 10
    doc = es.get(index=topic, id="k3", routing="t1")
    assert doc["_routing"] == "t1"
    assert doc["_source"] == {"tenant": "t1"}


def test_metrics_are_served_while_the_flow_runs(services, es, names, tmp_path):
    topic = names("metrics")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, [(f"k{i}".encode(), orjson.dumps({"i": i})) for i in range(300)])
    produce(services.kafka, topic, [(b"bad", b"[1, 2]")])
    dlq = names("dlq")
    create_topic(services.kafka, dlq)  # the flow refuses a missing DLQ_TOPIC at start
    (port,) = free_ports(1)  # tests run side by side: no fixed port
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "KAFKA_STOP_AT_END": "false",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
        "BYTEWAX_DATAFLOW_API_ENABLED": "true",
        "BYTEWAX_DATAFLOW_API_PORT": str(port),
    }
    proc = start_flow(services, env, log=tmp_path / "flow.log")
    try:
        wait_for(lambda: count_docs(es, topic) == 300, 60, "all documents")

        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.read().decode()

        # Each counter moves on its own: the dead letter is counted once its delivery is
        # confirmed, which can come after the documents are indexed (the first produce to a
        # topic waits for its metadata). Wait for all, then show which one is missing.
        expected = [
            "es_sink_docs_indexed_total 300.0",
            "es_sink_records_in_total 301.0",
            'es_sink_dead_letters_total{stage="deserialize"} 1.0',
            "es_sink_bulk_seconds_count",
            f'es_sink_consumer_lag{{partition="0",topic="{topic}"}} 0.0',
        ]
        try:
            wait_for(lambda: all(m in scrape() for m in expected), 30, "the metrics")
        except AssertionError:
            text = scrape()
            assert [m for m in expected if m not in text] == [], text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, (tmp_path / "flow.log").read_text()[-2000:]
