"""flows.runtime.collector, in a child process: it turns the collector off process-wide."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = """
import gc, time, weakref
from flows.runtime import collector

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: reference counting alone never frees it
    return weakref.ref(a)

def collected(ref):
    deadline = time.monotonic() + 10
    while ref() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    return ref() is None

collector.collect_on_a_clock({args})
alive = cycle()
{check}
"""


def run_child(
    interval: float, check: str, args: str = "{interval}, {interval} * 4"
) -> subprocess.CompletedProcess[str]:
    code = CHILD.format(args=args.format(interval=interval), check=check)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "args",
    # The second: `collect_on_a_clock(settings.gc_interval_s)`, as flow modules written
    # before GC_INTERVAL_MAX_S call it (a fixed clock).
    ["{interval}, {interval} * 4", "{interval}"],
    ids=["slowing-clock", "interval-only"],
)
def test_cycles_are_collected_on_the_clock_with_automatic_collection_off(args: str) -> None:
    check = """
assert not gc.isenabled()
assert collected(alive), "the cycle was never collected"
"""
    done = run_child(0.05, check, args=args)
    assert done.returncode == 0, done.stderr


def test_zero_keeps_pythons_collector() -> None:
    done = run_child(0, "assert gc.isenabled()")
    assert done.returncode == 0, done.stderr


def test_a_cycle_made_after_quiet_collections_is_still_collected() -> None:
    """A smoke test of the slowed clock in a real process: after 0.4 s of collections that
    found nothing (the clock at its longest, 0.2 s here), a cycle made then is collected,
    three times over. The arithmetic is the next test's."""
    check = """
for _ in range(3):
    time.sleep(0.4)
    assert collected(cycle()), "the cycle was not collected"
"""
    done = run_child(0.05, check)
    assert done.returncode == 0, done.stderr


class _Stop(Exception):
    pass


def _waits(interval: float, longest: float, found: list[int]) -> list[float]:
    """The clock's sleeps while `collect` finds `found`, one after the other."""
    from flows.runtime.collector import run_clock

    results = iter(found)
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        if len(waits) > len(found):  # each found count was used: stop before collecting
            raise _Stop

    with pytest.raises(_Stop):
        run_clock(interval, longest, lambda: next(results), sleep)
    return waits


def test_the_clock_slows_down_while_collections_find_no_garbage() -> None:
    """It doubles its wait after each collection that found nothing, up to its longest,
    and is back at GC_INTERVAL_S after one that found something."""
    assert _waits(10, 40, [0, 0, 0, 0, 3, 0, 12, 0]) == [10, 20, 40, 40, 40, 10, 20, 10, 20]
    assert _waits(10, 50, [0, 0, 0, 0]) == [10, 20, 40, 50, 50]


@pytest.mark.parametrize("longest", [0, 5, 10])
def test_a_longest_wait_up_to_the_interval_keeps_a_fixed_clock(longest: float) -> None:
    assert _waits(10, longest, [0, 0, 2, 0]) == [10] * 5
