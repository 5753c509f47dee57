"""Producing the workload: an idempotent producer, and a transactional one for part of it.

With `txn_share` > 0 the records go out in segments, in order: a segment is either plain
(idempotent producer) or one committed transaction, and between segments, at random, an
aborted transaction of extra records (`tools.chaos.workload.aborted_records`) is written; the
workload always ends with an aborted transaction, so the log ends with an abort marker (a
partition whose last offset is a control record must still finish under
KAFKA_STOP_AT_END). Every record's offset comes from its delivery report (aborted
ones too: the producer flushes before aborting), so the audit knows which coordinates no
consumer may ever see. Control records take offsets too: the end offsets the flow must
commit are the broker's, read after producing, not the last record's offset + 1.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tools.chaos.workload import ABORTED_SEQ, SEQ_HEADER, Rec, aborted_records

ABORT_CHANCE = 0.3
"""Chance of an aborted transaction after each segment (when transactions are on)."""

PRODUCER_CONF: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500_000,
    "message.max.bytes": 16_777_216,
}


@dataclass
class Produced:
    """What a `produce()` call wrote besides the records it was given."""

    aborted: list[Rec] = field(default_factory=list)
    committed_txns: int = 0
    aborted_txns: int = 0
    txn_records: int = 0
    """Records of `recs` written inside committed transactions."""


class Sender:
    """Sends records with their key, header and explicit partition; fills in offsets."""

    def __init__(self, producer: Any, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.errors: list[str] = []

    def _report(self, rec: Rec) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(f"{rec.kind} to partition {rec.partition}: {err}")
            elif msg.partition() != rec.partition:
                self.errors.append(f"sent to {rec.partition}, written to {msg.partition()}")
            else:
                rec.offset = msg.offset()

        return on_delivery

    def send(self, recs: list[Rec], seqs: list[int]) -> None:
        for n, (rec, seq) in enumerate(zip(recs, seqs, strict=True)):
            while True:
                try:
                    self.producer.produce(
                        self.topic,
                        key=rec.key,
                        value=rec.value,
                        partition=rec.partition,
                        headers=[(SEQ_HEADER, str(seq).encode())],
                        on_delivery=self._report(rec),
                    )
                    break
                except BufferError:
                    self.producer.poll(0.1)
            if n % 1000 == 0:
                self.producer.poll(0)

    def flush(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.producer.flush(5) and time.monotonic() < deadline:
            pass


def produce(
    bootstrap: str,
    topic: str,
    recs: list[Rec],
    *,
    txn_share: float = 0.0,
    rng: random.Random | None = None,
    first_seq: int = 0,
    partitions: int = 8,
    first_aborted: int = 0,
) -> Produced:
    """Produce `recs` (seq header = `first_seq` + position) in order; see the module
    docstring (aborted records are numbered from `first_aborted`). Raises KafkaException
    unless every record was confirmed."""
    from confluent_kafka import KafkaException, Producer

    rng = rng or random.Random(0)
    out = Produced()
    plain = Sender(Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF}), topic)
    txn: Sender | None = None
    if txn_share > 0:
        conf = {"bootstrap.servers": bootstrap, **PRODUCER_CONF, "transactional.id": f"{topic}-txn"}
        txn = Sender(Producer(conf), topic)
        txn.producer.init_transactions(60)
    lo, hi = max(1, len(recs) // 400), max(2, len(recs) // 40)
    pos = 0
    while pos < len(recs):
        end = min(pos + rng.randint(lo, hi), len(recs))
        segment, seqs = recs[pos:end], list(range(first_seq + pos, first_seq + end))
        if txn is not None and rng.random() < txn_share:
            plain.flush()
            txn.producer.begin_transaction()
            txn.send(segment, seqs)
            txn.producer.commit_transaction(60)
            out.committed_txns += 1
            out.txn_records += len(segment)
        else:
            plain.send(segment, seqs)
        pos = end
        last = pos >= len(recs)
        if txn is not None and (last or rng.random() < ABORT_CHANCE):
            plain.flush()
            first = first_aborted + len(out.aborted)
            junk = aborted_records(
                rng, segment, rng.randint(3, max(3, hi // 10)), first, partitions
            )
            txn.producer.begin_transaction()
            txn.send(junk, list(range(ABORTED_SEQ + first, ABORTED_SEQ + first + len(junk))))
            txn.flush()  # delivered (offsets known), then aborted
            txn.producer.abort_transaction(60)
            out.aborted.extend(junk)
            out.aborted_txns += 1
    plain.flush()
    errors = plain.errors + (txn.errors if txn is not None else [])
    missing = sum(r.offset < 0 for r in recs) + sum(r.offset < 0 for r in out.aborted)
    if errors or missing:
        msg = f"producing to {topic} failed: {missing} unconfirmed; {errors[:3]}"
        raise KafkaException(msg)
    return out
