"""The process-wide "the flow is failing" flag.

Set when any sink partition's error surfaces in a worker (or a dead-letter delivery fails
for good): Bytewax then unwinds every worker and calls `close()` on every sink partition,
and whatever still retries in the background (bulks, dead letters) or waits on them should
stop instead of delaying the exit. Nothing is lost: offsets are committed only behind
durable writes, so the next run reads again whatever was not written.
"""

from __future__ import annotations

import threading

_failing = threading.Event()


def mark() -> None:
    """The flow is stopping on an error."""
    _failing.set()


def failing() -> bool:
    """True once an error stopped the flow in this process."""
    return _failing.is_set()


def clear() -> None:
    """Forget the flag (tests run many flows in one process)."""
    _failing.clear()
