"""Checks at every kill: nothing below a committed or resumed-from offset may be missing.

The final audit sees only the end state, and a later update of the same key hides a lost
intermediate write there. So after every kill (all processes dead) the harness records
what is durable (each document's `_version`, the coordinates in the dead-letter topic, the
committed offsets) and checks, per partition, that every record below the committed offset
is durable: its document is at least at the version of the key's last good write below
that offset, and every bad record below it is in the dead-letter topic. When the next
attempt starts, the offsets it logs ("starts at offset N (recovery snapshot | group ...)")
are checked the same way against that record: a restart must never skip a record that is
not durable. In-flight bulks that finish inside Elasticsearch after the kill only make the
check more lenient, never stricter, so it has no false alarms.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.audit import committed_offsets, end_offsets
from chaos.workload import Rec

_START = re.compile(
    rb"source partition (?P<topic>\S+)/(?P<p>\d+) starts at offset (?P<o>\d+) \((?P<why>[^)]*)\)"
)
MAX_EXAMPLES = 10


@dataclass
class Durable:
    """What was durable right after a kill."""

    versions: dict[str, int]
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


class Invariants:
    """Captures durable state after kills and checks offsets against it."""

    def __init__(
        self,
        *,
        es: Any,
        bootstrap: str,
        topic: str,
        index: str,
        dlq_topic: str,
        group: str,
        recs: list[Rec],
    ) -> None:
        from confluent_kafka import Consumer

        self._es = es
        self._bootstrap = bootstrap
        self._topic = topic
        self._index = index
        self._dlq_topic = dlq_topic
        self._group = group
        self._recs = recs
        self._parts: dict[int, list[int]] = {}
        for i in sorted(range(len(recs)), key=lambda j: (recs[j].partition, recs[j].offset)):
            self._parts.setdefault(recs[i].partition, []).append(i)
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

    def _doc_id(self, rec: Rec) -> str:
        if rec.key is None:
            return f"{self._topic}-{rec.partition}-{rec.offset}"
        return rec.key.decode()

    def capture(self) -> Durable:
        """Document versions, dead-letter coordinates and commits, as they are now."""
        from confluent_kafka import TopicPartition
        from elasticsearch.helpers import scan

        versions: dict[str, int] = {}
        if self._es.indices.exists(index=self._index):
            self._es.indices.refresh(index=self._index)
            for hit in scan(
                self._es,
                index=self._index,
                query={"query": {"match_all": {}}, "_source": False},
                size=5000,
                version=True,
            ):
                versions[hit["_id"]] = hit["_version"]
        ends = end_offsets(self._bootstrap, self._dlq_topic)
        todo = {p: end for p, end in ends.items() if end > self._dlq_pos.get(p, 0)}
        if todo:
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
        committed = committed_offsets(self._bootstrap, self._group, self._topic)
        return Durable(versions, set(self._dead), committed)

    def check(self, durable: Durable, offsets: dict[int, int], what: str) -> int:
        """Records below `offsets` that were not durable; each is noted as an example."""
        missing = 0
        for p, upto in offsets.items():
            self.found.checked += upto > 0
            last: dict[str, int] = {}
            for i in self._parts.get(p, ()):
                rec = self._recs[i]
                if rec.offset >= upto:
                    break
                if rec.bad:
                    if (p, rec.offset) not in durable.dead:
                        missing += 1
                        self.found.note(
                            f"{what}: partition {p} at {upto}, but bad record {rec.offset} "
                            f"({rec.kind}) is not in the dead-letter topic"
                        )
                elif rec.value is not None:
                    last[self._doc_id(rec)] = rec.offset
            for doc_id, offset in last.items():
                if durable.versions.get(doc_id, -1) < offset:
                    missing += 1
                    self.found.note(
                        f"{what}: partition {p} at {upto}, but document {doc_id!r} is at "
                        f"version {durable.versions.get(doc_id)} < {offset}"
                    )
        return missing

    def after_kill(self) -> Durable:
        """Capture durable state and check the committed offsets against it."""
        durable = self.capture()
        group_offsets = {p: c for p, c in durable.committed.items() if c > 0}
        self.found.commit_ahead += self.check(durable, group_offsets, "committed offset")
        return durable

    def on_restart(self, durable: Durable, logs: Iterable[Path]) -> None:
        """Check the offsets the restarted flow started from (parsed from its logs)."""
        starts: dict[int, int] = {}
        for log in logs:
            try:
                data = log.read_bytes()
            except OSError:
                continue
            for m in _START.finditer(data):
                if m["topic"].decode() == self._topic:
                    starts[int(m["p"])] = int(m["o"])
        self.found.resume_ahead += self.check(durable, starts, "restart offset")
