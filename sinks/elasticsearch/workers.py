"""The process-wide machinery the sink partitions share: the pool of threads that send
bulks, the count of bytes held against ES_SINK_BUFFER_BYTES, and the linger ticker.

Each is created once per process (`locked_cache`), on the first partition's first need,
never when the flow is described.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol

from sinks import failing, progress
from sinks.model import Action
from sinks.resources import locked_cache, members

logger = logging.getLogger(__name__)

POLL_S = 0.5
"""How often a wait on bulks in flight looks at `failing`."""


class _BulkPool:
    """Daemon threads that send bulks: a thread still retrying an unreachable Elasticsearch
    must not keep a stopping process alive (what it was sending is not committed)."""

    def __init__(self, size: int) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[None], Callable[[], None]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._in_flight: set[Future[None]] = set()
        for i in range(size):
            threading.Thread(target=self._work, name=f"es-bulk-{i}", daemon=True).start()

    def submit(self, fn: Callable[[list[Action]], None], buf: list[Action]) -> Future[None]:
        future: Future[None] = Future()
        with self._lock:
            self._in_flight.add(future)
        self._jobs.put((future, functools.partial(fn, buf)))
        return future

    def in_flight(self) -> list[Future[None]]:
        """Bulks submitted and not finished yet (any partition of this process)."""
        with self._lock:
            return list(self._in_flight)

    def _work(self) -> None:
        while True:
            future, job = self._jobs.get()
            try:
                job()
            except BaseException as e:
                future.set_exception(e)
            else:
                future.set_result(None)
            finally:
                with self._lock:
                    self._in_flight.discard(future)


@locked_cache
def bulk_pool(size: int) -> _BulkPool:
    """One pool per process, started on the first bulk (never when the flow is described)."""
    return _BulkPool(size)


class _HeldBytes:
    """Encoded bytes the sink partitions of this process hold, buffered or in flight.

    Per-partition limits alone let memory grow with the partition count (every partition
    may fill BULK_MAX_BYTES while another BULK_MAX_BYTES is in flight). Over
    ES_SINK_BUFFER_BYTES a partition sends its buffer at its next write if the buffer is at
    least its share of the budget (the budget divided among the process's partitions, at
    most BULK_MAX_BYTES), and otherwise waits until bulks in flight are written: held bytes
    stay within about the budget plus one write per worker, and bulks sent early are never
    smaller than that share. Nothing waits on bytes that only a write could release.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._held = 0
        self._sending = 0
        self._parts = 0
        # Reentrant: a partition's finalizer (`leave`) may run from a garbage collection
        # that starts inside another method of this object on the same thread.
        self._cond = threading.Condition(threading.RLock())

    def enter(self) -> None:
        """One more partition shares the budget."""
        with self._cond:
            self._parts += 1

    def leave(self) -> None:
        with self._cond:
            self._parts -= 1

    def add(self, n: int) -> bool:
        """Count `n` more bytes; True when the process is now over its limit."""
        with self._cond:
            self._held += n
            return self._held >= self._limit

    def sending(self, n: int) -> None:
        """`n` buffered bytes were handed to a bulk: they drain without any worker's help."""
        with self._cond:
            self._sending += n

    def release(self, n: int) -> None:
        """`n` bytes in flight were written (or given up on)."""
        with self._cond:
            self._held -= n
            self._sending -= n
            self._cond.notify_all()

    def share(self, max_bytes: int) -> int:
        """The smallest buffer a partition sends early when the process is over budget."""
        return min(max_bytes, self._limit // max(1, self._parts))

    def wait_below_limit(self) -> None:
        """Wait while the process is over budget and bulks in flight can bring it down."""
        with self._cond:
            while self._held >= self._limit and self._sending > 0 and not failing.failing():
                self._cond.wait(POLL_S)
                progress.beat()


@locked_cache
def held_bytes(limit: int) -> _HeldBytes:
    """One count per process (and limit): every partition of every worker shares it."""
    return _HeldBytes(limit)


class Lingering(Protocol):
    def linger(self) -> None: ...


class _LingerTicker:
    """Bytewax calls a sink only when items arrive, so a partition no record reaches any
    more (the tail of a burst, a quiet topic) would hold its buffer until the epoch's
    snapshot (10 s by default); this thread applies BULK_LINGER_MS to it."""

    def __init__(self, period_s: float) -> None:
        self._parts: weakref.WeakSet[Lingering] = weakref.WeakSet()
        self._period_s = period_s
        threading.Thread(target=self._run, name="es-linger", daemon=True).start()

    def add(self, part: Lingering) -> None:
        self._parts.add(part)

    def _run(self) -> None:
        while True:
            time.sleep(self._period_s)
            for part in members(self._parts):
                try:
                    part.linger()
                except Exception:  # never expected; the worker's own calls still flush
                    logger.exception("linger check of a sink partition failed")


@locked_cache
def linger_ticker(period_s: float) -> _LingerTicker:
    """One ticker per process, started when the first partition is built."""
    return _LingerTicker(period_s)
