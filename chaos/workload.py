"""The keyed workload: good updates, ~2% bad records of many kinds, and the ground truth.

Ground truth comes from Kafka's delivery reports, not from assumptions: every record's
partition and offset is what the broker acknowledged. Records are produced with their key
(and an idempotent producer, so retries cannot reorder or duplicate them), hence every key
lives on exactly one partition and its offsets grow with its updates. The flow runs with
DOC_ID=key and VERSION=offset, so a replay of an older record after a kill gets a 409 and
cannot overwrite a newer one: the final document of a key is its last *good* record by
offset. That only holds because a key never spans partitions (offsets of two partitions
are not comparable); `expected_state` checks it instead of trusting it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

PARTITIONS = 8
BAD_SHARE = 0.02
NULL_KEY_SHARE = 0.002
TOMBSTONE_SHARE = 0.002
SEQ_HEADER = "chaos-seq"

INDEX_BODY: dict[str, Any] = {
    "settings": {"number_of_shards": 1, "number_of_replicas": 0},
    "mappings": {
        # strict: an unknown field is a mapping error too (one more bad-record kind)
        "dynamic": "strict",
        "properties": {
            "k": {"type": "keyword"},
            "seq": {"type": "long"},
            "n": {"type": "long"},
            "price": {"type": "double"},
            "ts": {"type": "date"},
            "ok": {"type": "boolean"},
            "ip": {"type": "ip"},
            "tags": {"type": "keyword"},
            "note": {"type": "text"},
            "obj": {"properties": {"a": {"type": "long"}, "b": {"type": "keyword"}}},
        },
    },
}

_TAGS = ["red", "green", "blue", "cyan", "magenta", "yellow", "black", "white", "grey"]
_WORDS = ["alpha", "beta", "gamma", "delta", "ünïcødé", "日本語", "emoji-😀", "tab\tnew\nline"]


@dataclass(slots=True)
class Rec:
    """One produced record; partition and offset come from its delivery report."""

    kind: str
    key: bytes | None
    value: bytes | None
    """None: a tombstone, which the flow ignores (ON_NULL_VALUE=ignore): no write, no DLQ."""
    stage: str | None
    """The dead-letter stage a bad record must get; None for a good record."""
    partition: int = -1
    offset: int = -1

    @property
    def bad(self) -> bool:
        return self.stage is not None


Maker = Callable[[random.Random, bytes, dict[str, Any]], tuple[bytes, bytes]]


def _with(name: str, value: Any) -> Maker:
    """A valid JSON object whose field `name` conflicts with the index mapping."""
    return lambda rng, key, doc: (key, orjson.dumps({**doc, name: value}))


def _raw(name: str, raw: bytes) -> Maker:
    """The document with field `name` spelled as raw JSON text (NaN, escapes, huge ints)."""
    marker = "__chaos_raw__"
    return lambda rng, key, doc: (
        key,
        orjson.dumps({**doc, name: marker}).replace(f'"{marker}"'.encode(), raw),
    )


def _deep(depth: int) -> bytes:
    return b'{"obj":' + b'{"a":' * depth + b"1" + b"}" * (depth + 1)


# name -> (expected dead-letter stage, maker)
BAD_KINDS: dict[str, tuple[str, Maker]] = {
    "truncated-json": ("deserialize", lambda r, k, d: (k, orjson.dumps(d)[: -r.randint(1, 9)])),
    "trailing-bytes": ("deserialize", lambda r, k, d: (k, orjson.dumps(d) + b" trailing")),
    "array": ("deserialize", lambda r, k, d: (k, orjson.dumps([d, d]))),
    "scalar": (
        "deserialize",
        lambda r, k, d: (k, r.choice([b"42", b'"text"', b"true", b"null", b"-1.5e3"])),
    ),
    "empty-value": ("deserialize", lambda r, k, d: (k, b"")),
    "invalid-utf8": ("deserialize", _raw("note", b'"caf\xe9 \xff\xfe"')),
    "utf8-bom": ("deserialize", lambda r, k, d: (k, b"\xef\xbb\xbf" + orjson.dumps(d))),
    "nan": ("deserialize", _raw("price", b"NaN")),
    "lone-surrogate": ("deserialize", _raw("note", b'"\\ud800 lone"')),
    "int-beyond-64-bits": ("deserialize", _raw("n", b"123456789012345678901234567890")),
    "nested-1100-deep": ("deserialize", lambda r, k, d: (k, _deep(1100))),
    "invalid-utf8-key": (
        "deserialize",
        lambda r, k, d: (b"\xff\xfe-bad-key-" + str(r.getrandbits(40)).encode(), orjson.dumps(d)),
    ),
    "transform-trigger": ("transform", _with("explode", True)),
    "mapping-long": ("index", _with("n", "not-a-number")),
    "mapping-u64-in-long": ("index", _raw("n", b"18000000000000000000")),
    "mapping-date": ("index", _with("ts", "the day after tomorrow")),
    "mapping-object": ("index", _with("obj", 5)),
    "mapping-ip": ("index", _with("ip", "999.1.2.3")),
    "mapping-boolean": ("index", _with("ok", "perhaps")),
    "mapping-strict-field": ("index", _with("surprise", {"x": 1})),
    "mapping-too-deep": ("index", lambda r, k, d: (k, _deep(30))),
    "id-too-long": (
        "index",
        lambda r, k, d: (("long-" + "x" * 600 + str(r.getrandbits(40))).encode(), orjson.dumps(d)),
    ),
    "empty-key": ("index", lambda r, k, d: (b"", orjson.dumps(d))),
}


def _key_text(index: int) -> str:
    # Some keys are non-ASCII: document ids are the UTF-8 key text.
    return f"usér-{index}-✓" if index % 37 == 0 else f"user-{index:07d}"


def _good_doc(rng: random.Random, key: str | None, seq: int) -> dict[str, Any]:
    note_len = rng.randint(5, 60)
    return {
        "k": key,
        "seq": seq,
        "n": rng.randint(-(2**63), 2**63 - 1),
        "price": rng.randint(0, 10**9) / 100,
        "ts": (
            f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}."
            f"{rng.randint(0, 999):03d}Z"
        ),
        "ok": rng.random() < 0.5,
        "ip": f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
        "tags": rng.sample(_TAGS, rng.randint(0, 3)),
        "note": " ".join(rng.choice(_WORDS) for _ in range(note_len // 5 + 1)),
        "obj": {"a": rng.randint(0, 10**6), "b": rng.choice(_WORDS)},
    }


def generate(records: int, seed: int) -> list[Rec]:
    """`records` records over records/4 keys, skewed so hot keys get many updates."""
    rng = random.Random(seed)
    keys = max(10, records // 4)
    kinds = sorted(BAD_KINDS)
    out: list[Rec] = []
    for seq in range(records):
        key_text = _key_text(int(keys * rng.random() ** 2))
        roll = rng.random()
        if roll < NULL_KEY_SHARE:
            doc = _good_doc(rng, None, seq)
            out.append(Rec("good-null-key", None, orjson.dumps(doc), None))
            continue
        doc = _good_doc(rng, key_text, seq)
        key = key_text.encode()
        if roll > 1 - TOMBSTONE_SHARE:
            out.append(Rec("tombstone", key, None, None))
            continue
        if roll < NULL_KEY_SHARE + BAD_SHARE:
            kind = kinds[seq % len(kinds)] if rng.random() < 0.5 else rng.choice(kinds)
            stage, make = BAD_KINDS[kind]
            key, value = make(rng, key, doc)
            out.append(Rec(kind, key, value, stage))
        else:
            out.append(Rec("good", key, orjson.dumps(doc), None))
    return out


def produce(bootstrap: str, topic: str, recs: list[Rec], timeout_s: float = 300.0) -> None:
    """Produce every record with its key and fill in partition and offset from the broker."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000,
            "message.max.bytes": 16_777_216,
        }
    )
    errors: list[str] = []

    def report(i: int) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"record {i}: {err}")
            else:
                recs[i].partition = msg.partition()
                recs[i].offset = msg.offset()

        return on_delivery

    for i, rec in enumerate(recs):
        while True:
            try:
                producer.produce(
                    topic,
                    key=rec.key,
                    value=rec.value,
                    headers=[(SEQ_HEADER, str(i).encode())],
                    on_delivery=report(i),
                )
                break
            except BufferError:
                producer.poll(0.1)
        if i % 1000 == 0:
            producer.poll(0)
    deadline = time.monotonic() + timeout_s
    while producer.flush(5) and time.monotonic() < deadline:
        pass
    if errors or any(r.offset < 0 for r in recs):
        missing = sum(r.offset < 0 for r in recs)
        msg = f"producing to {topic} failed: {missing} unconfirmed; {errors[:3]}"
        raise KafkaException(msg)


