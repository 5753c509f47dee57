"""The process-wide "the flow is failing" flag.

Set when any sink partition's error surfaces in a worker, a dead-letter delivery fails for
good, or the processor or a source partition raises (`on_error`): Bytewax then unwinds
every worker and calls `close()` on every sink partition, and whatever still retries in the
background (bulks, dead letters) or waits on them should stop instead of delaying the exit.
Nothing is lost: offsets are committed only behind durable writes, so the next run reads
again whatever was not written.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_failing = threading.Event()


def mark() -> None:
    """The flow is stopping on an error."""
    _failing.set()


def failing() -> bool:
    """True once an error stopped the flow in this process."""
    return _failing.is_set()


def on_error(method: Callable[P, R]) -> Callable[P, R]:
    """Mark the process failing when `method` (a Bytewax call outside the sinks: the
    processor, a source partition) raises, so that sink partitions of other workers, which
    may wait on a retrying bulk, stop waiting and Bytewax's unwinding can finish. A source's
    StopIteration is its normal end, not a failure."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except StopIteration:
            raise
        except BaseException:
            _failing.set()
            raise

    return call


def clear() -> None:
    """Forget the flag (tests run many flows in one process)."""
    _failing.clear()
