"""Realistic demo events (an online shop's clickstream and orders), produced to Kafka.

    python -m tools.demo.generator --topic demo-events --count 5000 [--partitions 3] [--seed 7]

Deterministic for a seed, keyed by event id, ~200-400 bytes of JSON each.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections.abc import Iterator

import orjson
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

EVENT_TYPES = ("page_view", "page_view", "page_view", "search", "add_to_cart", "checkout", "order")
PAGES = ("/", "/shoes", "/shoes/trail", "/jackets", "/sale", "/cart", "/account")
COUNTRIES = ("DE", "FR", "US", "GB", "NL", "PL", "ES", "SE", "JP", "BR")
DEVICES = ("mobile", "desktop", "tablet")
PRODUCTS = [f"SKU-{i:05d}" for i in range(200)]


def events(count: int, seed: int = 7, start_ms: int | None = None) -> Iterator[tuple[bytes, bytes]]:
    """`count` (key, value) pairs of JSON events; the key is the event id."""
    rng = random.Random(seed)
    t = start_ms if start_ms is not None else int(time.time() * 1000) - count * 50
    for _ in range(count):
        t += rng.randint(1, 100)
        event_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        kind = rng.choice(EVENT_TYPES)
        event: dict[str, object] = {
            "event_id": event_id,
            "type": kind,
            "ts": t,
            "user": {"id": f"u{rng.randint(1, 5000):05d}", "country": rng.choice(COUNTRIES)},
            "session": f"s{rng.getrandbits(40):010x}",
            "device": rng.choice(DEVICES),
            "page": rng.choice(PAGES),
        }
        if kind == "search":
            event["query"] = rng.choice(("trail shoes", "rain jacket", "socks", "gift card"))
        if kind in ("add_to_cart", "checkout", "order"):
            items = [
                {
                    "sku": rng.choice(PRODUCTS),
                    "qty": rng.randint(1, 3),
                    "price": round(rng.uniform(5, 250), 2),
                }
                for _ in range(rng.randint(1, 3))
            ]
            event["items"] = items
            event["total"] = round(sum(i["qty"] * i["price"] for i in items), 2)  # type: ignore[operator]
        yield event_id.encode(), orjson.dumps(event)


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create `topic` if it does not exist yet."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        return
    fut = admin.create_topics([NewTopic(topic, partitions, 1)])[topic]
    try:
        fut.result(30)
    except KafkaException as e:
        if "TOPIC_ALREADY_EXISTS" not in str(e):
            raise


def produce(bootstrap: str, topic: str, pairs: Iterator[tuple[bytes, bytes]]) -> int:
    """Produce all pairs and wait for every delivery; returns how many were confirmed."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    failed: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    n = 0
    for key, value in pairs:
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        n += 1
    producer.flush(60)
    if failed:
        raise RuntimeError(f"{len(failed)} demo events were not delivered: {failed[0]}")
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="demo-events")
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    ensure_topic(args.bootstrap, args.topic, args.partitions)
    n = produce(args.bootstrap, args.topic, events(args.count, args.seed))
    print(f"produced {n} events to {args.topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
