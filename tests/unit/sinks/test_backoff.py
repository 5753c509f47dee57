"""sinks.backoff: full jitter, doubling, budgets and retry limits, on a fake clock."""

from __future__ import annotations

import random

import pytest

from sinks.backoff import SYSTEM_CLOCK, Backoff, Retries, under_way


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float, /) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


def loop(retries: Retries) -> list[float]:
    """Retry until the budget or the retry limit says stop; the waits drawn."""
    waits = []
    while not retries.over_budget() and not retries.exhausted():
        delay = retries.next_delay()
        waits.append(delay)
        retries.sleep(delay)
    return waits


def test_caps_double_from_twice_the_initial_wait_up_to_the_maximum() -> None:
    b = Backoff(initial_s=0.1, max_s=1.0)
    assert [b.cap(n) for n in range(1, 7)] == pytest.approx([0.2, 0.4, 0.8, 1.0, 1.0, 1.0])
    assert b.cap(10**6) == 1.0  # the exponent is capped: no float overflow after many retries


def test_full_jitter_is_a_uniform_draw_below_the_cap() -> None:
    clock = FakeClock()
    draws = iter([0.0, 0.5, 0.999, 0.25])
    r = Backoff(0.1, 1.0).start(clock, rand=lambda: next(draws))
    assert [r.next_delay() for _ in range(4)] == pytest.approx([0.0, 0.2, 0.7992, 0.25])
    assert r.count == 4


def test_real_draws_stay_within_zero_and_the_cap() -> None:
    rng = random.Random(7)
    r = Backoff(0.1, 10.0).start(FakeClock(), rand=rng.random)
    delays = [r.next_delay() for _ in range(2000)]
    caps = [Backoff(0.1, 10.0).cap(n) for n in range(1, 2001)]
    assert all(0 <= d <= c for d, c in zip(delays, caps, strict=True))
    late = delays[100:]
    assert min(late) < 1.0 and max(late) > 9.0  # the whole range [0, cap], not [cap/2, cap]


def test_budget_counts_from_the_start_and_stops_within_one_wait() -> None:
    clock = FakeClock()
    r = Backoff(0.1, 1.0, budget_s=5).start(clock, rand=lambda: 1.0)
    waits = loop(r)
    assert 5 < r.elapsed() <= 5 + 1.0
    assert clock.sleeps == waits
    assert waits[:4] == pytest.approx([0.2, 0.4, 0.8, 1.0])


def test_no_budget_and_no_limit_never_stop() -> None:
    clock = FakeClock()
    r = Backoff(0.1, 1.0).start(clock)
    clock.now += 10**9
    assert not r.over_budget() and not r.exhausted()


def test_a_retry_limit_stops_after_that_many_retries() -> None:
    clock = FakeClock()
    r = Backoff(0.1, 5.0, tries=9).start(clock, rand=lambda: 1.0)
    waits = loop(r)
    assert len(waits) == 9
    assert waits == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0, 5.0])


def test_the_system_clock_is_monotonic_time() -> None:
    a = SYSTEM_CLOCK.monotonic()
    SYSTEM_CLOCK.sleep(0)
    assert SYSTEM_CLOCK.monotonic() >= a


def test_a_loop_that_gives_up_is_no_longer_under_way() -> None:
    """/status lists retries under way; one that gave up must leave the list at once, not
    when the exception it raises has unwound (its frame keeps the loop alive until then)."""
    clock = FakeClock()
    r = Backoff(0.1, 1.0, budget_s=1).start(clock, rand=lambda: 1.0)
    r.sleep(r.next_delay(), "test-giving-up", "refused")
    assert [u.where for u in under_way()].count("test-giving-up") == 1
    clock.now += 2
    assert r.over_budget()
    assert [u.where for u in under_way()].count("test-giving-up") == 0
    limited = Backoff(0.1, 1.0, tries=1).start(clock, rand=lambda: 1.0)
    limited.sleep(limited.next_delay(), "test-giving-up", "refused")
    assert limited.exhausted()
    assert [u.where for u in under_way()].count("test-giving-up") == 0
