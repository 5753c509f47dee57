"""The bench's side of Kafka and Elasticsearch: checks, names, topics, indices, clean-up, and
the dataset produced once per run. Topic creation and document counts come from tools/devkit/.

Every topic, index and consumer group of a run is named `bench-<run id>-...` and deleted at
the end (`Services.cleanup`), whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from sinks.elasticsearch.client import connect
from tools.devkit.es import count_docs
from tools.devkit.kafka import create_topic, end_offsets

__all__ = [
    "PARTITIONS",
    "POLL_S",
    "BodyWriter",
    "Item",
    "Positions",
    "Services",
    "ceiling_body_bytes",
    "new_producer",
    "produce_dataset",
]

PARTITIONS = 8
BODY_BYTES = 5 * 1024 * 1024
POLL_S = 0.1  # how often a run polls the index's index_total
INDEX_SETTINGS = {"number_of_shards": 1, "number_of_replicas": 0}

Item = tuple[bytes | None, bytes | None, list[tuple[str, str | bytes | None]] | None, bytes | None]
"""One dataset record: (key, value, headers, the ceiling's `_source` line or None when the
record must not become a document: a bad record of `small-dlq5`)."""


PARTITIONER = "murmur2_random"
"""The Java client's partitioner (Kafka Connect, Debezium and most producers) by default.
librdkafka's own default (`consistent_random`) puts key k in partition crc32(k) % n, the
sink partition the flow routes document id k to, and Bytewax gives Kafka partition p and
sink partition p to one worker: with several processes no action would ever cross to
another one, a best case only librdkafka-keyed topics have (`--partitioner`)."""

PARTITIONERS = (
    "random", "consistent", "consistent_random", "murmur2", "murmur2_random", "fnv1a",
    "fnv1a_random",
)  # fmt: skip
"""librdkafka's `partitioner` values."""


class Services:
    """The Kafka broker and Elasticsearch node of a run, and what the run created on them."""

    def __init__(self, bootstrap: str, es_url: str, run_id: str, partitioner: str) -> None:
        self.bootstrap = bootstrap
        self.partitioner = partitioner
        self.es_url = es_url
        self.run_id = run_id
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.es = connect(es_url, request_timeout=120)
        self.topics: list[str] = []
        self.indices: list[str] = []
        self.groups: list[str] = []

    def name(self, what: str) -> str:
        return f"bench-{self.run_id}-{what}"

    def check(self) -> None:
        try:
            self.admin.list_topics(timeout=20)
        except Exception as e:
            raise SystemExit(f"bench: Kafka at {self.bootstrap} does not answer: {e}") from None
        try:
            self.es.cluster.health(wait_for_status="yellow", timeout="30s")
        except Exception as e:
            raise SystemExit(
                f"bench: Elasticsearch at {self.es_url} does not answer: {e}"
            ) from None

    def create_topic(self, topic: str, partitions: int = PARTITIONS) -> None:
        try:
            create_topic(self.bootstrap, topic, partitions)
        finally:
            self.topics.append(topic)  # deleted at the end even if the leader wait failed

    def delete_topic(self, topic: str) -> None:
        with contextlib.suppress(Exception):
            for fut in self.admin.delete_topics([topic]).values():
                fut.result(30)
        if topic in self.topics:
            self.topics.remove(topic)

    def end_offsets(self, topic: str) -> int:
        """Records in `topic`: the sum of its partitions' high watermarks."""
        return sum(end_offsets(self.bootstrap, topic, timeout=30).values())

    def create_index(self, index: str, mappings: dict[str, Any] | None = None) -> None:
        self.es.options(ignore_status=404).indices.delete(index=index)
        self.es.indices.create(index=index, settings=INDEX_SETTINGS, mappings=mappings)
        self.indices.append(index)

    def delete_index(self, index: str) -> None:
        self.es.options(ignore_status=404).indices.delete(index=index)
        if index in self.indices:
            self.indices.remove(index)

    def index_total(self, index: str) -> int:
        """Index operations the primary shard has completed (acknowledged documents)."""
        r = self.es.options(ignore_status=404).indices.stats(
            index=index, metric="indexing", filter_path="_all.primaries.indexing.index_total"
        )
        try:
            return int(r["_all"]["primaries"]["indexing"]["index_total"])
        except (KeyError, TypeError):
            return 0

    def count(self, index: str) -> int:
        return count_docs(self.es, index)

    def searchable(self, index: str) -> int:
        """Documents a search sees now, without forcing a refresh (what a user's query gets
        with the index's default 1 s refresh)."""
        r = self.es.options(ignore_status=404).count(index=index)
        return int(r.get("count", 0))

    def group(self, what: str) -> str:
        g = self.name(f"{what}-{uuid.uuid4().hex[:6]}")
        self.groups.append(g)
        return g

    def cleanup(self) -> None:
        for index in list(self.indices):
            with contextlib.suppress(Exception):
                self.delete_index(index)
        for topic in list(self.topics):
            self.delete_topic(topic)
        # and anything of this run that is left (topics re-created by a client, say)
        with contextlib.suppress(Exception):
            prefix = self.name("")
            left = [t for t in self.admin.list_topics(timeout=10).topics if t.startswith(prefix)]
            for t in left:
                self.delete_topic(t)
        if self.groups:
            with contextlib.suppress(Exception):
                for fut in self.admin.delete_consumer_groups(self.groups).values():
                    with contextlib.suppress(Exception):
                        fut.result(30)
            self.groups = []


