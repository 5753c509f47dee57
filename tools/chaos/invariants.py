"""Checks at every kill: nothing below a committed or resumed-from offset may be missing.

The final audit sees only the end state, and a later update of the same key hides a lost
intermediate write there. So after every kill or stop (all processes gone) the harness
records what is durable (which record each document's `seq` says wrote it, the coordinates
in the dead-letter topic, the committed offsets) and checks, per partition, that every
record below the committed offset is durable: its document is in a state the records
allow once everything below that offset was written (`tools.chaos.truth`: at least the key's
last op below it), and every bad record below it is in the dead-letter topic (under
ERRORS_TOLERANCE=none no bad record ever is, so a committed offset past one is flagged).
When the next attempt starts, the first offset it logs per partition ("starts at offset N
(recovery snapshot | group ...)") is checked the same way against that record: a restart
must never skip a record that is not durable. A document on one partition is checked
against that partition's offset alone. A document whose key moved to an added partition
(`Truth.moved`) is checked once per capture, against the offsets of both its partitions
(`Truth.allowed`): with one of its new-partition writes below that partition's offset it
must be at that write or a later one, since the flow reads a new partition only once the
older ones are committed to their end, so no older write may land after it (one that did
is counted like a record lost below the offset: the order the final audit checks, failed
early); otherwise at least at its last old-partition write below the old partition's
offset, or at any write of the new partition (read, perhaps not committed). In-flight
bulks that finish inside Elasticsearch after the kill only make the check more lenient,
never stricter, so it has no false alarms.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.chaos.audit import committed_offsets, end_offsets, scan_index, seq_of
from tools.chaos.truth import INFINITY, Bound, Truth

_START = re.compile(
    rb"source partition (?P<topic>\S+)/(?P<p>\d+) starts at offset (?P<o>\d+) \((?P<why>[^)]*)\)"
)
MAX_EXAMPLES = 10


@dataclass
class Durable:
    """What was durable right after a kill."""

    docs: dict[str, int]
    """document id -> `seq` of the record that wrote it (-1: unknown)"""
    dead: set[tuple[int, int]]
    committed: dict[int, int]


@dataclass
class Violations:
    """Records a committed or resume offset claimed durable although they were not."""

    commit_ahead: int = 0
    resume_ahead: int = 0
    checked: int = 0
    """Partition offsets (> 0) checked, so a summary shows the checks did work."""
    examples: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(text)


def first_starts(logs: Iterable[Path], topic: str) -> dict[int, int]:
    """Per partition, the first offset the flow logged it starts at (later lines of the
    same attempt come from a restart inside it, after progress of its own)."""
    starts: dict[int, int] = {}
    for log in logs:
        try:
            data = log.read_bytes()
        except OSError:
            continue
        for m in _START.finditer(data):
            if m["topic"].decode() == topic:
                starts.setdefault(int(m["p"]), int(m["o"]))
    return starts


class Invariants:
    """Captures durable state after kills and checks offsets against it."""

    def __init__(
        self, *, es: Any, bootstrap: str, truth: Truth, index: str, dlq_topic: str, group: str
    ) -> None:
        from confluent_kafka import Consumer

        self._es = es
        self._bootstrap = bootstrap
        self.truth = truth
        """Replaced by the runner when records are added (partitions grown)."""
        self._index = index
        self._dlq_topic = dlq_topic
        self._group = group
        self._dead: set[tuple[int, int]] = set()
        self._dlq = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"chaos-inv-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        self._dlq_pos: dict[int, int] = {}
        self.found = Violations()

    def close(self) -> None:
        self._dlq.close()

    def capture(self) -> Durable:
        """Documents, dead-letter coordinates and commits, as they are now."""
        docs = {i: seq_of(h) for i, h in scan_index(self._es, self._index, ["seq"]).items()}
        self._read_dead_letters()
        committed = committed_offsets(self._bootstrap, self._group, self.truth.topic)
        return Durable(docs, set(self._dead), committed)

    def _read_dead_letters(self) -> None:
        from confluent_kafka import TopicPartition

        ends = end_offsets(self._bootstrap, self._dlq_topic)
        todo = {p: end for p, end in ends.items() if end > self._dlq_pos.get(p, 0)}
        if not todo:
            return
        self._dlq.assign(
            [TopicPartition(self._dlq_topic, p, self._dlq_pos.get(p, 0)) for p in todo]
        )
        deadline = time.monotonic() + 60
        while any(self._dlq_pos.get(p, 0) < end for p, end in todo.items()):
            if time.monotonic() > deadline:
                msg = f"reading {self._dlq_topic} up to {todo} took over 60s"
                raise TimeoutError(msg)
            for m in self._dlq.consume(1000, 0.5):
                if m.error() is not None:
                    continue
                self._dlq_pos[int(m.partition() or 0)] = int(m.offset() or 0) + 1
                headers = dict(m.headers() or ())
                try:
                    p = int(headers["__connect.errors.partition"] or b"")
                    o = int(headers["__connect.errors.offset"] or b"")
                except (KeyError, ValueError):
                    continue
                self._dead.add((p, o))

    def check(self, durable: Durable, offsets: dict[int, int], what: str) -> int:
        """Records below `offsets` that were not durable; each is noted as an example."""
        truth = self.truth
        missing = 0
        for p, upto in offsets.items():
            self.found.checked += upto > 0
            for i in truth.by_partition.get(p, ()):
                rec = truth.recs[i]
                if rec.offset >= upto:
                    break
                coords = (p, rec.offset)
                if rec.bad and coords not in durable.dead:
                    missing += 1
                    self.found.note(
                        f"{what}: partition {p} at {upto}, but bad record {rec.offset} "
                        f"({rec.kind}) is not in the dead-letter topic"
                    )
            where = f"{what}: partition {p} at {upto}"
            for doc_id in truth.ids_by_partition.get(p, ()):
                if doc_id not in truth.moved:
                    missing += self._check_doc(durable, doc_id, upto, where)
        for doc_id in truth.moved:  # once, against the offsets of both its partitions
            at = {q: offsets[q] for q in truth.partitions(doc_id) if offsets.get(q, 0) > 0}
            if at:
                where = ", ".join(f"partition {q} at {o}" for q, o in at.items())
                missing += self._check_doc(durable, doc_id, at, f"{what}: {where}")
        return missing

    def _check_doc(self, durable: Durable, doc_id: str, low: Bound, where: str) -> int:
        truth = self.truth
        allowed = truth.allowed(doc_id, low, INFINITY)
        state = durable.docs.get(doc_id)
        if (state is None and allowed.absent) or state in allowed.recs:
            return 0
        last = truth.recs[truth.last(doc_id)]
        self.found.note(
            f"{where}, but document {doc_id!r} is at record {state} (allowed: "
            f"{sorted(allowed.recs)[-3:]}, absent {allowed.absent}; its last write is "
            f"{last.partition}@{last.offset})"
        )
        return 1

    def after_kill(self) -> Durable:
        """Capture durable state and check the committed offsets against it."""
        durable = self.capture()
        group_offsets = {p: c for p, c in durable.committed.items() if c > 0}
        self.found.commit_ahead += self.check(durable, group_offsets, "committed offset")
        return durable

    def on_restart(self, durable: Durable, logs: Iterable[Path]) -> None:
        """Check the offsets the restarted flow started from (parsed from its logs)."""
        starts = first_starts(logs, self.truth.topic)
        self.found.resume_ahead += self.check(durable, starts, "restart offset")
