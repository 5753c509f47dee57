"""The ground truth: which states of each document the records allow, between two offsets.

Per document id, the good records that change it, in offset order (its *ops*): an index
(the document becomes the record's JSON, `_version` = its `seq` under VERSION=header) or,
with ON_NULL_VALUE=delete, a tombstone (the document disappears). Bad records and ignored
tombstones change nothing. A document's ops all lie on one partition (a key never spans
partitions, checked here; null-key documents are one record each).

`allowed(doc_id, low, high)` answers what the document may look like when everything of its
partition below `low` is known durable and nothing at or past `high` may have been
written: the state after any op from the last one below `low` up to `high` (absent if no
op lies below `low`). The final audit of a completed run uses low = high = end offset
(exactly the last op); the check at a kill uses high = infinity (at least the last op
below the committed offset); ERRORS_TOLERANCE=none uses high = the first bad record.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field

from chaos.workload import Rec

INFINITY = 2**63


class GroundTruthError(Exception):
    """The workload does not allow a ground truth (a key on two partitions)."""


@dataclass
class Allowed:
    """States a document may be in: these records' JSON, or absent."""

    recs: set[int]
    absent: bool


@dataclass
class Truth:
    """Ops per document, bad records and coordinates of one topic's records."""

    topic: str
    recs: list[Rec]
    deletes: bool
    ops: dict[str, list[int]] = field(default_factory=dict)
    """document id -> indices into `recs` of its ops, by offset"""
    ids_by_partition: dict[int, list[str]] = field(default_factory=dict)
    by_partition: dict[int, list[int]] = field(default_factory=dict)
    """partition -> indices into `recs`, by offset"""
    bad: dict[tuple[int, int], int] = field(default_factory=dict)
    """(partition, offset) of every bad record -> index into `recs`"""
    good: set[tuple[int, int]] = field(default_factory=set)
    """(partition, offset) of every record that must not be dead-lettered"""
    first_bad: dict[int, int] = field(default_factory=dict)
    """partition -> offset of its earliest bad record"""

    def doc_id(self, rec: Rec) -> str:
        if rec.key is None:
            return f"{self.topic}-{rec.partition}-{rec.offset}"
        return rec.key.decode()

    def partition_of(self, doc_id: str) -> int:
        return self.recs[self.ops[doc_id][0]].partition

    def allowed(self, doc_id: str, low: int, high: int) -> Allowed:
        ops = self.ops[doc_id]
        offsets = [self.recs[i].offset for i in ops]
        below = bisect_left(offsets, low)  # ops[:below] lie below `low`
        window = [i for i in ops[max(below - 1, 0) :] if self.recs[i].offset < high]
        states = {i for i in window if self.recs[i].value is not None}
        absent = below == 0 or any(self.recs[i].value is None for i in window)
        return Allowed(states, absent)

    def writes(self, doc_id: str, i: int) -> int:
        """How many writes the document has had when record `i` (one of its ops) wrote it,
        counting from its last deletion: what a counting script leaves."""
        count = 0
        for j in self.ops[doc_id]:
            count = 0 if self.recs[j].value is None else count + 1
            if j == i:
                return count
        msg = f"record {i} is not an op of {doc_id!r}"
        raise ValueError(msg)

    def last(self, doc_id: str) -> int:
        """Index of the document's last op."""
        return self.ops[doc_id][-1]


def build(
    topic: str,
    recs: list[Rec],
    *,
    deletes: bool,
    gone: Callable[[Rec], bool] = lambda r: False,
) -> Truth:
    """Index `recs` (offsets filled in); raises GroundTruthError if a key spans partitions.
    `gone`: records the broker deleted before anyone read them, as if never produced."""
    truth = Truth(topic, recs, deletes)
    owner: dict[bytes, int] = {}
    for i in sorted(range(len(recs)), key=lambda j: (recs[j].partition, recs[j].offset)):
        r = recs[i]
        if gone(r):
            continue
        truth.by_partition.setdefault(r.partition, []).append(i)
        coords = (r.partition, r.offset)
        # Empty keys only occur in bad records (an empty document id): no document.
        if r.key and owner.setdefault(r.key, r.partition) != r.partition:
            msg = f"key {r.key!r} is on partitions {owner[r.key]} and {r.partition}"
            raise GroundTruthError(msg)
        if r.bad:
            truth.bad[coords] = i
            truth.first_bad.setdefault(r.partition, r.offset)
            continue
        truth.good.add(coords)
        if r.value is None and (not deletes or r.key is None):
            continue  # an ignored tombstone: the document keeps its last write
        doc_id = truth.doc_id(r)
        if doc_id not in truth.ops:
            truth.ids_by_partition.setdefault(r.partition, []).append(doc_id)
        truth.ops.setdefault(doc_id, []).append(i)
    return truth
