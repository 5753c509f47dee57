"""Micro-benchmarks of per-record steps without Kafka or Elasticsearch, for changes too
small for an end-to-end run to resolve (docs/benchmarks.md):

- the processor (decode, build the action, route) on the bench's small and large records,
  beside two loops over the same messages: the floor's per-record work (`tools.bench.loop
  --floor`: the value checked as a JSON object, the action line) and that work with the
  flow's per-record objects (an `Action` keeping its message, the sink partition of its
  id, a chunk per partition);
- what crosses between processes: dumps + loads of the processor's chunks;
- the sink's reading of a `_bulk` answer with errors (classify it, apply it to the call's
  account, find the failed records) at 0.5% and 5% of items refused, and of one without
  (the client's serializer, which skips parsing it, and `classify`);
- the example configuration's nine transforms (`small-transforms`' records): the processor
  with and without them, beside a plain reference for the same edits (decode, the nine
  edits written inline for these records, encode), which must give the flow's documents:
  what the `small-transforms` target (docs/benchmarks.md) can and cannot reach.

CPU µs per record or answer item, the best of several rounds:

    .venv/bin/python -m tools.bench.micro
"""

from __future__ import annotations

import gc
import os
import random
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from flows.transforms.timestamps import iso
from tools.bench.data import make_doc

ROUNDS = 7
BULK_ITEMS = 5000


def best_us(fn: Callable[[], object], n: int) -> float:
    """The fastest of ROUNDS calls of `fn`, in CPU µs per one of its `n` items."""
    best = float("inf")
    for _ in range(ROUNDS):
        gc.collect()
        gc.disable()
        try:
            t0 = time.process_time()
            fn()
            best = min(best, time.process_time() - t0)
        finally:
            gc.enable()
    return best / n * 1e6


def messages(variant: str, n: int = 20000) -> list[Any]:
    """`n` of the bench's records as consumed Messages, in runs of one partition."""
    from flows.process import sink_partition

    def placed(i: int) -> int:  # where a Java producer (the bench's partitioner) puts the key
        return sink_partition(f"k{i:09d}", 8, "murmur2")

    rng = random.Random(1)
    records = ((b"k%09d" % i, orjson.dumps(make_doc(variant, rng, i)), None) for i in range(n))
    return _consumed(records, placed)


def _consumed(
    records: Iterable[tuple[bytes, bytes, Any]], placed: Callable[[int], int]
) -> list[Any]:
    """`(key, value, headers)` as Messages of topic `t` consumed at offsets 0, 1, ..., the
    i-th from partition `placed(i)`, sorted into runs of one partition (as a batch holds)."""
    from confluent_kafka import Message

    msgs = [
        Message(topic="t", partition=placed(i), offset=i, key=key, headers=headers, value=value,
                timestamp=(1, 1_700_000_000_000 + i))
        for i, (key, value, headers) in enumerate(records)
    ]  # fmt: skip
    msgs.sort(key=lambda m: m.partition())
    return msgs


def processor_us(msgs: list[Any]) -> float:
    from flows.config import Settings
    from flows.process import Processor

    batches = _batches(msgs)
    proc = Processor(Settings.load(), [], 8)

    def run() -> None:
        for batch in batches:
            proc(batch)

    return best_us(run, len(msgs))


def floor_us(msgs: list[Any], objects: bool) -> float:
    """The floor's per-record work, alone or with the flow's per-record objects."""
    from murmurhash2 import murmurhash2

    from flows.decode.json import RawObjects
    from flows.process import MURMUR2_SEED
    from sinks.model import Action
    from tools.bench.loop import FLOOR_HEAD, FLOOR_TAIL

    accepts, dumps, seed = RawObjects().accepts(), orjson.dumps, MURMUR2_SEED
    head, tail = FLOOR_HEAD, FLOOR_TAIL

    def bare() -> None:
        lines = []
        for m in msgs:
            value = m.value()
            if not accepts(value):
                raise ValueError
            lines.append(head + dumps(m.key().decode()) + tail + value + b"\n")

    def with_objects() -> None:
        chunks: dict[int, list[Action]] = {}
        for m in msgs:
            value = m.value()
            if not accepts(value):
                raise ValueError
            key = m.key().decode()
            action = Action(key, b"".join((head, dumps(key), tail, value, b"\n")), m)
            part = (murmurhash2(key.encode(), seed) & 0x7FFFFFFF) % 8  # the flow's default
            chunks.setdefault(part, []).append(action)

    return best_us(with_objects if objects else bare, len(msgs))


