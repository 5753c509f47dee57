"""The keyed workload: good updates, ~2% bad records of many kinds, tombstones, null keys.

Every record is produced to an explicit partition chosen here: a key-hash partitioner's
choice, CRC-32 of the key modulo the partition count (null and empty keys anywhere), so a
key's offsets grow with its updates on its partition. Once partitions are added (`growth`)
the same function over the new total places every later record, so about half of the
existing keys move to a new partition, as they do under a producer's default partitioner.
Each good document carries its position in the record list as `seq`, so a document in the
index names the record that wrote it. Offsets come from the broker's delivery reports
(`tools.chaos.produce`); the expected final state is derived from them (`tools.chaos.truth`).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass
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
    """None: a tombstone: ignored (ON_NULL_VALUE=ignore) or a delete of its key's document."""
    stage: str | None
    """The dead-letter stage a bad record must get; None for a good record."""
    partition: int = -1
    """Chosen by the workload; the producer sends the record there explicitly."""
    offset: int = -1
    aborted: bool = False
    """Produced inside an aborted transaction: no consumer may ever see it."""

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


def index_body(
    shards: int, routing_required: bool = False, counted: bool = False
) -> dict[str, Any]:
    """INDEX_BODY with `shards` primary shards (several: routing decides where a doc lives).

    `routing_required`: Elasticsearch refuses any write or delete without routing. With
    ES_ROUTING=key and DOC_ID=key the routing value is the id, so a delete that lost its
    routing would still find the document's shard; this makes the loss visible.
    `counted`: the fields `tools.chaos.modes.COUNTING_SCRIPT` adds (`applied`'s keys are topics).
    """
    mappings = dict(INDEX_BODY["mappings"])
    if counted:
        mappings["properties"] = {
            **mappings["properties"],
            "writes": {"type": "long"},
            "applied": {"type": "object", "enabled": False},
        }
    if routing_required:
        mappings["_routing"] = {"required": True}
    settings = {**INDEX_BODY["settings"], "number_of_shards": shards}
    return {"settings": settings, "mappings": mappings}


def partition_for(key: bytes, partitions: int, offset: int = 0) -> int:
    """The partition of a non-empty key among `partitions`, starting at `offset`."""
    return offset + zlib.crc32(key) % partitions


def _key_text(index: int, prefix: str = "user") -> str:
    # Some keys are non-ASCII: document ids are the UTF-8 key text.
    return f"{prefix}-é-{index}-✓" if index % 37 == 0 else f"{prefix}-{index:07d}"


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


@dataclass(slots=True)
class _Plan:
    """A record before its bytes exist: what it is and where it goes."""

    kind: str  # "good", "good-null-key", "tombstone" or a BAD_KINDS name
    key: str | None
    partition: int


def _compact(value: bytes | None) -> bytes | None:
    """A copy of exactly its size: orjson's output keeps its ~4 KB buffer, and the soak
    holds millions of records (4.2 KB each instead of ~300 B)."""
    return None if value is None else bytes(memoryview(value))


def make_record(rng: random.Random, plan: _Plan, seq: int) -> Rec:
    """The record of `plan`; a good document carries `seq`."""
    doc = _good_doc(rng, plan.key, seq)
    key = plan.key.encode() if plan.key is not None else None
    if plan.kind == "good-null-key":
        return Rec(plan.kind, None, _compact(orjson.dumps(doc)), None, plan.partition)
    if plan.kind == "tombstone":
        return Rec(plan.kind, key, None, None, plan.partition)
    if plan.kind == "good":
        return Rec(plan.kind, key, _compact(orjson.dumps(doc)), None, plan.partition)
    stage, make = BAD_KINDS[plan.kind]
    key, value = make(rng, key or b"", doc)
    return Rec(plan.kind, key, _compact(value), stage, plan.partition)


def _plan(
    rng: random.Random,
    records: int,
    partitions: int,
    bad_share: float,
    pick_key: Callable[[], tuple[str, int]],
    tombstone_share: float = TOMBSTONE_SHARE,
    null_key_share: float = NULL_KEY_SHARE,
    first_seq: int = 0,
) -> list[_Plan]:
    kinds = sorted(BAD_KINDS)
    out: list[_Plan] = []
    for seq in range(first_seq, first_seq + records):
        key, partition = pick_key()
        roll = rng.random()
        if roll < null_key_share:
            out.append(_Plan("good-null-key", None, rng.randrange(partitions)))
        elif roll > 1 - tombstone_share:
            out.append(_Plan("tombstone", key, partition))
        elif roll < null_key_share + bad_share:
            kind = kinds[seq % len(kinds)] if rng.random() < 0.5 else rng.choice(kinds)
            out.append(_Plan(kind, key, partition))
        else:
            out.append(_Plan("good", key, partition))
    return out


def _skewed_keys(
    rng: random.Random, keys: int, partitions: int, prefix: str = "user", first: int = 0
) -> Callable[[], tuple[str, int]]:
    """Keys drawn so hot keys get many updates, each with its partition."""

    def pick() -> tuple[str, int]:
        text = _key_text(int(keys * rng.random() ** 2), prefix)
        return text, partition_for(text.encode(), partitions, first)

    return pick


