"""A worker's source partitions sleep through Bytewax's epoch barrier (`flows.barrier`),
driven here with explicit times in the order Bytewax 0.21.1 calls them; the spin it avoids
is measured in docs/benchmarks.md."""

from __future__ import annotations

import threading

import pytest

from flows import barrier
from flows.barrier import LEAD_S, MAX_SHARE, SHRINK, SLACK_S, EpochBarrier
from flows.runtime import RunArgs

EPOCH = 10.0


class Part:
    """A source partition's calls into its worker's barrier (`flows.source`)."""

    def __init__(self, b: EpochBarrier) -> None:
        self.b = b
        self.snapshotted = False

    def call(self, now: float) -> float | None:
        """next_batch()."""
        wake = self.b.wake(now, self.snapshotted)
        self.snapshotted = False
        return wake

    def snap(self, now: float) -> None:
        """snapshot(): Bytewax ended the epoch."""
        self.b.advanced(now)
        self.snapshotted = True


def end(parts: list[Part], now: float) -> list[float | None]:
    """The activation that ends the epoch: each partition's call, then its snapshot."""
    wakes = []
    for i, p in enumerate(parts):
        wakes.append(p.call(now + i * 0.001))
        p.snap(now + i * 0.001)
    return wakes


def opened(parts: list[Part], now: float) -> list[float | None]:
    """The first activation after the barrier opened."""
    return [p.call(now) for p in parts]


def test_nothing_is_slept_before_a_barrier_was_seen():
    parts = [Part(EpochBarrier(EPOCH)) for _ in range(1)]
    assert parts[0].call(0.0) is None
    assert parts[0].call(1e9) is None  # the first epoch's end is unknown
    assert end(parts, 5.0) == [None]
    assert opened(parts, 5.5) == [None]  # the first wait is measured


def test_at_the_end_every_partition_sleeps_until_the_same_time_once_an_epoch():
    b = EpochBarrier(EPOCH)
    parts = [Part(b), Part(b), Part(b)]
    end(parts, 0.0)
    assert opened(parts, 1.5) == [None, None, None]  # the barrier held 1.5 s
    assert parts[0].call(EPOCH - LEAD_S - 0.001) is None  # well before the end: read on
    wakes = end(parts, EPOCH + 0.002)  # snapshots interleaved with the later calls
    assert wakes == pytest.approx([EPOCH + 0.002 + 1.5] * 3)
    assert opened(parts, EPOCH + 2.0) == [None, None, None]  # it outlasted the sleep
    assert end(parts, 2 * EPOCH + 0.01) == pytest.approx([2 * EPOCH + 0.01 + 1.5] * 3)


def test_just_before_the_end_partitions_ask_to_be_called_after_it():
    b = EpochBarrier(EPOCH)
    parts = [Part(b), Part(b)]
    end(parts, 0.0)
    opened(parts, 1.0)
    first_end = 0.0 + EPOCH  # (the first snapshot's time)
    assert parts[0].call(first_end - LEAD_S / 2) == pytest.approx(first_end + 0.001)
    assert parts[1].call(first_end - LEAD_S / 4) == pytest.approx(first_end + 0.001)
    assert end(parts, first_end + 0.001)[0] == pytest.approx(first_end + 0.001 + 1.0)


def test_a_wait_the_sleep_ended_shrinks_the_sleep():
    """The sleep cannot measure a barrier shorter than itself: counted as a share of it,
    it shrinks until the barrier outlasts it (a review found it growing to an epoch and
    then reading one batch an epoch)."""
    b = EpochBarrier(EPOCH)
    parts = [Part(b), Part(b)]
    end(parts, 0.0)
    opened(parts, 2.0)
    sleeps = []
    t = EPOCH
    for _ in range(5):  # the barrier now opens at once; the calls come as the sleep ends
        until = end(parts, t)[0]
        assert until is not None
        sleeps.append(until - t)
        assert opened(parts, until + SLACK_S / 2) == [None, None]
        t += EPOCH
    assert sleeps == pytest.approx([2.0 * SHRINK**n for n in range(5)])


def test_a_call_before_the_sleep_ended_is_an_exact_wait():
    b = EpochBarrier(EPOCH)
    parts = [Part(b)]
    end(parts, 0.0)
    opened(parts, 2.0)
    until = end(parts, EPOCH)[0]
    assert until == pytest.approx(EPOCH + 2.0)
    opened(parts, EPOCH + 0.5)  # called sooner (another partition's wake-up): 0.5 s
    assert end(parts, 2 * EPOCH + 0.6)[0] == pytest.approx(2 * EPOCH + 0.6 + 0.5)


def test_the_sleep_is_the_shortest_recent_wait_within_an_epoch_and_worth_a_hold():
    b = EpochBarrier(EPOCH)
    parts = [Part(b)]
    t = 0.0
    for wait in (0.1, 3.0, 0.5, 2.0, 2.5):  # the last three: 0.5, 2.0 and 2.5 s
        end(parts, t)
        opened(parts, t + wait)
        t += EPOCH
    assert end(parts, t)[0] == pytest.approx(t + 0.5)
    long = [Part(EpochBarrier(1.0))]  # an outage held three barriers for a minute each
    for start in (0.0, 100.0):
        end(long, start)
        opened(long, start + 60.0)
    end(long, 200.0)
    # Opened past the next end (Bytewax ends that epoch at once): within an epoch.
    assert opened(long, 260.0) == pytest.approx([260.0 + MAX_SHARE * 1.0])
    short = [Part(EpochBarrier(EPOCH))]
    end(short, 0.0)
    opened(short, LEAD_S)  # a barrier of 25 ms is not worth holding reads before the end
    assert short[0].call(EPOCH - LEAD_S / 2) is None
    assert end(short, EPOCH + 0.001) == [None]


@pytest.mark.parametrize(
    ("workers", "processes", "sleeps"), [(1, 1, False), (2, 1, True), (1, 2, True)]
)
def test_one_barrier_per_worker_thread_and_no_sleep_for_a_single_worker(
    workers, processes, sleeps, monkeypatch
):
    """A single worker's own flush is the whole wait: sleeping could only delay reading."""
    monkeypatch.setattr(barrier, "_THREAD", threading.local())
    b = barrier.worker(RunArgs(workers, processes, False, epoch_s=EPOCH))
    assert barrier.worker(RunArgs(workers, processes, False, epoch_s=EPOCH)) is b
    parts = [Part(b)]
    end(parts, 0.0)
    opened(parts, 1.0)
    assert (end(parts, EPOCH + 0.001)[0] is not None) is sleeps
    other: list[EpochBarrier] = []
    thread = threading.Thread(target=lambda: other.append(barrier.worker(RunArgs(2, 1, False))))
    thread.start()
    thread.join()
    assert other[0] is not b
