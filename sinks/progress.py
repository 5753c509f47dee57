"""Whether the process's worker threads still make progress (the status API's liveness).

A worker is judged only while it is inside one of our calls (`tracked`: the source's
`next_batch`, `snapshot` and `build_part`, the sinks' `write_batch` and `snapshot`): each
loop that keeps it there on purpose (waiting for a bulk in flight, a retry's backoff, the
dead letters' confirmation) calls `beat()`. A worker inside a call with no sign of life for
longer than the liveness limit is wedged. A worker Bytewax holds between calls (waiting for
another worker's epoch, a peer) is not judged here: that is the cluster watchdog's business
(flows.api.watchdog), and an outage that holds every worker must not look like a wedge. Pool
threads are never inside a tracked call, so they never count.

Snapshots mark epochs (`epoch_closed`): a cluster whose epochs stopped closing while no
retry is under way is stalled (flows.api.watchdog).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_INSIDE: dict[int, list[float]] = {}
"""Thread → [last sign of life, depth of tracked calls] while inside a tracked call."""
_EPOCH: list[float] = []  # [monotonic time of the latest snapshot], empty before the first


def tracked(method: Callable[P, R]) -> Callable[P, R]:
    """Judge the calling thread's liveness while `method` runs (two dict operations: per
    batch, never per record)."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        ident = threading.get_ident()
        entry = _INSIDE.get(ident)
        if entry is None:
            _INSIDE[ident] = entry = [time.monotonic(), 0]
        else:
            entry[0] = time.monotonic()
        entry[1] += 1
        try:
            return method(*args, **kwargs)
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del _INSIDE[ident]

    return call


def beat() -> None:
    """A worker waiting on purpose inside a tracked call is alive; other threads are
    ignored."""
    entry = _INSIDE.get(threading.get_ident())
    if entry is not None:
        entry[0] = time.monotonic()


def stalest_s() -> float | None:
    """Seconds since the least recent sign of life of a worker inside a tracked call
    (None: no worker is inside one)."""
    times = [entry[0] for entry in list(_INSIDE.values())]
    return time.monotonic() - min(times) if times else None


def epoch_closed() -> None:
    """A partition of this process snapshotted: an epoch closed (the cluster watchdog)."""
    if _EPOCH:
        _EPOCH[0] = time.monotonic()
    else:
        _EPOCH.append(time.monotonic())


def since_epoch_s() -> float | None:
    """Seconds since this process last saw an epoch close (None: not yet)."""
    return time.monotonic() - _EPOCH[0] if _EPOCH else None
