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


def primed(parts: list[Part], wait: float) -> float:
    """Two barriers, the second held `wait` past its predicted end; returns the next
    predicted end."""
    end(parts, 0.0)  # the first epoch's end was not predicted: nothing to measure
    opened(parts, 0.1)
    end(parts, EPOCH)  # predicted at 0.0 + EPOCH
    opened(parts, EPOCH + wait)
    return 2 * EPOCH


def test_nothing_is_slept_before_a_barrier_was_measured():
    parts = [Part(EpochBarrier(EPOCH))]
    assert parts[0].call(0.0) is None
    assert parts[0].call(1e9) is None  # the first epoch's end is unknown
    assert end(parts, 5.0) == [None]
    assert opened(parts, 5.5) == [None]
    assert end(parts, 5.0 + EPOCH + 0.001) == [None]  # its end was predicted: now measured


def test_at_the_end_every_partition_sleeps_until_the_same_time_once_an_epoch():
    parts = [Part(EpochBarrier(EPOCH)) for _ in range(1)]
    b = parts[0].b
    parts += [Part(b), Part(b)]
    e = primed(parts, 1.5)  # the barrier opened 1.5 s after the predicted end
    assert parts[0].call(e - LEAD_S - 0.001) is None  # well before the end: read on
    wakes = end(parts, e + 0.002)  # snapshots interleaved with the later calls
    assert wakes == pytest.approx([e + 1.5] * 3)
    assert opened(parts, e + 2.0) == [None, None, None]  # it outlasted the sleep
    # The next end is predicted from the first snapshot (e + 0.002).
    assert end(parts, e + 0.002 + EPOCH) == pytest.approx([e + 0.002 + EPOCH + 1.5] * 3)


def test_a_worker_held_past_its_end_sleeps_that_much_less():
    parts = [Part(EpochBarrier(EPOCH))]
    e = primed(parts, 1.5)
    assert end(parts, e + 1.0) == pytest.approx([e + 1.5])  # its sink held it 1 s
    late = [Part(EpochBarrier(EPOCH))]
    e = primed(late, 1.5)
    assert end(late, e + 2.0) == [None]  # held past the whole wait: no sleep


def test_just_before_the_end_partitions_ask_to_be_called_after_it():
    b = EpochBarrier(EPOCH)
    parts = [Part(b), Part(b)]
    e = primed(parts, 1.0)
    assert parts[0].call(e - LEAD_S / 2) == pytest.approx(e + 0.001)
    assert parts[1].call(e - LEAD_S / 4) == pytest.approx(e + 0.001)
    assert end(parts, e + 0.001)[0] == pytest.approx(e + 1.0)


def test_a_wait_the_sleep_ended_shrinks_the_sleep():
    """The sleep cannot measure a barrier shorter than itself: counted as a share of it,
    it shrinks until the barrier outlasts it (a review found it growing to an epoch and
    then reading one batch an epoch)."""
    b = EpochBarrier(EPOCH)
    parts = [Part(b), Part(b)]
    e = primed(parts, 2.0)
    sleeps = []
    for _ in range(5):  # the barrier now opens at once; the calls come as the sleep ends
        until = end(parts, e)[0]
        assert until is not None
        sleeps.append(until - e)
        assert opened(parts, until + SLACK_S / 2) == [None, None]
        e += EPOCH
    assert sleeps == pytest.approx([2.0 * SHRINK**n for n in range(5)])


def test_a_call_before_the_sleep_ended_is_an_exact_wait():
    parts = [Part(EpochBarrier(EPOCH))]
    e = primed(parts, 2.0)
    assert end(parts, e) == pytest.approx([e + 2.0])
    opened(parts, e + 0.5)  # called sooner (another partition's wake-up): 0.5 s
    assert end(parts, e + EPOCH) == pytest.approx([e + EPOCH + 0.5])


def test_the_sleep_is_the_shortest_recent_wait_within_an_epoch_and_worth_a_hold():
    parts = [Part(EpochBarrier(EPOCH))]
    end(parts, 0.0)
    opened(parts, 0.1)
    e = EPOCH
    for wait in (0.1, 3.0, 0.5, 2.0, 2.5):  # the last three: 0.5, 2.0 and 2.5 s
        end(parts, e)
        opened(parts, e + wait)
        e += EPOCH
    assert end(parts, e) == pytest.approx([e + 0.5])
    long = [Part(EpochBarrier(EPOCH))]
    e = primed(long, 0.9 * EPOCH)  # an outage held the barrier 9 s
    assert end(long, e) == pytest.approx([e + MAX_SHARE * EPOCH])  # within an epoch
    short = [Part(EpochBarrier(EPOCH))]
    e = primed(short, LEAD_S / 2)  # a short barrier is not worth holding reads before it
    assert short[0].call(e - LEAD_S / 2) is None
    assert end(short, e + 0.001) == [None]


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
    e = primed(parts, 1.0)
    assert (end(parts, e + 0.001)[0] is not None) is sleeps
    other: list[EpochBarrier] = []
    thread = threading.Thread(target=lambda: other.append(barrier.worker(RunArgs(2, 1, False))))
    thread.start()
    thread.join()
    assert other[0] is not b
