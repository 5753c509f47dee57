"""ERRORS_TOLERANCE=none: the earliest record each Kafka partition had refused, process-wide.

Records of one Kafka partition spread over the sink partitions by document id, so the
bulks of several sink partitions may refuse records of one Kafka partition at once; the
flow must stop on the earliest (nothing past it is committed), whichever bulk found it.
And an earlier record of that partition may still sit unsent in another sink partition's
buffer, which Bytewax never asks to snapshot once one partition raised: the stop sends
those buffers first (`stop_on`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, wait
from typing import Protocol

from sinks import progress
from sinks.dead_letter.policy import ErrorPolicy
from sinks.errors import RecordFailedError
from sinks.model import DeadLetter

logger = logging.getLogger(__name__)


REFUSAL_WAIT_S = 5.0
"""How long a stop on a refused record waits for busy sink partitions to send their buffers,
and then as long again for the process's bulks in flight."""


BEAT_S = 1.0
"""The waits are taken in steps this long, each one a sign of life (`sinks.progress`)."""


class Peer(Protocol):
    """Another sink partition of the process (`EsSinkPartition.send_before_stop`)."""

    def send_before_stop(self, deadline: float) -> bool: ...


class Bulks(Protocol):
    def in_flight(self) -> list[Future[None]]: ...


def left(deadline: float) -> float:
    """Seconds until `deadline` (time.monotonic()), never negative."""
    return max(0.0, deadline - time.monotonic())


def stop_on(key: tuple[str, int], peers: Sequence[Peer], bulks: Bulks) -> RecordFailedError:
    """The error to stop on, for a refused record of Kafka partition `key`: first every free
    peer sends its buffer, then the busy ones once free (within REFUSAL_WAIT_S), then the
    process's bulks in flight are waited for (REFUSAL_WAIT_S again): one of them may refuse
    an earlier record of `key`, and the flow must stop on the earliest. A peer still busy
    is asked again after each step of that wait, and what it then sends is waited for
    too: its buffer may hold an earlier record behind the bulk that kept it busy (a tail
    kept at BULK_MAX_ACTIONS)."""
    now = time.monotonic()
    busy = [p for p in peers if not p.send_before_stop(now)]
    deadline = now + REFUSAL_WAIT_S
    while busy and left(deadline):  # in steps, beating: the worker waits on purpose
        progress.beat()
        step = min(deadline, time.monotonic() + BEAT_S)
        busy = [p for p in busy if not p.send_before_stop(step)]
    others = bulks.in_flight()
    deadline = time.monotonic() + REFUSAL_WAIT_S
    while (others or busy) and left(deadline):
        progress.beat()
        step = min(deadline, time.monotonic() + BEAT_S)
        if others:
            others = list(wait(others, timeout=left(step)).not_done)
            step = time.monotonic()  # waited already: the peers are only asked
        if busy:
            busy = [p for p in busy if not p.send_before_stop(step)]
            others = bulks.in_flight()  # with what they sent
    error = earliest(key)
    logger.error("%s", error)
    return error


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


def refused() -> dict[tuple[str, int], tuple[int, RecordFailedError]]:
    """Kafka partition → (offset, error) of its earliest refused record."""
    with _lock:
        return dict(_REFUSED)


def clear_refusals() -> None:
    """Forget refused records (tests run many flows in one process)."""
    with _lock:
        _REFUSED.clear()
