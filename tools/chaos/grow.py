"""Partitions added to the topic while the flow runs (`grow` mode), moving keys.

Once the attempt after kill number `at_kill` is reading (in `layout`: 3 workers, so that
partitions p and p + 4 are read by different workers, see `tools.chaos.modes.GROW_LAYOUT`),
`grow()` notes the group's committed offsets, adds `add` partitions
(AdminClient.create_partitions) and produces the second part of the workload
(`tools.chaos.workload.growth`): every record goes where a key-hash partitioner puts its key
over the new total, so about half of the existing keys move to a new partition while their
older writes may still wait unread in the old partitions' backlog. Under VERSION=none each
such document must still end at its newest write, which only the flow's hold of added
partitions (`flows.kafka.discovery`) provides. `Moves` counts what the growth did: the old
partitions' backlog when the partitions were added (`backlog`), the documents whose key
moved (`keys_moved`), those of them with an older write not yet committed then
(`moved_unread`: the ones a new partition read beside that backlog could leave at an older
write), and the documents whose newest write came from a new partition (`newest_new`);
`held` counts the new partitions the flow logged it held.
`watch()` then waits, without interrupting, until the running flow commits an offset on a
new partition (`live`, after `seen_s` seconds) or GROW_PICKUP_S passes: a flow that only
reads partitions it listed at start would read them after the next restart, with nothing
lost in the end but `grow_live=0` in the summary.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.chaos.flow import Flow
from tools.chaos.monitor import Monitor
from tools.chaos.truth import INFINITY, Truth

GROW_PICKUP_S = 60.0
_HOLD = re.compile(rb"source partition (?P<topic>\S+)/(?P<p>\d+): added to its topic while")


@dataclass
class Moves:
    """What adding the partitions did to the keys (see the module docstring)."""

    backlog: int = 0
    keys_moved: int = 0
    moved_unread: int = 0
    newest_new: int = 0

    @classmethod
    def of(
        cls, truth: Truth, first_new: int, committed: dict[int, int], ends: dict[int, int]
    ) -> Moves:
        """Count them in `truth`, with the old partitions' `committed` and `ends` offsets as
        they were when the partitions were added."""
        recs = truth.recs
        moves = cls()
        for p, end in ends.items():
            moves.backlog += max(end - max(committed.get(p, end), 0), 0)
        for doc_id, ops in truth.ops.items():
            moves.newest_new += recs[ops[-1]].partition >= first_new
            if doc_id in truth.moved:
                moves.keys_moved += 1
                moves.moved_unread += any(
                    recs[i].partition < first_new
                    and recs[i].offset >= committed.get(recs[i].partition, INFINITY)
                    for i in ops
                )
        return moves


def holds_logged(logs: Iterable[Path], topic: str) -> set[int]:
    """The partitions of `topic` the flow logged it held as added (`flows.kafka.discovery`)."""
    held: set[int] = set()
    for log in logs:
        try:
            data = log.read_bytes()
        except OSError:
            continue
        held.update(int(m["p"]) for m in _HOLD.finditer(data) if m["topic"].decode() == topic)
    return held


@dataclass
class Growth:
    at_kill: int
    add: int
    first_new: int
    """The first new partition's number (= the partition count before)."""
    produce: Callable[[], tuple[int, Moves]]
    """Notes the committed offsets, adds the partitions, produces the records, updates the
    truth; returns the count of records and what moved."""
    layout: str | None = None
    """The layout of the attempt that adds the partitions (None: the next in turn)."""
    done: bool = False
    live: bool = False
    seen_s: float = -1.0
    exited: bool = False
    """The flow exited before it committed on a new partition."""
    records: int = 0
    moves: Moves = field(default_factory=Moves)
    held: int = 0
    """New partitions the flow logged it held until the older ones were read to their end."""
    _at: float = field(default=0.0, repr=False)

    def due(self, kills: int) -> bool:
        return not self.done and kills >= self.at_kill

    def grow(self, say: Callable[[str], None]) -> None:
        self._at = time.monotonic()
        self.records, self.moves = self.produce()
        self.done = True
        m = self.moves
        say(
            f"added partitions {self.first_new}..{self.first_new + self.add - 1} while the old "
            f"ones had {m.backlog} records not committed, and produced {self.records} more "
            f"records in {time.monotonic() - self._at:.1f}s: {m.keys_moved} keys moved to a new "
            f"partition, {m.moved_unread} of them with an older write not committed yet; "
            f"{m.newest_new} documents end at a write of a new partition"
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
