"""flows.collector, in a child process: it turns the collector off process-wide."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = """
import gc, time, weakref
from flows import collector

class Node:
    pass

collector.collect_on_a_clock({interval})
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle: reference counting alone never frees it
alive = weakref.ref(a)
del a, b
{check}
"""


def run_child(interval: float, check: str) -> subprocess.CompletedProcess[str]:
    code = CHILD.format(interval=interval, check=check)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_cycles_are_collected_on_the_clock_with_automatic_collection_off() -> None:
    check = """
assert not gc.isenabled()
deadline = time.monotonic() + 10
while alive() is not None and time.monotonic() < deadline:
    time.sleep(0.01)
assert alive() is None, "the cycle was never collected"
"""
    done = run_child(0.05, check)
    assert done.returncode == 0, done.stderr


def test_zero_keeps_pythons_collector() -> None:
    done = run_child(0, "assert gc.isenabled()")
    assert done.returncode == 0, done.stderr


def test_a_cycle_made_after_quiet_collections_is_still_collected() -> None:
    """After a second of collections that free nothing the clock has slowed down to
    BACKOFF_MAX times its interval (0.4 s here): a cycle made then is collected by it."""
    check = """
for _ in range(3):
    time.sleep(0.4)
    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    del a, b
    deadline = time.monotonic() + 10 * 0.4
    while alive() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert alive() is None, "the cycle was not collected within the slowest interval"
"""
    done = run_child(0.05, check)
    assert done.returncode == 0, done.stderr


class _Stop(Exception):
    pass


def test_the_clock_slows_down_while_collections_free_nothing() -> None:
    """It doubles its interval after each collection that found nothing, up to
    BACKOFF_MAX times GC_INTERVAL_S, and is back at GC_INTERVAL_S after one that freed
    something."""
    from flows.collector import BACKOFF_MAX, run_clock

    found = iter([0, 0, 0, 0, 0, 3, 0, 12, 0])
    waits: list[float] = []

    def sleep(s: float) -> None:
        if len(waits) == 9:
            raise _Stop
        waits.append(s)

    with pytest.raises(_Stop):
        run_clock(10, lambda: next(found), sleep)
    assert BACKOFF_MAX == 8
    assert waits == [10, 20, 40, 80, 80, 80, 10, 20, 10]
