"""A worker's source partitions sleep through Bytewax's epoch barrier (`flows.barrier`),
driven here with explicit times; the spin it avoids is measured in docs/benchmarks.md."""

from __future__ import annotations

import threading

import pytest

from flows import barrier
from flows.barrier import LEAD_S, MAX_SHARE, SHRINK, SLACK_S, EpochBarrier
from flows.runtime import RunArgs

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


def test_past_the_end_every_partition_sleeps_until_the_same_time_once_an_epoch():
    b = EpochBarrier(EPOCH)
    through(b, 0.0, 1.5)  # the barrier held for 1.5 s
    assert b.wake(EPOCH - LEAD_S - 0.001) is None  # well before the end: read on
    until = EPOCH + 0.002 + 1.5
    assert b.wake(EPOCH + 0.002) == pytest.approx(until)
    assert b.wake(EPOCH + 0.004) == pytest.approx(until)  # another partition: the same
    b.advanced(EPOCH + 0.005)  # the epoch ended; a later snapshot of it changes nothing
    b.advanced(EPOCH + 0.009)
    assert b.wake(EPOCH + 2.0) is None  # the barrier outlasted the sleep: a wait of ~2 s
    past = EPOCH + 0.005 + EPOCH + 0.001
    assert b.wake(past) == pytest.approx(past + 1.5)  # still the shortest: 1.5


def test_just_before_the_end_partitions_ask_to_be_called_after_it():
    b = EpochBarrier(EPOCH)
    through(b, 0.0, 1.0)
    assert b.wake(EPOCH - LEAD_S / 2) == pytest.approx(EPOCH + 0.001)
    assert b.wake(EPOCH - LEAD_S / 4) == pytest.approx(EPOCH + 0.001)
    assert b.wake(EPOCH + 0.001) == pytest.approx(EPOCH + 0.001 + 1.0)


def test_a_wait_the_sleep_ended_shrinks_the_sleep():
    """The sleep cannot measure a barrier shorter than itself: counted as a share of it,
    it shrinks until the barrier outlasts it (a review found it growing to an epoch and
    then reading one batch an epoch)."""
    b = EpochBarrier(EPOCH)
    through(b, 0.0, 2.0)
    sleeps = []
    t = EPOCH
    for _ in range(5):  # the barrier now opens at once; each call comes as the sleep ends
        until = b.wake(t)
        assert until is not None
        sleeps.append(until - t)
        b.advanced(t)
        through_at = until + SLACK_S / 2
        assert b.wake(through_at) is None
        t = t + EPOCH
    assert sleeps[0] == pytest.approx(2.0)
    assert sleeps[1:] == pytest.approx([2.0 * SHRINK**n for n in range(1, 5)])


def test_the_sleep_is_the_shortest_of_the_recent_waits_and_within_an_epoch():
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
    # Past the next end already (Bytewax ends that epoch at once): within an epoch.
    assert long.wake(260.0) == pytest.approx(260.0 + MAX_SHARE * 1.0)


@pytest.mark.parametrize(
    ("workers", "processes", "sleeps"), [(1, 1, False), (2, 1, True), (1, 2, True)]
)
def test_one_barrier_per_worker_thread_and_none_for_a_single_worker(
    workers, processes, sleeps, monkeypatch
):
    """A single worker's own flush is the whole wait: sleeping could only delay reading."""
    monkeypatch.setattr(barrier, "_THREAD", threading.local())
    b = barrier.worker(RunArgs(workers, processes, False, epoch_s=EPOCH))
    assert barrier.worker(RunArgs(workers, processes, False, epoch_s=EPOCH)) is b
    through(b, 0.0, 1.0)
    assert (b.wake(EPOCH + 0.001) is not None) is sleeps
    other: list[EpochBarrier] = []
    thread = threading.Thread(target=lambda: other.append(barrier.worker(RunArgs(2, 1, False))))
    thread.start()
    thread.join()
    assert other[0] is not b
