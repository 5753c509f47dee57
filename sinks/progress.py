"""Whether the process's worker threads still make progress (the status API's liveness).

A Bytewax worker thread that reads Kafka enrols itself (`enrol`, once per batch, from the
source); after that, any loop that keeps it busy on purpose (waiting for a bulk in flight,
a retry's backoff) calls `beat()`. A worker whose last sign of life is older than the
liveness limit is wedged: it neither returned to Bytewax nor waited in a loop that knows
why. Only enrolled threads count, so the sink's pool threads, which idle between bulks,
never look wedged.

Snapshots mark epochs (`epoch_closed`): a cluster whose epochs stopped closing while no
retry is under way is stalled (flows.watchdog).
"""

from __future__ import annotations

import threading
import time

_BEATS: dict[int, float] = {}
_EPOCH: list[float] = []  # [monotonic time of the latest snapshot], empty before the first


def enrol() -> None:
    """This thread is a worker making progress now (one dict store: called per batch)."""
    _BEATS[threading.get_ident()] = time.monotonic()


def beat() -> None:
    """A worker waiting on purpose is alive; other threads are ignored."""
    ident = threading.get_ident()
    if ident in _BEATS:
        _BEATS[ident] = time.monotonic()


def stalest_s() -> float | None:
    """Seconds since the least recent sign of life of any enrolled worker (None: none)."""
    if not _BEATS:
        return None
    return time.monotonic() - min(_BEATS.values())


def workers() -> int:
    """How many worker threads enrolled (those that read at least one Kafka partition)."""
    return len(_BEATS)


def epoch_closed() -> None:
    """A partition of this process snapshotted: an epoch closed (the cluster watchdog)."""
    if _EPOCH:
        _EPOCH[0] = time.monotonic()
    else:
        _EPOCH.append(time.monotonic())


def since_epoch_s() -> float | None:
    """Seconds since this process last saw an epoch close (None: not yet)."""
    return time.monotonic() - _EPOCH[0] if _EPOCH else None
