"""The records of each bench variant, and the documents the ceiling indexes for them.

Every generator is deterministic and starts from `tools.bench.data.dataset`'s small documents, so
the good documents of `small-dlq5`, `small-avro` and `small-p120` are `small`'s:

- `dlq5_items`: record i is bad when i % 20 == 10 (5%), a case of one of the fuzz suite's
  bad kinds (tests/support/fuzz_inputs.py, drawn by their weights; the two fixed ~2 MB kinds are
  left out: they would be a large-document benchmark); the ceiling gets the good ones only.
- `transform_records` / `transformed_items`: small documents with the fields the example
  configuration's transforms act on (examples/es-sink.yaml), and the headers it copies into
  documents (a traceparent on every record), then the transforms themselves
  (flows.transforms) run once in the harness on each record, at the partition and offset
  it was delivered to, to make the ceiling's documents.
- `avro_items`: the same documents as Avro (Confluent framing, one registered schema).
"""

from __future__ import annotations

import io
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson

from tools.bench.data import SEED, dataset, key_for, make_doc
from tools.bench.services import Item, Positions

__all__ = [
    "AVRO_SCHEMA",
    "BAD_EVERY",
    "avro_items",
    "dlq5_items",
    "header_names",
    "plain_items",
    "transform_records",
    "transformed_items",
]

BAD_EVERY = 20
"""One record in BAD_EVERY is bad in small-dlq5 (5%)."""

AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Event",
    "namespace": "bench",
    "fields": [
        {"name": "event_id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "type", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": "string"},
        {"name": "country", "type": "string"},
        {"name": "device", "type": "string"},
        {"name": "session", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "ok", "type": "boolean"},
    ],
}
"""The small document's fields, in make_doc's order (the decoded dict keeps it)."""


def plain_items(doc_size: str, n: int) -> Iterator[Item]:
    """`small` / `large`: every record a document, its value the ceiling's source."""
    for key, value in dataset(doc_size, n):
        yield key, value, None, value


def dlq5_items(n: int) -> Iterator[Item]:
    """Small records with every BAD_EVERY-th one replaced by a fuzz case of a bad kind."""
    from tests.support import fuzz_inputs as fuzz

    kinds = [k for k in fuzz.KINDS if k.stage is not None and k.weight]
    weights = [k.weight for k in kinds]
    pick = random.Random(SEED + 5)
    for i, (key, value, headers, source) in enumerate(plain_items("small", n)):
        if i % BAD_EVERY != BAD_EVERY // 2:
            yield key, value, headers, source
            continue
        kind = pick.choices(kinds, weights)[0]
        case = fuzz.make_case(kind.name, pick, i)
        yield case.key, case.value, list(case.headers) or None, None


def _order_fields(doc: dict[str, Any], i: int) -> dict[str, Any]:
    """What the example's transforms look at: customer.email (2% test traffic, filtered),
    customer.phone (masked), `cust` instead of `customer` in 10% (renamed), internal and
    debug in 25% (dropped), created (epoch ms, converted to ISO)."""
    domain = "example.test" if i % 50 == 7 else "shop.example"
    customer = {"email": f"{doc['user']}@{domain}", "phone": f"+49 30 {i % 10_000_000:07d}"}
    doc["cust" if i % 10 == 3 else "customer"] = customer
    if i % 4 == 1:
        doc["internal"] = {"trace": doc["session"]}
        doc["debug"] = True
    doc["created"] = doc["ts"]
    return doc


def header_names(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """The headers the transforms copy into documents (`insert_field from: header`): the
    records carry them, as a producer that configures such a transform would send them."""
    return [
        str(e["header"])
        for e in entries
        if e.get("type") == "insert_field" and e.get("from") == "header" and e.get("header")
    ]


def _headers(names: Sequence[str], i: int) -> list[tuple[str, str | bytes | None]] | None:
    """A W3C traceparent-like value for each header name (unique per record)."""
    if not names:
        return None
    value = b"00-%032x-%016x-01" % (SEED * 1_000_003 + i, i)
    return [(name, value) for name in names]


def transform_records(n: int, headers: Sequence[str] = ()) -> Iterator[Item]:
    """small-transforms: the records as produced (the ceiling's documents come later)."""
    rng = random.Random(SEED)
    dumps = orjson.dumps
    for i in range(n):
        doc = _order_fields(make_doc("small", rng, i), i)
        yield key_for(i).encode(), dumps(doc), _headers(headers, i), None


def transformed_items(
    n: int, topic: str, entries: Sequence[Mapping[str, Any]], positions: Positions
) -> Iterator[tuple[bytes, bytes]]:
    """(document id, `_source`) of each document the flow makes from transform_records'
    records with the transforms `entries`, each record at its delivered partition and
    offset. Raises if a transform routes, deletes or re-keys a document (the ceiling writes
    every document to one index, with the record key as its id)."""
    from flows.record import Doc, Record
    from flows.transforms import apply_transforms, build_transforms

    chain = build_transforms(entries)
    loads, dumps = orjson.loads, orjson.dumps
    part, off, ts = positions.partition, positions.offset, positions.timestamp
    for i, (key, value, headers, _s) in enumerate(transform_records(n, header_names(entries))):
        assert key is not None and value is not None
        rec = Record(topic, part[i], off[i], ts[i], key, value, tuple(headers or ()))  # type: ignore[arg-type]
        for doc in apply_transforms(chain, Doc(rec, loads(value), key.decode())):
            if doc.index or doc.id or doc.routing or doc.delete or doc.action:
                raise RuntimeError("small-transforms: a transform changed more than the body")
            yield key, dumps(doc.source)


def avro_items(n: int, schema_id: int) -> Iterator[Item]:
    """The small documents as Avro with Confluent framing (magic 0, the schema id); the
    ceiling indexes the JSON documents they decode to."""
    import fastavro

    schema = fastavro.parse_schema(AVRO_SCHEMA)
    prefix = b"\x00" + schema_id.to_bytes(4, "big")
    write = fastavro.schemaless_writer
    rng = random.Random(SEED)
    dumps = orjson.dumps
    for i in range(n):
        doc = make_doc("small", rng, i)
        buf = io.BytesIO()
        buf.write(prefix)
        write(buf, schema, doc)
        yield key_for(i).encode(), buf.getvalue(), None, dumps(doc)