def exchange_us(msgs: list[Any], with_records: bool) -> float:
    """dumps + loads of the processor's chunks (what crosses Bytewax's exchange between
    processes), the actions keeping their messages or holding `Record`s."""
    import pickle

    from flows.config import Settings
    from flows.process import Processor
    from sinks.model import Action, Actions, record_of

    chunks = [
        c
        for b in range(0, len(msgs), 500)
        for _, c in Processor(Settings.load(), [], 8)(msgs[b : b + 500])
    ]
    if with_records:
        chunks = [Actions(Action(a.id, a.data, record_of(a.origin)) for a in c) for c in chunks]

    def run() -> None:
        for c in chunks:
            pickle.loads(pickle.dumps(c))  # noqa: S301  # our own bytes

    return best_us(run, len(msgs))


def transform_messages(n: int = 20000) -> list[Any]:
    """`small-transforms`' records (with their traceparent headers) as consumed Messages."""
    from tools.bench.variant_data import header_names, transform_records
    from tools.bench.variants import example_transforms

    records = transform_records(n, header_names(example_transforms()))
    return _consumed(((k, v, h) for k, v, h, _ in records), lambda i: i % 8)


def transforms_us(msgs: list[Any]) -> tuple[float, float, float, float, float]:
    """µs/record: the processor without and with the example's transforms, the floor's
    work for the records as they are (`floor_us`), with each value decoded and encoded
    again, and with the nine edits inline too (checked to give the processor's documents)."""
    from flows.config import Settings
    from flows.process import Processor
    from flows.transforms import build_transforms
    from tools.bench.variants import example_transforms

    batches = _batches(msgs)
    plain = Processor(Settings.load(), [], 8)
    chained = Processor(Settings.load(), build_transforms(example_transforms()), 8)
    check_inline_transforms(msgs, chained)

    def run(proc: Callable[[list[Any]], object]) -> Callable[[], None]:
        def go() -> None:  # a batch at a time: what a batch holds is freed after it
            for batch in batches:
                proc(batch)

        return go

    return (
        best_us(run(plain), len(msgs)),
        best_us(run(chained), len(msgs)),
        floor_us(msgs, False),
        best_us(run(_decode_encode), len(msgs)),
        best_us(run(_inline_transforms), len(msgs)),
    )


def _batches(msgs: list[Any]) -> list[list[Any]]:
    return [msgs[i : i + 500] for i in range(0, len(msgs), 500)]


def check_inline_transforms(msgs: list[Any], chained: Callable[[list[Any]], Any]) -> None:
    """Raise unless the inline transforms give the documents `chained` (a Processor with
    the example's transforms) gives for `msgs`: the same ids and `_source`s, as many, none
    routed elsewhere, and some records filtered out (so the check is not vacuous)."""
    batches = _batches(msgs)
    actions = [a for b in batches for _, c in chained(b) for a in c]
    flow_lines = [a.data.split(b"\n") for a in actions]
    flow = sorted((a.id, source) for a, (_, source, _) in zip(actions, flow_lines, strict=True))
    lines = [a.split(b"\n") for b in batches for a in _inline_transforms(b)]
    inline = sorted((orjson.loads(head)["index"]["_id"], source) for head, source, _ in lines)
    indices = {orjson.loads(head)["index"].get("_index") for head, _, _ in flow_lines}
    routed = indices != {m.topic() for m in msgs}  # each to its topic's index, as configured
    if not 0 < len(flow) < len(msgs) or flow != inline or routed:
        raise RuntimeError("the inline transforms do not give the flow's documents")


def _inline_transforms(batch: list[Any]) -> list[bytes]:
    """examples/es-sink.yaml's transforms, as a user would write them for these records in
    one plain function (no chain, no per-transform call, no `Doc`, none of the built-ins'
    handling of other shapes of input; the filter's regex as `endswith`, the route's once per
    run of a topic), then the floor's action line (`tools.bench.loop`): a plain reference for what
    the edits cost, not a proven least."""
    from tools.bench.loop import FLOOR_HEAD, FLOOR_TAIL

    loads, dumps, join = orjson.loads, orjson.dumps, b"".join
    out = []
    topic = None
    for m in batch:
        if (t := m.topic()) is not topic:  # route: only orders-eu topics
            topic = t
            if _EU_TOPIC(t):
                raise AssertionError
        doc = loads(m.value())
        customer = doc.get("customer")
        if type(customer) is dict:
            email = customer.get("email")  # filter: drop the test traffic
            if type(email) is str and email.endswith("@example.test"):
                continue
            if "phone" in customer:  # mask
                customer["phone"] = "****"
        doc.pop("internal", None)  # drop
        doc.pop("debug", None)
        if "cust" in doc:  # rename
            doc["customer"] = doc.pop("cust")
        if (created := doc.get("created")) is not None:  # timestamp_convert
            doc["created"] = iso(created)
        source = doc.get("source")  # insert_field offset, header
        if type(source) is not dict:
            source = doc["source"] = {}
        source["kafka_offset"] = m.offset()
        for name, value in m.headers() or ():
            if name == "traceparent":
                source["trace_id"] = value.decode()
        if "amount" in doc:  # the user's enrich
            doc["amount_cents"] = round(doc["amount"] * 100)
        out.append(join((FLOOR_HEAD, dumps(m.key().decode()), FLOOR_TAIL, dumps(doc), b"\n")))
    return out


