"""Sleep through Bytewax's epoch barrier instead of spinning on it.

Bytewax 0.21.1 (`src/inputs.rs`, `partitioned_input`) lets a worker's partitions start epoch
e+1 only once the whole dataflow has finished e, and while they wait it calls no
`next_batch()`. The input operator still re-activates after the earliest `next_awake()`
they gave with their last batches and, once that time has passed, at once, again and
again: a busy wait. A worker whose epoch timer ends before another's, or whose sinks flush
sooner, burns a core until the slowest has flushed (`docs/benchmarks.md`, "The epoch
barrier"). A run of one worker does not meet it (its worker is busy flushing its own sinks,
then the barrier opens), so there nothing here ever sleeps.

The partitions of a worker share one `EpochBarrier`: Bytewax ends their epochs in one
activation (calling each partition's `next_batch()` and then its `snapshot()`, one
partition after the other), and the earliest wake-up any of them asked for re-activates
the input operator. It predicts the end of the epoch from the first snapshot of the last end
(a little after Bytewax read its clock) and the epoch length of the run. Shortly before
that end each partition asks to be called only after it, so that its next call comes in
the activation that ends the epoch; there the first call asks to sleep as long as the
shortest of the last `KEPT` barriers, and the others until the same time. The barrier has
opened at a partition's first call after its own snapshot. Waits and sleeps count from the
predicted end, not from the snapshot: the barrier opens at one moment for the whole
cluster, and a worker held past its end (its sink waiting for Elasticsearch) is the one
the others wait for, so it sleeps that much less. Reading resumes later than the
barrier opens only when it opens sooner than all of those did; such a wait, which the
sleep ended, counts as `SHRINK` of the sleep, so the sleep shrinks until the barrier
outlasts it again (it never grows by itself). A sleep within `LEAD_S` is not worth the
hold before the end. Stopping partitions do not sleep (`flows.source`).
"""

from __future__ import annotations

import math
import threading
from collections import deque

from flows.runtime import RunArgs

KEPT = 3
"""Barriers whose waits count: the sleep is the shortest of them."""
SHRINK = 0.8
"""A wait the sleep ended counts as this share of the sleep: the barrier was shorter."""
MAX_SHARE = 0.75
"""The longest sleep as a share of the epoch: the partition reads at least the rest."""
LEAD_S = 0.025
"""So long before the predicted end, partitions ask to be called only after it; no earlier
wake-up is pending then (an idle partition sleeps 20 ms, `_IDLE_WAKE` in `flows.source`)."""
SLACK_S = 0.02
"""A barrier that opened by this much after the sleep ended is taken as ended by the sleep
(the next call comes a little after the wake-up Bytewax scheduled)."""

_THREAD = threading.local()


def worker(args: RunArgs) -> EpochBarrier:
    """The barrier shared by this worker thread's partitions."""
    found: EpochBarrier | None = getattr(_THREAD, "barrier", None)
    if found is None:
        alone = args.workers_per_process * args.processes == 1
        found = _THREAD.barrier = EpochBarrier(math.inf if alone else args.epoch_s)
    return found


class EpochBarrier:
    """One worker's epochs as its partitions see them (times from `time.monotonic`)."""

    __slots__ = ("_advanced", "_ends", "_epoch_s", "_sleep", "_until", "_waits")

    def __init__(self, epoch_s: float) -> None:
        self._epoch_s = epoch_s
        self._ends = math.inf  # unknown until the first snapshot
        self._advanced: float | None = None  # the end it shut at; it has not opened
        self._until: float | None = None  # the end of this epoch's sleep, once asked
        self._waits: deque[float] = deque(maxlen=KEPT)
        self._sleep = 0.0

    def advanced(self, now: float) -> None:
        """A partition is snapshotted: the epoch has ended and the barrier is shut (the
        first snapshot of the round counts)."""
        if self._advanced is None:
            self._advanced = self._ends  # when it was predicted to end
            self._ends = now + self._epoch_s

    def wake(self, now: float, snapshotted: bool) -> float | None:
        """At each `next_batch()` (`snapshotted`: the partition's first since its own
        snapshot): when to be called again at the earliest, or None to let the caller
        decide."""
        if snapshotted and self._advanced is not None:  # the barrier has opened
            wait = now - self._advanced  # since the predicted end: late or not, the same
            if self._until is not None and self._until <= now <= self._until + SLACK_S:
                wait = SHRINK * self._sleep  # the sleep ended it: the barrier was shorter
            if math.isfinite(wait):  # (the first epoch's end was not predicted)
                self._waits.append(wait)
                self._sleep = min(min(self._waits), MAX_SHARE * self._epoch_s)
            self._advanced = self._until = None
        if self._until is not None:  # this epoch's sleep, the same for every partition
            return self._until if now < self._until else None
        if self._sleep <= LEAD_S or now < self._ends - LEAD_S:
            return None
        if now < self._ends:  # be called in the activation that ends the epoch
            return self._ends + 0.001
        self._until = self._ends + self._sleep
        return self._until if now < self._until else None
