"""ERRORS_TOLERANCE=none under kills: every run must stop on the earliest bad record.

The `strict` mode's workload (`tools.chaos.workload.generate_strict`) has bad records on one
partition only. Each time the flow stops by itself, this checks, against what is durable
once it is gone:

* it exited non-zero naming a record, and that record is the earliest bad record of its
  partition (`stop_wrong` otherwise, also for an exit 0: it ran past the record);
* every good record before it is in the index (`stop_lost`);
* no committed offset is past the earliest bad record of its partition, and, when the
  processor rejected that record (deserialize or transform), no document of that
  partition was written by a record at or after it: the processor drops them (`past_bad`).
  A record only Elasticsearch refuses travels in a bulk with later ones, and other sink
  partitions carry later records of its Kafka partition until the flow stops: those may be
  written (never committed), and a rerun writes them again.

The run completes once two undisturbed runs in a row stopped on the same record.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tools.chaos.invariants import Durable, Invariants
from tools.chaos.truth import Truth
from tools.chaos.workload import PROCESSOR_STAGES

_STOP = re.compile(rb"record (?P<topic>\S+)/(?P<p>\d+)@(?P<o>\d+) failed at stage (?P<stage>\w+)")
_HELD = b"stopping once the records before it are written"


def named_record(text: bytes, topic: str) -> tuple[int, int] | None:
    """The (partition, offset) the flow's last stop message names, if any."""
    found = None
    for m in _STOP.finditer(text):
        if m["topic"].decode() == topic:
            found = (int(m["p"]), int(m["o"]))
    return found


def held_logged(text: bytes) -> bool:
    """True once the processor held a failed record (it stops an epoch later)."""
    return _HELD in text


def dropped_after(truth: Truth, partition: int) -> bool:
    """True when the processor rejects the partition's first bad record, so it drops
    every later record of the partition: none of them may reach the index."""
    rec = truth.recs[truth.bad[(partition, truth.first_bad[partition])]]
    return rec.stage in PROCESSOR_STAGES


@dataclass
class StrictStats:
    stops: int = 0
    stop_wrong: int = 0
    stop_lost: int = 0
    past_bad: int = 0
    stopped_on: str = "-"
    examples: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.examples) < 10:
            self.examples.append(text)


class StrictWatch:
    """Checks each stop of the flow; see the module docstring."""

    def __init__(self, truth: Truth, invariants: Invariants) -> None:
        self.truth = truth
        self.invariants = invariants
        self.stats = StrictStats()
        self.last: tuple[int, int] | None = None
        self.final_stops = 0
        """Undisturbed runs in a row that stopped on the same record."""

    @property
    def first_stop_seen(self) -> bool:
        return self.stats.stops > 0

    def on_interrupted(self) -> None:
        """A kill between stops: the next stops must be undisturbed twice again."""
        self.final_stops = 0

    def on_exit_zero(self, name: str) -> None:
        self.stats.stop_wrong += 1
        self.stats.note(f"{name}: exited 0 although bad records remain (ran past them)")

    def on_stop(self, name: str, text: bytes, durable: Durable, undisturbed: bool) -> None:
        truth, s = self.truth, self.stats
        s.stops += 1
        named = named_record(text, truth.topic)
        earliest = {(p, o) for p, o in truth.first_bad.items()}
        if named is None or named not in earliest:
            s.stop_wrong += 1
            s.note(f"{name}: stopped naming {named}, not an earliest bad record {sorted(earliest)}")
        else:
            s.stopped_on = f"{named[0]}@{named[1]}"
            p, o = named
            missing = self.invariants.check(durable, {p: o}, f"{name} stop")
            if missing:
                s.stop_lost += missing
                s.note(f"{name}: {missing} records before {p}@{o} not in the index")
        for p, limit in truth.first_bad.items():
            got = durable.committed.get(p, -1)
            if got > limit:
                s.past_bad += 1
                s.note(f"{name}: partition {p} committed {got}, past its first bad record {limit}")
            if not dropped_after(truth, p):
                continue
            for doc_id in truth.ids_by_partition.get(p, ()):
                seq = durable.docs.get(doc_id)
                if (
                    seq is not None
                    and 0 <= seq < len(truth.recs)
                    and truth.recs[seq].offset >= limit
                ):
                    s.past_bad += 1
                    s.note(
                        f"{name}: document {doc_id!r} written by offset "
                        f"{truth.recs[seq].offset}, past the first bad record {limit}"
                    )
        if undisturbed and named is not None and named == self.last:
            self.final_stops += 1
        elif undisturbed:
            self.final_stops = 1
        else:
            self.final_stops = 0
        self.last = named

    def done(self) -> bool:
        """Two undisturbed runs in a row stopped on the same record."""
        return self.final_stops >= 2
