"""Sleep through Bytewax's epoch barrier instead of spinning on it.

Bytewax 0.21.1 (`src/inputs.rs`, `partitioned_input`) lets a partition start epoch e+1 only
once the whole dataflow has finished e, and while it waits it calls no `next_batch()`. The
input operator still re-activates after the earliest `next_awake()` its partitions gave with
their last batch, and once that time has passed, at once, again and again: a busy wait. A
process whose epoch timer ends before another's, or whose sinks flush faster, burns a core
until the slowest process has flushed (measured in `docs/benchmarks.md`, section "The epoch
barrier"). One process alone rarely meets it: its worker is busy flushing.

So each partition predicts the end of its epoch: the time of its last snapshot (Bytewax
snapshots in the activation that advanced the epoch, a few milliseconds after its own
clock read the time) plus the epoch length. Shortly before that end it asks to be called
only after it, so that its next call comes in the activation that ends the epoch, and with
that call it asks to sleep as long as the shortest wait of the last `KEPT` epochs. Reading
resumes later than the barrier opens only when this wait is shorter than all of those; a
sleep that ends too soon spins for the rest, as before. The sleep is taken once an epoch.
"""

from __future__ import annotations

from collections import deque

KEPT = 3
"""Epochs whose waits count: the partition sleeps as long as the shortest of them."""
LEAD_S = 0.05
"""So long before the predicted end, the partition asks to be called only after it: its
next call then comes in an activation that ends the epoch, as no earlier wake-up is still
pending (an idle partition sleeps 20 ms, `_IDLE_WAKE` in `flows.source`; one of the rare
longer sleeps costs that epoch's saving, nothing more)."""


class EpochBarrier:
    """One source partition's view of its epochs (times from `time.monotonic`)."""

    __slots__ = ("_advanced", "_ends", "_epoch_s", "_sleep", "_slept", "_waits")

    def __init__(self, epoch_s: float) -> None:
        self._epoch_s = epoch_s
        self._ends = float("inf")  # unknown until the first snapshot
        self._advanced: float | None = None
        self._waits: deque[float] = deque(maxlen=KEPT)
        self._sleep = 0.0
        self._slept = False

    def advanced(self, now: float) -> None:
        """Bytewax snapshots the partition: its epoch has just ended; the barrier is shut."""
        self._advanced = now
        self._ends = now + self._epoch_s
        self._slept = False

    def wake(self, now: float) -> float | None:
        """At each `next_batch()`: the time to be called again at the earliest, or None to
        let the caller decide."""
        if self._advanced is not None:  # the first call since the barrier opened
            self._waits.append(now - self._advanced)
            self._advanced = None
            # At most an epoch: a wait an outage made long is not the norm.
            self._sleep = min(min(self._waits), self._epoch_s)
        if self._sleep <= 0 or self._slept or now < self._ends - LEAD_S:
            return None
        if now < self._ends:  # be called again only once Bytewax's clock has passed the end
            return self._ends + 0.001
        self._slept = True
        return now + self._sleep
