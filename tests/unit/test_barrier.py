"""A source partition sleeps through Bytewax's epoch barrier (`flows.barrier`), driven here
with explicit times; the spin it avoids is measured in docs/benchmarks.md."""

from __future__ import annotations

import pytest

from flows.barrier import LEAD_S, EpochBarrier

EPOCH = 10.0


def through(b: EpochBarrier, advanced: float, opened: float) -> None:
    """One barrier: the epoch ended (snapshot) at `advanced`; the first call after it came
    at `opened`."""
    b.advanced(advanced)
    assert b.wake(opened) is None  # a new epoch has just begun


def test_nothing_is_slept_before_a_barrier_was_seen():
    b = EpochBarrier(EPOCH)
    assert b.wake(0.0) is None
    assert b.wake(1e9) is None  # the first epoch's end is unknown
    b.advanced(5.0)
    assert b.wake(5.5) is None  # the first wait is measured; the new epoch has just begun


def test_the_first_call_past_the_end_sleeps_as_long_as_the_last_wait_once():
    b = EpochBarrier(EPOCH)
    through(b, 0.0, 1.5)  # the barrier held for 1.5 s
    b.advanced(20.0)  # (first call of that epoch at 20.0 + 1.5 below)
    assert b.wake(21.5) is None  # records the wait again: 1.5 s
    assert b.wake(20.0 + EPOCH - LEAD_S - 0.001) is None  # well before the end: read on
    end = 20.0 + EPOCH
    assert b.wake(end + 0.002) == pytest.approx(end + 0.002 + 1.5)
    assert b.wake(end + 0.003) is None  # once an epoch: Bytewax did not end it this time


def test_just_before_the_end_the_partition_asks_to_be_called_after_it():
    b = EpochBarrier(EPOCH)
    through(b, 0.0, 1.0)
    end = 0.0 + EPOCH
    assert b.wake(end - LEAD_S / 2) == pytest.approx(end + 0.001)
    assert b.wake(end - LEAD_S / 4) == pytest.approx(end + 0.001)  # not used up
    assert b.wake(end + 0.001) == pytest.approx(end + 0.001 + 1.0)


def test_the_sleep_follows_the_shortest_of_the_recent_waits_and_an_epoch_bounds_it():
    b = EpochBarrier(EPOCH)
    t = 0.0
    for wait in (0.1, 3.0, 0.5, 2.0, 2.5):  # the last three: 0.5, 2.0 and 2.5 s
        through(b, t, t + wait)
        t += EPOCH
    assert b.wake(t) == pytest.approx(t + 0.5)
    long = EpochBarrier(1.0)  # an outage held three barriers for a minute each
    for start in (0.0, 100.0):
        long.advanced(start)
        long.wake(start + 60.0)
    long.advanced(200.0)
    # Past the next end already (Bytewax ends that epoch at once): an epoch, not 60 s.
    assert long.wake(260.0) == pytest.approx(261.0)
