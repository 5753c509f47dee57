"""ERRORS_TOLERANCE=none: the earliest record each Kafka partition had refused, process-wide.

Records of one Kafka partition spread over the sink partitions by document id, so the
bulks of several sink partitions may refuse records of one Kafka partition at once; the
flow must stop on the earliest (nothing past it is committed), whichever bulk found it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from sinks.dead_letter.policy import ErrorPolicy
from sinks.errors import RecordFailedError
from sinks.model import DeadLetter


class Refused(Exception):
    """A bulk refused a record of Kafka partition `key`; the worker turns it into the
    RecordFailedError of that partition's earliest refused record (`earliest`)."""

    def __init__(self, key: tuple[str, int]) -> None:
        super().__init__(key)
        self.key = key


_lock = threading.Lock()
_REFUSED: dict[tuple[str, int], tuple[int, RecordFailedError]] = {}
"""(topic, partition) → (offset, error) of the earliest record a bulk of this process refused."""


def register(letters: Iterable[DeadLetter], policy: ErrorPolicy) -> Refused:
    """Record refused records process-wide, keeping the earliest offset per Kafka
    partition; the first in request order names the partition to raise."""
    first: tuple[str, int] | None = None
    with _lock:
        for dl in letters:
            rec = dl.record
            key = (rec.topic, rec.partition)
            known = _REFUSED.get(key)
            if known is None or rec.offset < known[0]:
                _REFUSED[key] = (rec.offset, policy.stop_error(dl))
            first = first or key
    assert first is not None
    return Refused(first)


def earliest(key: tuple[str, int]) -> RecordFailedError:
    """The error of the earliest refused record of Kafka partition `key`."""
    with _lock:
        return _REFUSED[key][1]


def clear_refusals() -> None:
    """Forget refused records (tests run many flows in one process)."""
    with _lock:
        _REFUSED.clear()
