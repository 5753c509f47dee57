"""flows.collector, in a child process: it turns the collector off process-wide."""

from __future__ import annotations

import subprocess
import sys

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
