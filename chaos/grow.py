"""Partitions added to the topic while the flow runs (`grow` mode).

Once the attempt after kill number `at_kill` is reading, `grow()` adds `add` partitions
(AdminClient.create_partitions) and produces the second part of the workload
(`chaos.workload.growth`: updates of existing keys to their old partitions, new keys only
on the new partitions, so the expected final state stays defined under VERSION=none).
`watch()` then waits, without interrupting, until the running flow commits an offset on
a new partition (`live`, after `seen_s` seconds) or GROW_PICKUP_S passes: a flow that
only reads partitions it listed at start would read them after the next restart, with
nothing lost in the end (the audit passes) but `grow_live=0` in the summary.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaos.flow import Flow
from chaos.monitor import Monitor

GROW_PICKUP_S = 60.0


@dataclass
class Growth:
    at_kill: int
    add: int
    first_new: int
    """The first new partition's number (= the partition count before)."""
    produce: Callable[[], int]
    """Adds the partitions, produces the records, updates the truth; returns the count."""
    done: bool = False
    live: bool = False
    seen_s: float = -1.0
    exited: bool = False
    """The flow exited before it committed on a new partition."""
    records: int = 0
    _at: float = field(default=0.0, repr=False)

    def due(self, kills: int) -> bool:
        return not self.done and kills >= self.at_kill

    def grow(self, say: Callable[[str], None]) -> None:
        self._at = time.monotonic()
        self.records = self.produce()
        self.done = True
        say(
            f"added partitions {self.first_new}..{self.first_new + self.add - 1} and produced "
            f"{self.records} more records in {time.monotonic() - self._at:.1f}s"
        )

    def watch(self, flow: Flow, monitor: Monitor, check_time: Callable[[], Any]) -> None:
        deadline = self._at + GROW_PICKUP_S
        new = range(self.first_new, self.first_new + self.add)
        while time.monotonic() < deadline and not flow.any_exited():
            check_time()
            committed = monitor.committed_by_partition()
            if any(committed.get(p, 0) > 0 for p in new):
                self.live = True
                self.seen_s = time.monotonic() - self._at
                return
            time.sleep(0.25)
        self.exited = flow.any_exited()

    def describe(self) -> str:
        if self.live:
            return f"the running flow committed on a new partition {self.seen_s:.1f}s later"
        return (
            f"the running flow did not commit on any new partition within {GROW_PICKUP_S:.0f}s"
            f"{' (it exited first)' if self.exited else ''}"
        )
