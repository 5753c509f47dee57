"""The hand-written baseline: a confluent-kafka consumer loop plus elasticsearch-py's
`helpers.streaming_bulk`, committing after each bulk (at-least-once), as a user would
write it without a framework. Run as its own process:

    python -m bench.loop --bootstrap HOST:PORT --es URL --topic T --group G --index I \
        [--stop-at-end]

Library defaults throughout: `json.loads`, the client's default serializer,
`streaming_bulk`'s chunk of 500 actions; one `consume(500)` batch is one bulk, and the
offsets are committed synchronously once it is acknowledged. With `--stop-at-end` it exits
when every partition reached the end offset it had at start; otherwise on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from elasticsearch import helpers

from sinks.elasticsearch.client import connect


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.loop")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--es", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--index", required=True)
    p.add_argument("--stop-at-end", action="store_true")
    args = p.parse_args(argv)

    stop = False

    def on_signal(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    es = connect(args.es, request_timeout=120)  # speaks Elasticsearch 8 too
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
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

    def actions(msgs: list[Any]) -> Iterator[dict[str, Any]]:
        for m in msgs:
            yield {"_index": index, "_id": m.key().decode(), "_source": json.loads(m.value())}

    try:
        while not stop:
            if ends and all(position.get(p, 0) >= end for p, end in ends.items()):
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


if __name__ == "__main__":
    sys.exit(main())
