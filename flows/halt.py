"""ERRORS_TOLERANCE=none: hold a failed record's error until the records before it are written.

A record that fails to decode or transform is known at once, but a record before it in the
same partition may still sit in a sink buffer, where Elasticsearch can refuse it: that
earlier record is the one the flow must stop on. So the processor does not raise; it holds
the failure here and drops what follows from that Kafka partition, and the partition's
source:

1. reads nothing more and snapshots the failed record's offset (a recovery resume or a
   group commit never passes it);
2. raises the error on its first `next_batch()` after that snapshot. Bytewax calls it only
   once the whole dataflow has finished the snapshot's epoch, so every sink has flushed the
   records before the failed one, and stopped the flow first if one of them was refused.

Workers of one process share this registry; a source partition and the processor that
handles its records always run on the same worker.

The processor also records here how far it has examined each partition (`EXAMINED`).
Bytewax may snapshot a source partition in the same activation that emitted a batch,
before the processor has seen it; a snapshot past a record not yet examined would let a
crash in the next epoch resume past a failure the processor was about to hold. So a
source never snapshots past what the processor has examined.
"""

from __future__ import annotations

import logging
import threading

from flows.errors import RecordFailedError

logger = logging.getLogger(__name__)

_lock = threading.Lock()
HELD: dict[tuple[str, int], tuple[int, RecordFailedError]] = {}
"""`(topic, partition)` → (offset, error) of its first failed record. Read-only outside."""


EXAMINED: dict[tuple[str, int], int] = {}
"""`(topic, partition)` → the offset after the last record the processor has examined.
The source sets it to its start offset; the processor advances it once per batch."""


def start(topic: str, partition: int, offset: int) -> None:
    """A source partition starts at `offset`: nothing after it has been examined yet."""
    EXAMINED[(topic, partition)] = offset


def hold(topic: str, partition: int, offset: int, error: RecordFailedError) -> None:
    """Keep the first failure of a partition; the partition's source raises it later."""
    with _lock:
        if (topic, partition) in HELD:
            return
        HELD[(topic, partition)] = (offset, error)
    logger.error("%s; stopping once the records before it are written", error)


def held(topic: str, partition: int) -> tuple[int, RecordFailedError] | None:
    """The held failure of a partition, if any."""
    return HELD.get((topic, partition))


def clear() -> None:
    """Forget every held failure and examined offset (tests run many flows in one process)."""
    with _lock:
        HELD.clear()
        EXAMINED.clear()
