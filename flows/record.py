"""The values that flow through the pipeline: a Kafka record, a document, a dead letter.

A `Record` is the untouched Kafka record (original bytes and coordinates). It travels with
every document made from it and with every dead letter, so offsets and original bytes
survive any transform, index rename or fan-out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Headers = tuple[tuple[str, bytes | None], ...]
Stage = Literal["deserialize", "transform", "index"]


@dataclass(slots=True)
class Record:
    """One Kafka record as consumed: never modified after the source builds it."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    """Record timestamp in epoch milliseconds, or None when the broker has none."""
    key: bytes | None
    value: bytes | None
    headers: Headers = ()

    @property
    def coordinates(self) -> str:
        """`topic-partition-offset`: unique per record, stable across replays."""
        return f"{self.topic}-{self.partition}-{self.offset}"

    def header(self, name: str) -> bytes | None:
        """The last value of header `name` (Kafka allows repeats), or None."""
        found = None
        for k, v in self.headers:
            if k == name:
                found = v
        return found


@dataclass(slots=True)
class Doc:
    """A document on its way to Elasticsearch, as transforms see and change it.

    `source` is the document body (None only for a delete). `key` is the decoded record key
    (transforms may replace it). `index`, `id` and `routing` left as None are filled in by
    the configured defaults (ES_INDEX, DOC_ID) after the last transform.
    """

    record: Record
    source: dict[str, Any] | None
    key: Any = None
    index: str | None = None
    id: str | None = None
    routing: str | None = None
    delete: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    """Free space for user transforms to pass values to later transforms."""


@dataclass(slots=True)
class DeadLetter:
    """A record that failed at `stage`; its original bytes go to the dead-letter topic."""

    record: Record
    stage: Stage
    error_class: str
    message: str
    stacktrace: str | None = None

    @classmethod
    def from_exception(
        cls, record: Record, stage: Stage, exc: BaseException, with_trace: bool = False
    ) -> DeadLetter:
        """Describe `exc` without its chained causes (they may quote secrets or huge input)."""
        trace = None
        if with_trace:
            import traceback

            trace = "".join(traceback.format_exception(exc, chain=False))
        cls_name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        return cls(record, stage, cls_name, str(exc), trace)
