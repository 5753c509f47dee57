"""The ground truth: which states of each document the records allow, between two offsets.

Per document id, the good records that change it (its *ops*): an index (the document
becomes the record's JSON, `_version` = its `seq` under VERSION=header) or, with
ON_NULL_VALUE=delete, a tombstone (the document disappears). Bad records and ignored
tombstones change nothing. Null-key documents are one record each.

A key lives on one partition, its ops in offset order, except where partitions were added
(`grown_at`): from the first record produced after that on, a key-hash partitioner may
put the key on another partition. Such a *moved* document has ops on two partitions, all
those on the old one produced before the partitions were added; its ops are in produce
order (the order of `recs`), so its last op is its newest write. `build` checks this
shape (GroundTruthError: a key on two partitions other than by a move at `grown_at`).

`allowed(doc_id, low, high)` answers what the document may look like when everything of a
partition below its `low` offset is known durable and nothing at or past its `high` may
have been written: the state after any op from the last one below its partition's `low`
(in the order above) on, up to those below their partition's `high`; absent too if no op
lies below `low`. For a document on one partition that is its offset order. For a moved
one it leans on what the flow promises for added partitions: a new partition is read only
once the older ones were committed to their end, so an op of the new partition below its
`low` follows every op of the old one, and only the new partition's later ops remain;
with none below it, the old partition's `low` decides and any op of the new one may have
landed. The final audit of a completed run uses low = high = end offset (exactly the last
op, the newest write); the check at a kill uses high = infinity (at least the last op
below the committed offsets); ERRORS_TOLERANCE=none uses high = the first bad record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tools.chaos.workload import Rec

INFINITY = 2**63

Bound = int | Mapping[int, int]
"""An offset for every partition, or one per partition (missing: 0 as `low`, infinity as
`high`, i.e. no claim)."""


class GroundTruthError(Exception):
    """The workload does not allow a ground truth (a key on two partitions, not moved by
    partitions added)."""


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
    """document id -> indices into `recs` of its ops, by offset (a moved document's: by
    produce order)"""
    ids_by_partition: dict[int, list[str]] = field(default_factory=dict)
    """partition -> the documents with ops on it (a moved document under both)"""
    moved: set[str] = field(default_factory=set)
    """Documents whose key moved to another partition when partitions were added, with
    ops on both."""
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

    def partitions(self, doc_id: str) -> list[int]:
        """The partitions of the document's ops, in the order its key was on them."""
        return list(dict.fromkeys(self.recs[i].partition for i in self.ops[doc_id]))

    def allowed(self, doc_id: str, low: Bound, high: Bound) -> Allowed:
        """See the module docstring."""
        recs = self.recs
        ops = self.ops[doc_id]
        below = -1  # the last op below its partition's `low`
        for n, i in enumerate(ops):
            if recs[i].offset < _at(low, recs[i].partition, 0):
                below = n
        window = [i for i in ops[max(below, 0) :] if recs[i].offset < _at(high, recs[i].partition)]
        states = {i for i in window if recs[i].value is not None}
        absent = below < 0 or any(recs[i].value is None for i in window)
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
        """Index of the document's last op (its newest write)."""
        return self.ops[doc_id][-1]


def _at(bound: Bound, partition: int, missing: int = INFINITY) -> int:
    return bound if isinstance(bound, int) else bound.get(partition, missing)


def build(
    topic: str,
    recs: list[Rec],
    *,
    deletes: bool,
    gone: Callable[[Rec], bool] = lambda r: False,
    grown_at: int | None = None,
) -> Truth:
    """Index `recs` (in produce order, offsets filled in). `grown_at`: the index of the
    first record produced after partitions were added, where a key may move to another
    partition (once); GroundTruthError if a key is on two partitions otherwise, or a moved
    key's offsets on a partition disagree with produce order. `gone`: records the broker
    deleted before anyone read them, as if never produced."""
    truth = Truth(topic, recs, deletes)
    owner: dict[tuple[bytes, bool], int] = {}
    for i in sorted(range(len(recs)), key=lambda j: (recs[j].partition, recs[j].offset)):
        r = recs[i]
        if gone(r):
            continue
        truth.by_partition.setdefault(r.partition, []).append(i)
        coords = (r.partition, r.offset)
        # Empty keys only occur in bad records (an empty document id): no document.
        after = grown_at is not None and i >= grown_at
        if r.key and owner.setdefault((r.key, after), r.partition) != r.partition:
            msg = f"key {r.key!r} is on partitions {owner[r.key, after]} and {r.partition}"
            raise GroundTruthError(msg + (" after partitions were added" if after else ""))
        if r.bad:
            truth.bad[coords] = i
            truth.first_bad.setdefault(r.partition, r.offset)
            continue
        truth.good.add(coords)
        if r.value is None and (not deletes or r.key is None):
            continue  # an ignored tombstone: the document keeps its last write
        doc_id = truth.doc_id(r)
        ops = truth.ops.setdefault(doc_id, [])
        if not ops or recs[ops[-1]].partition != r.partition:
            truth.ids_by_partition.setdefault(r.partition, []).append(doc_id)
        if ops and recs[ops[0]].partition != r.partition:
            truth.moved.add(doc_id)
        ops.append(i)
    for doc_id in truth.moved:
        ops = truth.ops[doc_id]
        ops.sort()  # produce order: every old-partition op precedes the move
        offsets: dict[int, int] = {}
        for i in ops:
            r = recs[i]
            if offsets.setdefault(r.partition, r.offset) > r.offset:
                msg = f"key {doc_id!r}: offsets on partition {r.partition} are not in produce order"
                raise GroundTruthError(msg)
            offsets[r.partition] = r.offset
    return truth
