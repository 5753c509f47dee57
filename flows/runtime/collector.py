"""Python's cyclic garbage collector, run on a clock instead of on allocation counts.

With its default thresholds the collector runs every 700 container allocations, and each run
walks the young objects still alive: here the actions and records waiting in the sink
buffers, a large share of the flow's CPU under a backlog (docs/benchmarks.md, "Figures
behind the code"). Almost everything in the pipeline is freed by reference counting; a full
collection every GC_INTERVAL_S seconds finds what cycles remain (user transforms,
exceptions), so memory stays bounded.

A full collection still walks everything the sink buffers hold, an action and its message
per record: a measurable share of the flow's CPU at 10 s, and in runs with dead letters and
transforms none of them found any garbage (docs/benchmarks.md, "Figures behind the code").
So after a collection that finds none the clock waits twice as long, up to GC_INTERVAL_MAX_S
(40 s by default: the longest a new garbage cycle waits); a collection that finds some
brings it back to GC_INTERVAL_S, so garbage made at a steady rate is collected at that
interval.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable

_started = threading.Lock()


def collect_on_a_clock(interval_s: float, max_interval_s: float = 0.0) -> None:
    """Freeze what is alive now (modules, settings), turn automatic collection off, and
    collect from a daemon thread every `interval_s` seconds, or up to every
    `max_interval_s` while collections find no garbage (left out, or up to `interval_s`:
    a fixed clock, as before GC_INTERVAL_MAX_S); `interval_s` 0 keeps Python's defaults."""
    if interval_s <= 0 or not _started.acquire(blocking=False):
        return
    gc.freeze()
    gc.disable()
    args = (interval_s, max_interval_s, gc.collect, time.sleep)
    threading.Thread(target=run_clock, args=args, name="gc-clock", daemon=True).start()


def run_clock(
    interval_s: float,
    max_interval_s: float,
    collect: Callable[[], int],
    sleep: Callable[[float], object],
) -> None:
    """Sleep, `collect` (which returns how many unreachable objects it found), and wait
    twice as long after a collection that found none, up to `max_interval_s` (never less
    than `interval_s`); back to `interval_s` after one that found some."""
    longest = max(interval_s, max_interval_s)
    wait = interval_s
    while True:
        sleep(wait)
        wait = interval_s if collect() else min(2 * wait, longest)
