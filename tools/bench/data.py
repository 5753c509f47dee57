"""The benchmark's documents: deterministic, keyed, about 200 bytes or about 2 KB of JSON.

Shared by the harness (which produces them to Kafka and writes the ceiling's `_bulk`
bodies) and by the paced ceiling sender (latency runs), so every system indexes the same
documents under the same ids.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

__all__ = [
    "SEED",
    "VARIANTS",
    "LatencyDocs",
    "dataset",
    "due_time_ms",
    "key_for",
    "lat_key_for",
    "make_doc",
]

VARIANTS = ("small", "large")
SEED = 20251130
TYPES = ("click", "view", "purchase", "signup", "logout", "search")
COUNTRIES = ("DE", "FR", "US", "GB", "NL", "ES", "IT", "PL", "SE", "JP")
DEVICES = ("ios", "android", "web", "desktop")
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliett",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "order",
    "payment",
    "refund",
    "invoice",
    "customer",
    "account",
    "session",
    "checkout",
    "basket",
    "shipping",
    "warehouse",
    "latency",
    "timeout",
    "retry",
    "cluster",
    "shard",
    "replica",
    "index",
    "bulk",
    "stream",
    "partition",
]
BASE_TS_MS = 1_764_460_800_000  # 2025-11-30T00:00:00Z


def key_for(i: int) -> str:
    """The Kafka key (and so the document id) of dataset record `i`."""
    return f"k{i:09d}"


def lat_key_for(seq: int) -> str:
    """The key and id of latency record `seq`."""
    return f"l{seq:09d}"


class LatencyDocs:
    """The latency runs' documents, with less CPU per record in the paced senders (CPU the
    2-core machine takes from the systems measured): `make_doc` and `orjson.dumps` run for
    POOL documents once, and record `seq` is document `seq % POOL` with `lat_seq` and
    `lat_ts` appended, as `make_doc` then setting both keys would encode it. So contents
    repeat every POOL records (`event_id`, `ts` and the random fields); ids, from the
    keys, do not."""

    POOL = 1024

    def __init__(self, variant: str) -> None:
        rng = random.Random(SEED + 1)
        self._heads = [orjson.dumps(make_doc(variant, rng, i))[:-1] for i in range(self.POOL)]

    def value(self, seq: int, ts_ms: int) -> bytes:
        """Record `seq`'s JSON, stamped `ts_ms` (`lat_ts`)."""
        return self._heads[seq % self.POOL] + b',"lat_seq":%d,"lat_ts":%d}' % (seq, ts_ms)


def due_time_ms(t0: float, rate: float, seq: int) -> int:
    """When latency record `seq` is due (epoch ms): its `lat_ts`. From the schedule, not
    the clock when it was made, so that a sender running late (a `_bulk` that blocked the
    ceiling's sender, a starved producer thread) counts its lateness as latency instead of
    hiding it (coordinated omission)."""
    return int((t0 + seq / rate) * 1000)


def make_doc(variant: str, rng: random.Random, i: int) -> dict[str, Any]:
    """Document `i`: ~200 bytes (small) or ~2 KB (large) of JSON once encoded."""
    ts = BASE_TS_MS + i * 37
    doc: dict[str, Any] = {
        "event_id": i,
        "user": f"user-{rng.randrange(1_000_000):06d}",
        "type": rng.choice(TYPES),
        "ts": ts,
        "amount": round(rng.random() * 500, 2),
        "currency": "EUR",
        "country": rng.choice(COUNTRIES),
        "device": rng.choice(DEVICES),
        "session": f"{rng.getrandbits(64):016x}",
        "tags": rng.sample(WORDS, 2),
        "ok": rng.random() < 0.97,
    }
    if variant == "large":
        doc["message"] = " ".join(rng.choices(WORDS, k=175))
        doc["attributes"] = {f"attr_{j:02d}": rng.choice(WORDS) for j in range(12)}
        doc["items"] = [
            {
                "sku": f"sku-{rng.randrange(100_000):05d}",
                "qty": rng.randrange(1, 9),
                "price": round(rng.random() * 100, 2),
                "name": " ".join(rng.choices(WORDS, k=3)),
            }
            for _ in range(5)
        ]
    return doc


def dataset(variant: str, n: int, seed: int = SEED):  # type: ignore[no-untyped-def]
    """Yield `(key, value)` bytes for records 0..n-1, the same for every call."""
    rng = random.Random(seed)
    dumps = orjson.dumps
    for i in range(n):
        yield key_for(i).encode(), dumps(make_doc(variant, rng, i))
