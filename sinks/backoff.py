"""One backoff for every retry loop: full jitter, doubling, with an injectable clock.

Retry n (1, 2, ...) waits a uniform draw in [0, min(max_s, initial_s * 2**n)] ("full
jitter": many workers retrying one overloaded server spread out instead of arriving in
waves). A loop may stop after `budget_s` seconds since its first try or after `tries`
retries; 0 means no limit. What to retry, and what to raise when the budget is spent, is
the loop's own business: this module only counts and waits.

Tests pass a fake `Clock` (and a fixed `rand`), so no test sleeps.

A loop that names itself when it sleeps (`Retries.sleep(delay, where, reason)`) is listed by
`under_way()` until it ends (its `Retries` is dropped), so an operator can ask what the
process is retrying and why (the status API).
"""

from __future__ import annotations

import itertools
import random
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from sinks import progress

_MAX_EXPONENT = 30  # 2**30 * any sane initial_s is past every max_s; floats never overflow


class Clock(Protocol):
    """Monotonic time and sleeping: what a retry loop needs from the world."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float, /) -> None: ...


class SystemClock:
    """The real clock: `time.monotonic` and `time.sleep` themselves (no Python frame in
    between: the sink reads the clock on every write)."""

    monotonic = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)


SYSTEM_CLOCK: Clock = SystemClock()


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long retry n waits, and when a loop gives up (see the module docstring)."""

    initial_s: float
    max_s: float
    budget_s: float = 0.0
    """Seconds since the first try after which the loop gives up; 0: never."""
    tries: int = 0
    """Retries after which the loop gives up; 0: no limit."""

    def cap(self, retry: int) -> float:
        """The longest wait before retry `retry` (1, 2, ...)."""
        return min(self.max_s, self.initial_s * 2 ** min(retry, _MAX_EXPONENT))

    def start(
        self, clock: Clock = SYSTEM_CLOCK, rand: Callable[[], float] = random.random
    ) -> Retries:
        """The state of one retry loop, started now."""
        return Retries(self, clock, rand)


class Retries:
    """One retry loop: how many retries so far, and how long since the first try."""

    __slots__ = ("__weakref__", "backoff", "clock", "count", "rand", "started")

    def __init__(self, backoff: Backoff, clock: Clock, rand: Callable[[], float]) -> None:
        self.backoff = backoff
        self.clock = clock
        self.rand = rand
        self.started = clock.monotonic()
        self.count = 0

    def elapsed(self) -> float:
        """Seconds since the loop started."""
        return self.clock.monotonic() - self.started

    def over_budget(self) -> bool:
        """True once more than `budget_s` passed since the first try (never without one).
        The loop then gives up, so it leaves `under_way()` at once (not once the exception
        it raises has unwound and freed this object)."""
        budget = self.backoff.budget_s
        return bool(budget) and self.clock.monotonic() - self.started > budget and self._done()

    def exhausted(self) -> bool:
        """True once `tries` retries were made (never without a limit); as `over_budget`,
        the loop leaves `under_way()`."""
        tries = self.backoff.tries
        return bool(tries) and self.count >= tries and self._done()

    def _done(self) -> bool:
        _UNDER_WAY.pop(id(self), None)
        return True

    def next_delay(self) -> float:
        """Count one more retry and draw its wait (seconds); sleep it with `sleep`."""
        self.count += 1
        return self.rand() * self.backoff.cap(self.count)

    def sleep(self, seconds: float, where: str = "", reason: str = "") -> None:
        """Wait `seconds`; with `where` (a short, fixed name of the loop: `bulk`,
        `dead-letter`, `commit`, ...) the loop is listed by `under_way()` while it lives."""
        if where:
            key = id(self)
            entry = _UNDER_WAY.get(key)
            if entry is None:
                _UNDER_WAY[key] = UnderWay(where, reason, time.time(), self.count)
                weakref.finalize(self, _UNDER_WAY.pop, key, None)
            else:
                _UNDER_WAY[key] = replace(entry, reason=reason, attempts=self.count)
            progress.beat()
        self.clock.sleep(seconds)


@dataclass(frozen=True, slots=True)
class UnderWay:
    """A retry loop that is still retrying."""

    where: str
    reason: str
    since: float
    """Wall-clock time (epoch seconds) of its first retry."""
    attempts: int


_UNDER_WAY: dict[int, UnderWay] = {}


_WAIT_KEYS = itertools.count(-1, -1)  # below every id(): never a Retries' key


def list_wait(where: str, reason: str) -> int:
    """List a wait that is no retry loop's sleep (a full producer queue) in `under_way()`
    until `end_wait` of the key this returns."""
    key = next(_WAIT_KEYS)
    _UNDER_WAY[key] = UnderWay(where, reason, time.time(), 0)
    progress.beat()
    return key


def end_wait(key: int) -> None:
    """The wait `list_wait` listed is over."""
    _UNDER_WAY.pop(key, None)


def under_way() -> list[UnderWay]:
    """The retry loops of this process that are still retrying, oldest first."""
    return sorted(_UNDER_WAY.values(), key=lambda u: u.since)