def new_producer(bootstrap: str, partitioner: str, **extra: Any) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": partitioner,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "message.max.bytes": 16_777_216,
            # A live producer asks for metadata of topics this harness deletes; the broker
            # must not create them again (auto.create.topics.enable defaults to true).
            "allow.auto.create.topics": False,
            "log_level": 4,
            **extra,
        }
    )


def ceiling_body_bytes(doc_size: str, n: int, threads: int) -> int:
    """~5 MB `_bulk` bodies; smaller for small datasets so that `threads` requests stay in
    flight."""
    per_doc = 2100 if doc_size == "large" else 240
    return max(256 * 1024, min(BODY_BYTES, n * per_doc // (threads * 8)))


class BodyWriter:
    """The ceiling's NDJSON `_bulk` bodies (index actions, ~`body_bytes` each) in one file,
    with their offsets in FILE.json for `tools.bench.ceiling bulk`."""

    def __init__(self, path: Path, body_bytes: int) -> None:
        self.path, self.body_bytes = path, body_bytes
        self.out = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.chunks: list[list[int]] = []
        self.parts: list[bytes] = []
        self.size = self.offset = self.docs = 0

    def add(self, doc_id: bytes, source: bytes) -> None:
        line = b'{"index":{"_id":"%s"}}\n%s\n' % (doc_id, source)
        self.parts.append(line)
        self.size += len(line)
        self.docs += 1
        if self.size >= self.body_bytes:
            self._flush()

    def _flush(self) -> None:
        body = b"".join(self.parts)
        self.out.write(body)
        self.chunks.append([self.offset, len(body)])
        self.offset += len(body)
        self.parts, self.size = [], 0

    def close(self) -> int:
        """Write what is left and the offsets; the number of documents."""
        if self.parts:
            self._flush()
        self.out.close()
        Path(str(self.path) + ".json").write_text(json.dumps(self.chunks))
        return self.docs


class Positions:
    """Where each dataset record landed (partition, offset, timestamp), from the delivery
    reports, for variants whose ceiling documents depend on them (`insert_field from:
    offset`). Records are found by their dataset key `k<i>`."""

    def __init__(self, n: int) -> None:
        self.partition = array("i", bytes(4 * n))
        self.offset = array("q", bytes(8 * n))
        self.timestamp = array("q", bytes(8 * n))

    def delivered(self, msg: Any) -> None:
        i = int(msg.key()[1:])
        self.partition[i] = msg.partition()
        self.offset[i] = msg.offset()
        self.timestamp[i] = msg.timestamp()[1]


def produce_dataset(
    svc: Services,
    topic: str,
    items: Iterable[Item],
    n: int,
    bodies: BodyWriter | None = None,
    positions: Positions | None = None,
) -> tuple[float, int]:
    """Produce the `n` records of `items` to `topic`, add their ceiling lines to `bodies`
    (if given) and their places to `positions` (if given); (seconds taken, how many of the
    records have a ceiling line: the documents the index must end up with)."""
    t0 = time.monotonic()
    docs = 0
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        elif positions is not None:
            positions.delivered(msg)

    producer = new_producer(svc.bootstrap, svc.partitioner)
    produce = producer.produce
    for i, (key, value, headers, source) in enumerate(items):
        while True:
            try:
                if headers:
                    produce(topic, value, key, on_delivery=on_delivery, headers=headers)
                else:
                    produce(topic, value, key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 5000 == 0:
            producer.poll(0)
        if source is not None:
            docs += 1
            if bodies is not None:
                assert key is not None
                bodies.add(key, source)
    if producer.flush(120) != 0 or errors:
        raise RuntimeError(f"producing the dataset failed: {errors[:3]}")
    del producer
    got = svc.end_offsets(topic)
    if got != n:
        raise RuntimeError(f"topic {topic} holds {got} records, expected {n}")
    return time.monotonic() - t0, docs