@dataclass
class Expected:
    """What the index and the dead-letter topic must hold once the backfill completes."""

    docs: dict[str, tuple[int, int]] = field(default_factory=dict)
    """document id -> (offset = expected _version, index into the record list)"""
    bad: dict[tuple[int, int], int] = field(default_factory=dict)
    """(partition, offset) of every bad record -> index into the record list"""
    good: set[tuple[int, int]] = field(default_factory=set)
    """(partition, offset) of every record that must not be dead-lettered"""
    end_offsets: dict[int, int] = field(default_factory=dict)


class GroundTruthError(Exception):
    """The workload does not allow a ground truth (a key on two partitions)."""


def expected_state(topic: str, recs: list[Rec]) -> Expected:
    """Last good write per key wins; a key must live on one partition (checked)."""
    exp = Expected()
    owner: dict[bytes, int] = {}
    for i in sorted(range(len(recs)), key=lambda j: (recs[j].partition, recs[j].offset)):
        r = recs[i]
        coords = (r.partition, r.offset)
        exp.end_offsets[r.partition] = max(exp.end_offsets.get(r.partition, 0), r.offset + 1)
        # librdkafka's partitioner spreads empty keys at random like null ones; they only
        # occur in bad records (an empty document id), which leave no document behind.
        if r.key and owner.setdefault(r.key, r.partition) != r.partition:
            msg = f"key {r.key!r} is on partitions {owner[r.key]} and {r.partition}"
            raise GroundTruthError(msg)
        if r.bad:
            exp.bad[coords] = i
            continue
        exp.good.add(coords)
        if r.value is None:  # ignored tombstone: the document keeps its last good write
            continue
        doc_id = r.key.decode() if r.key is not None else f"{topic}-{r.partition}-{r.offset}"
        exp.docs[doc_id] = (r.offset, i)
    return exp
