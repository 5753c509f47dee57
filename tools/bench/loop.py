"""The hand-written baseline: a confluent-kafka consumer loop plus elasticsearch-py's
`helpers.streaming_bulk`, committing after each bulk (at-least-once), as a user would
write it without a framework. Run as its own process:

    python -m tools.bench.loop --bootstrap HOST:PORT --es URL --topic T --group G --index I \
        [--stop-at-end]

Library defaults throughout: `json.loads`, the client's default serializer,
`streaming_bulk`'s chunk of 500 actions; one `consume(500)` batch is one bulk, and the
offsets are committed synchronously once it is acknowledged. With `--stop-at-end` it exits
when every partition reached the end offset it had at start; otherwise on SIGTERM/SIGINT.

`--floor` is the other end: the least a Python consumer-to-`_bulk` loop does per record
with these libraries, and no guarantee at all. `consume(1000)`; per record the check that
the value is a JSON object on one line (simdjson, the flow's `RawObjects`), the action
line with the key as id (`orjson.dumps`), the value's bytes as they arrived (as the flow
sends a JSON object by default, `JSON_AS_IS`);
5,000 actions (the flow's BULK_MAX_ACTIONS) a `_bulk`, up to 3 in flight on a thread pool,
the answer's `errors` flag read and nothing else; no commits, no ordering per id, no dead
letters. Its CPU per record is what the flow's guarantees and scaffolding are measured
against (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition
from elasticsearch import Elasticsearch, helpers

from flows.decode.json import RawObjects
from flows.kafka.consumers import FETCH
from sinks.elasticsearch.client import connect


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="tools.bench.loop")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--es", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--index", required=True)
    p.add_argument("--stop-at-end", action="store_true")
    p.add_argument("--floor", action="store_true", help="the least per record (see above)")
    args = p.parse_args(argv)

    stop = False

    def on_signal(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    es = connect(args.es, request_timeout=120)  # speaks Elasticsearch 8 too
    # --floor fetches as the flow does (flows.kafka.consumers.FETCH), so that only the per-record
    # work differs; the loop keeps librdkafka's defaults, as a user would.
    fetch = FETCH if args.floor else {}
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **fetch,
        }
    )
    ends: dict[int, int] = {}
    if args.stop_at_end:
        meta = consumer.list_topics(args.topic, timeout=30).topics[args.topic]
        for part in meta.partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(args.topic, part), timeout=30)
            ends[part] = high
    position: dict[int, int] = {}
    consumer.subscribe([args.topic])
    index = args.index

    def at_end() -> bool:
        return bool(ends) and all(position.get(p, 0) >= end for p, end in ends.items())

    if args.floor:
        try:
            floor(consumer, es, index, lambda: stop, at_end, position)
        finally:
            consumer.close()
        return

    def actions(msgs: list[Any]) -> Iterator[dict[str, Any]]:
        for m in msgs:
            yield {"_index": index, "_id": m.key().decode(), "_source": json.loads(m.value())}

    try:
        while not stop:
            if at_end():
                break
            msgs = consumer.consume(num_messages=500, timeout=0.5)
            good = []
            for m in msgs:
                if m.error() is not None:
                    print(f"loop: consumer error: {m.error()}", file=sys.stderr)
                    continue
                good.append(m)
            if not good:
                continue
            for ok, item in helpers.streaming_bulk(es, actions(good), max_retries=5):
                if not ok:
                    raise RuntimeError(f"loop: document refused: {item}")
            consumer.commit(asynchronous=False)
            for m in good:
                position[m.partition()] = m.offset() + 1
    finally:
        consumer.close()


FLOOR_BATCH = 1000
FLOOR_BULK = 5000
FLOOR_IN_FLIGHT = 3
FLOOR_HEAD, FLOOR_TAIL = b'{"index":{"_id":', b"}}\n"
"""The floor's action line around the id (`tools.bench.micro` builds the same line)."""


def floor(
    consumer: Consumer,
    es: Elasticsearch,
    index: str,
    stopped: Callable[[], bool],
    at_end: Callable[[], bool],
    position: dict[int, int],
) -> None:
    """The `--floor` loop (see the module docstring)."""
    accepts, dumps = RawObjects().accepts(), orjson.dumps
    head, tail = FLOOR_HEAD, FLOOR_TAIL
    pool = ThreadPoolExecutor(FLOOR_IN_FLIGHT)
    pending: deque[Future[None]] = deque()

    def send(body: bytes) -> None:
        resp = es.bulk(index=index, operations=body, filter_path="errors")
        if resp.get("errors"):
            raise RuntimeError("loop --floor: a document was refused")

    def flush(lines: list[bytes]) -> None:
        if len(pending) >= FLOOR_IN_FLIGHT:
            pending.popleft().result()
        pending.append(pool.submit(send, b"".join(lines)))

    lines: list[bytes] = []
    while not stopped() and not at_end():
        msgs = consumer.consume(FLOOR_BATCH, 0.5)
        for m in msgs:
            if m.error() is not None:
                print(f"loop: consumer error: {m.error()}", file=sys.stderr)
                continue
            value = m.value()
            if not accepts(value):
                raise ValueError("loop --floor: a value is not a JSON object on one line")
            lines.append(head + dumps(m.key().decode()) + tail + value + b"\n")
            if len(lines) == FLOOR_BULK:
                flush(lines)
                lines = []
        if msgs:  # per batch, not per record: the last offset of each partition in it
            for tp in consumer.position(consumer.assignment()):
                if tp.offset >= 0:  # else nothing read from it yet
                    position[tp.partition] = tp.offset
    if lines:
        flush(lines)
    while pending:
        pending.popleft().result()
    pool.shutdown()


if __name__ == "__main__":
    sys.exit(main())
