"""The dead-letter topic: original key, value and headers, plus Kafka Connect error headers.

`DeadLetterSink` is the Bytewax sink of the decode/transform failures; the Elasticsearch
sink sends the records Elasticsearch refused through the same `DeadLetterProducer`
(`producer`), under the same error policy (`policy`). Headers are in `headers`.
"""

from __future__ import annotations

from pathlib import Path

from bytewax.outputs import StatefulSinkPartition

from sinks import progress
from sinks.dead_letter.config import DeadLetterConfig, ErrorTolerance
from sinks.dead_letter.headers import (
    MAX_MESSAGE_CHARS,
    MAX_STACKTRACE_CHARS,
    VALUE_OMITTED_HEADER,
    error_headers,
)
from sinks.dead_letter.policy import ErrorPolicy
from sinks.dead_letter.producer import DeadLetterProducer, Failed, shared_producer
from sinks.model import DeadLetter
from sinks.partitioned import NumberedSink

__all__ = [
    "MAX_MESSAGE_CHARS",
    "MAX_STACKTRACE_CHARS",
    "VALUE_OMITTED_HEADER",
    "DeadLetterConfig",
    "DeadLetterProducer",
    "DeadLetterSink",
    "ErrorPolicy",
    "ErrorTolerance",
    "error_headers",
    "shared_producer",
]


class DeadLetterSink(NumberedSink):
    """Writes dead letters from decode/transform to DLQ_TOPIC, confirmed in `snapshot()`.

    Partitioned (not dynamic) so that its writes are part of the epoch Bytewax waits on
    before the source commits offsets. It keeps no state: the topic is the state. Its
    partitions are `dlq-0000` ...: the same count as the Elasticsearch sink, then any further
    `dlq-` partition a recovery store holds (see `sinks.partitioned`).
    """

    def __init__(
        self, config: DeadLetterConfig, partitions: int, recovery_dir: Path | None = None
    ) -> None:
        super().__init__("dlq", partitions, recovery_dir)
        self._config = config  # no I/O here: this object is part of the flow description

    def build_part(
        self, step_id: str, for_part: str, resume_state: None
    ) -> StatefulSinkPartition[DeadLetter, None]:
        """The process's dead-letter producer, built at run time."""
        return _DeadLetterPartition(shared_producer(self._config))


UNCONFIRMED_LETTERS = 10_000
UNCONFIRMED_BYTES = 16 * 1024 * 1024


class _DeadLetterPartition(StatefulSinkPartition[DeadLetter, None]):
    """Produces as batches come; the epoch's end waits for Kafka's confirmations, as the
    Elasticsearch sink's does for its bulks, so the worker does not wait on the broker for
    every batch that holds a dead letter (docs/benchmarks.md, "Figures behind the code")."""

    def __init__(self, producer: DeadLetterProducer) -> None:
        self._producer = producer
        self._failed: list[Failed] = []  # filled by delivery reports, on any thread
        self._letters = 0  # produced since the last confirm(), and their bytes
        self._bytes = 0

    @progress.tracked
    def write_batch(self, items: list[DeadLetter]) -> None:
        """Produce; confirm at once when this partition has UNCONFIRMED_LETTERS or _BYTES
        unconfirmed (memory: librdkafka and the delivery reports hold them until then)."""
        self._bytes += self._producer.produce(items, self._failed)
        self._letters += len(items)
        if self._letters >= UNCONFIRMED_LETTERS or self._bytes >= UNCONFIRMED_BYTES:
            self.snapshot()

    @progress.tracked
    def snapshot(self) -> None:
        """Every dead letter written so far is confirmed before the epoch closes (none
        since the last confirmation: nothing to wait for, and no failure to take)."""
        if self._letters:
            self._producer.confirm(self._failed)
            self._letters = self._bytes = 0

    def close(self) -> None:
        """Send nothing and wait for nothing: what is unconfirmed was never committed (see
        DeadLetterProducer.close)."""