def generate(
    records: int,
    seed: int,
    partitions: int = PARTITIONS,
    bad_share: float = BAD_SHARE,
    tombstone_share: float = TOMBSTONE_SHARE,
    null_key_share: float = NULL_KEY_SHARE,
) -> list[Rec]:
    """`records` records over records/4 keys, skewed so hot keys get many updates."""
    rng = random.Random(seed)
    pick = _skewed_keys(rng, max(10, records // 4), partitions)
    plans = _plan(rng, records, partitions, bad_share, pick, tombstone_share, null_key_share)
    return [make_record(rng, p, seq) for seq, p in enumerate(plans)]


def chunk(
    rng: random.Random, keys: int, first_seq: int, count: int, partitions: int = PARTITIONS
) -> list[Rec]:
    """`count` more records of an endless workload over `keys` skewed keys (the soak's):
    seq numbers from `first_seq`, no tombstones (a document is never gone)."""
    pick = _skewed_keys(rng, keys, partitions)
    plans = _plan(rng, count, partitions, BAD_SHARE, pick, 0.0, first_seq=first_seq)
    return [make_record(rng, p, first_seq + i) for i, p in enumerate(plans)]


PROCESSOR_STAGES = ("deserialize", "transform")


def generate_strict(records: int, seed: int, partitions: int = PARTITIONS) -> list[Rec]:
    """For ERRORS_TOLERANCE=none: bad records on one partition only, starting 50-80% into it.

    The first bad record is followed within a few records by a second (another stage, most
    often), then more at random: the flow must stop on the first, every time.
    """
    rng = random.Random(f"{seed}-strict")
    pick = _skewed_keys(rng, max(10, records // 4), partitions)
    plans = _plan(rng, records, partitions, 0.0, pick)
    sizes = [sum(p.partition == q and p.kind == "good" for p in plans) for q in range(partitions)]
    target = max(range(partitions), key=lambda q: (sizes[q], rng.random()))
    good = [i for i, p in enumerate(plans) if p.partition == target and p.kind == "good"]
    first = int(len(good) * rng.uniform(0.5, 0.8))
    kinds = sorted(BAD_KINDS)
    early = [k for k in kinds if BAD_KINDS[k][0] in PROCESSOR_STAGES]
    late = [k for k in kinds if BAD_KINDS[k][0] not in PROCESSOR_STAGES]
    # Two thirds of the time the first failure is one the processor sees (held, then
    # raised an epoch later: a snapshot must not pass it), else one only Elasticsearch
    # refuses.
    plans[good[first]].kind = rng.choice(early if rng.random() < 2 / 3 else late)
    second = min(first + rng.randint(1, 5), len(good) - 1)
    if second > first:
        plans[good[second]].kind = rng.choice(kinds)
    for pos in good[second + 1 :]:
        if rng.random() < 0.03:
            plans[pos].kind = rng.choice(kinds)
    return [make_record(rng, p, seq) for seq, p in enumerate(plans)]


def growth(
    recs: list[Rec], records: int, seed: int, old_partitions: int, new_partitions: int
) -> list[Rec]:
    """Records for after `new_partitions` were added to `old_partitions`, each placed where a
    key-hash partitioner puts its key over the new total (`partition_for(key, total)`): half
    of them update existing keys, of which a key on partition p stays there or moves to
    another (p + 4 when 4 grow to 8), the rest are new keys. A moved key's older writes
    were all produced before the partitions were added; under VERSION=none its document
    must still end at its newest write (`tools.chaos.truth` orders its writes by produce order).
    Null keys go to any partition."""
    rng = random.Random(f"{seed}-growth")
    total = old_partitions + new_partitions
    old_keys = sorted({r.key.decode() for r in recs if r.key and r.kind == "good"})
    new_pick = _skewed_keys(rng, max(10, records // 4), total, "new")

    def pick() -> tuple[str, int]:
        if old_keys and rng.random() < 0.5:
            key = rng.choice(old_keys)
            return key, partition_for(key.encode(), total)
        return new_pick()

    plans = _plan(rng, records, total, BAD_SHARE, pick)
    return [make_record(rng, p, len(recs) + i) for i, p in enumerate(plans)]


ABORTED_SEQ = 1_000_000_000
"""`seq` of documents produced in aborted transactions: any such document in the index is
a record that no read_committed consumer may see."""


def aborted_records(
    rng: random.Random, around: list[Rec], count: int, first: int, partitions: int
) -> list[Rec]:
    """`count` records for an aborted transaction: updates of keys of `around` (which would
    make their documents wrong if indexed), new keys (extra documents) and a few bad ones
    (dead letters that must not exist)."""
    keyed = [r for r in around if r.key and r.kind == "good"]
    out = []
    kinds = sorted(BAD_KINDS)
    for j in range(count):
        if keyed and rng.random() < 0.7:
            src = rng.choice(keyed)
            assert src.key is not None
            plan = _Plan("good", src.key.decode(), src.partition)
        else:
            text = f"aborted-{first + j}"
            plan = _Plan("good", text, partition_for(text.encode(), partitions))
        if rng.random() < 0.05:
            plan.kind = rng.choice(kinds)
        rec = make_record(rng, plan, ABORTED_SEQ + first + j)
        rec.aborted = True
        out.append(rec)
    return out
