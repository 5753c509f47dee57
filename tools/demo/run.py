"""The README's demo: fresh topic, a few thousand events, the flow to the end, a report.

python -m tools.demo.run [--count 5000] [--format json|avro]   (scripts/demo sets up the venv and
services first). Kafka and Elasticsearch: KAFKA_BOOTSTRAP_SERVERS and ES_HOSTS, else the
stack's ports; with `--format avro` the Schema Registry too: SCHEMA_REGISTRY_URL, else the
stack's (tools.demo.avro).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Mapping

import orjson
from confluent_kafka.admin import AdminClient
from elasticsearch import Elasticsearch

from tools.demo.avro import as_avro, registry_url
from tools.demo.generator import ensure_topic, events, produce


def reset_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Delete the demo topic if present and create it anew, so counts are exact."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        admin.delete_topics([topic])[topic].result(30)
        deadline = time.monotonic() + 60
        while topic in admin.list_topics(timeout=30).topics:
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {topic} was not deleted within 60s")
            time.sleep(0.5)
    for _ in range(60):
        try:
            ensure_topic(bootstrap, topic, partitions)
            return
        except Exception:
            time.sleep(0.5)
    ensure_topic(bootstrap, topic, partitions)


def addresses(env: Mapping[str, str]) -> tuple[str, str]:
    """Kafka's bootstrap servers and Elasticsearch's URL: KAFKA_BOOTSTRAP_SERVERS and
    ES_HOSTS when set, else the ones `scripts/stack` serves on (STACK_HOST, KAFKA_PORT,
    ES_PORT), so that the demo resets its topic and index on the stack it started."""
    host = env.get("STACK_HOST", "127.0.0.1")
    bootstrap = env.get("KAFKA_BOOTSTRAP_SERVERS") or f"{host}:{env.get('KAFKA_PORT', '9092')}"
    es_hosts = env.get("ES_HOSTS") or f"http://{host}:{env.get('ES_PORT', '9200')}"
    return bootstrap, es_hosts.split(",")[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run the es_sink demo end to end")
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--topic", help="default: demo-events, or demo-events-avro")
    parser.add_argument(
        "--format", choices=("json", "avro"), default="json", help="the events' encoding"
    )
    args = parser.parse_args(argv)
    avro = args.format == "avro"
    topic = args.topic or ("demo-events-avro" if avro else "demo-events")
    bootstrap, es_url = addresses(os.environ)
    print(f"demo: Kafka at {bootstrap}, Elasticsearch at {es_url}", flush=True)
    es = Elasticsearch(es_url)
    es.options(ignore_status=404).indices.delete(index=topic)
    reset_topic(bootstrap, topic, 3)
    pairs = events(args.count)
    fmt_env: dict[str, str] = {}
    if avro:
        url = registry_url(os.environ)
        print(f"demo: Avro events, their schema in the Schema Registry at {url}", flush=True)
        pairs = as_avro(pairs, url, topic)
        fmt_env = {"VALUE_FORMAT": "avro", "SCHEMA_REGISTRY_URL": url}
    produced = produce(bootstrap, topic, pairs)
    print(f"demo: produced {produced} events to topic {topic}", flush=True)

    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": f"demo-{int(time.time())}",
        "ES_HOSTS": es_url,
        "KAFKA_STOP_AT_END": "true",
        **fmt_env,
    }
    cmd = [sys.executable, "-m", "bytewax.run", "flows.es_sink", "-s", "1"]
    shown = " ".join(f"{k}={v}" for k, v in (("KAFKA_TOPICS", topic), *fmt_env.items()))
    print(f"demo: running {' '.join(cmd[1:])} ({shown}, KAFKA_STOP_AT_END=true)")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, check=False)
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        print(f"demo: the flow exited with status {proc.returncode}", file=sys.stderr)
        return 1
    es.indices.refresh(index=topic)
    indexed = es.count(index=topic)["count"]
    sample = es.search(index=topic, size=1, sort=[{"ts": "desc"}])["hits"]["hits"][0]
    print(f"demo: produced={produced} indexed={indexed} in {elapsed:.1f}s (index {topic})")
    print(f"demo: sample document _id={sample['_id']}:")
    print(orjson.dumps(sample["_source"], option=orjson.OPT_INDENT_2).decode())
    if indexed != produced:
        print("demo: MISMATCH between produced and indexed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