def _decode_encode(batch: list[Any]) -> list[bytes]:
    """`_inline_transforms` without the edits: each value decoded and encoded again."""
    from tools.bench.loop import FLOOR_HEAD, FLOOR_TAIL

    loads, dumps, join = orjson.loads, orjson.dumps, b"".join
    return [
        join((FLOOR_HEAD, dumps(m.key().decode()), FLOOR_TAIL, dumps(loads(m.value())), b"\n"))
        for m in batch
    ]


_EU_TOPIC = re.compile("orders-(eu)").fullmatch


def bulk_answer_us(refused: int) -> float:
    from sinks.backoff import SYSTEM_CLOCK, Backoff
    from sinks.elasticsearch import bulk
    from sinks.model import Action, Record

    bad = set(random.Random(2).sample(range(BULK_ITEMS), refused))
    actions = [
        Action(f"k{i}", b'{"index":{"_id":"k%d"}}\n{}\n' % i, Record("t", 0, i, None, None, b"{}"))
        for i in range(BULK_ITEMS)
    ]
    error = {"type": "mapper_parsing_exception", "reason": "failed to parse field [a]"}
    answer = {
        "errors": True,
        "items": [
            {"index": {"status": 400, "error": error} if i in bad else {"status": 201}}
            for i in range(BULK_ITEMS)
        ],
    }
    backoff = Backoff(0.1, 1.0, 10.0)

    def run() -> None:
        call = bulk.Call(backoff.start(SYSTEM_CLOCK, random.random))
        verdict = bulk.classify(actions, answer, call, rules=bulk.Rules(), item_retry_max=3)
        call.record(actions, verdict)
        assert len(call.failed_records(actions)) == refused

    return best_us(run, BULK_ITEMS)


def bulk_written_us() -> float:
    """The client reading an all-written `_bulk` answer (as its serializer gets the bytes)
    and `classify` making it DONE, per item."""
    from sinks.backoff import SYSTEM_CLOCK, Backoff
    from sinks.elasticsearch import bulk
    from sinks.elasticsearch.client import _JsonSerializer
    from sinks.model import Action, Record

    actions = [
        Action(f"k{i}", b'{"index":{"_id":"k%d"}}\n{}\n' % i, Record("t", 0, i, None, None, b"{}"))
        for i in range(BULK_ITEMS)
    ]
    body = b'{"errors":false,"items":[' + b",".join([b'{"index":{"status":201}}'] * BULK_ITEMS)
    body += b"]}"
    serializer = _JsonSerializer()
    rules = bulk.Rules()
    call = bulk.Call(Backoff(0.1, 1.0, 10.0).start(SYSTEM_CLOCK, random.random))

    def run() -> None:
        for _ in range(20):
            answer = serializer.loads(body)
            assert bulk.classify(actions, answer, call, rules=rules, item_retry_max=3) is bulk.DONE

    return best_us(run, 20 * BULK_ITEMS)


def main() -> None:
    os.environ.setdefault("KAFKA_TOPICS", "t")  # the processor's settings need a topic
    for variant in ("small", "large"):
        msgs = messages(variant)
        print(
            f"{variant} records, µs/record: processor {processor_us(msgs):.2f}, the floor's "
            f"work {floor_us(msgs, False):.2f}, with the flow's objects {floor_us(msgs, True):.2f}"
        )
        print(
            f"{variant} records across processes, µs/record: actions with their message "
            f"{exchange_us(msgs, False):.2f}, with a Record {exchange_us(msgs, True):.2f}"
        )
    plain, chained, floor, recoded, inline = transforms_us(transform_messages())
    print(
        f"small-transforms records, µs/record: processor without transforms {plain:.2f}, "
        f"with the example's nine {chained:.2f} (+{chained - plain:.2f}); the floor's work "
        f"{floor:.2f}, with each value decoded and encoded again {recoded:.2f} "
        f"(+{recoded - floor:.2f}), and the nine edits inline {inline:.2f} (+{inline - floor:.2f})"
    )
    for refused in (BULK_ITEMS // 200, BULK_ITEMS // 20):
        share = refused / BULK_ITEMS
        us = bulk_answer_us(refused)
        print(f"bulk answer with {share:.1%} refused: {us:.3f} µs/item")
    print(f"bulk answer with none refused: {bulk_written_us():.4f} µs/item")


if __name__ == "__main__":
    main()
