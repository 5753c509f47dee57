"""The chaos ground truth for keys that partitions added to the topic moved (`grow` mode):
a moved document's writes in produce order, the final audit's newest write, what the checks
at kills allow, and that a document on one partition is judged by its offset order alone."""

from __future__ import annotations

import random
from bisect import bisect_left

import pytest

from tools.chaos.grow import Moves
from tools.chaos.invariants import Durable, Invariants
from tools.chaos.truth import INFINITY, GroundTruthError, Truth, build
from tools.chaos.workload import Rec, generate, growth, partition_for


def _moved() -> list[Rec]:
    """Key "m" on partition 0 at offsets 0 and 2, then (after partitions were added at
    index 4) on partition 4 at offsets 0 and 1; key "s" stays on partition 0."""
    return [
        Rec("good", b"m", b'{"seq":0}', None, 0, 0),
        Rec("good", b"s", b'{"seq":1}', None, 0, 1),
        Rec("good", b"m", b'{"seq":2}', None, 0, 2),
        Rec("good", b"s", b'{"seq":3}', None, 0, 3),
        Rec("good", b"m", b'{"seq":4}', None, 4, 0),
        Rec("good", b"s", b'{"seq":5}', None, 0, 4),
        Rec("good", b"m", b'{"seq":6}', None, 4, 1),
    ]


def test_a_moved_key_has_its_writes_in_produce_order_and_ends_at_its_newest() -> None:
    truth = build("t", _moved(), deletes=False, grown_at=4)
    assert truth.moved == {"m"}
    assert truth.ops == {"m": [0, 2, 4, 6], "s": [1, 3, 5]}
    assert truth.partitions("m") == [0, 4]
    assert truth.ids_by_partition == {0: ["m", "s"], 4: ["m"]}
    ends = {0: 5, 4: 2}
    assert truth.allowed("m", ends, ends).recs == {6}
    assert truth.allowed("s", ends, ends).recs == {5}
    assert not truth.allowed("m", ends, ends).absent


def test_a_key_on_two_partitions_without_a_move_is_refused() -> None:
    recs = _moved()
    with pytest.raises(GroundTruthError):
        build("t", recs, deletes=False)  # no partitions were added
    with pytest.raises(GroundTruthError):
        build("t", recs, deletes=False, grown_at=5)  # "m" moved before they were
    recs[6].partition = 5  # on two partitions after they were added
    with pytest.raises(GroundTruthError):
        build("t", recs, deletes=False, grown_at=4)


def test_kill_checks_of_a_moved_document_use_the_offsets_of_both_partitions() -> None:
    truth = build("t", _moved(), deletes=False, grown_at=4)
    # Old partition committed past offset 2, new one nothing: at least seq 2, any later.
    assert truth.allowed("m", {0: 3}, INFINITY).recs == {2, 4, 6}
    assert not truth.allowed("m", {0: 3}, INFINITY).absent
    # The new partition committed past its first write: the old ones are history.
    assert truth.allowed("m", {0: 5, 4: 1}, INFINITY).recs == {4, 6}
    # Nothing committed below any of its writes: absent or anything.
    assert truth.allowed("m", {0: 0}, INFINITY).absent
    inv = Invariants(
        es=None, bootstrap="127.0.0.1:1", truth=truth, index="t", dlq_topic="d", group="g"
    )
    try:
        assert inv.check(Durable({"m": 2, "s": 3}, set(), {}), {0: 4}, "ok") == 0
        assert inv.check(Durable({"m": 6, "s": 3}, set(), {}), {0: 4}, "new read") == 0
        assert inv.check(Durable({"m": 0, "s": 3}, set(), {}), {0: 4}, "lost") == 1
        # An older write landed after a committed newer one: flagged.
        assert inv.check(Durable({"m": 2, "s": 5}, set(), {}), {0: 5, 4: 1}, "order") == 1
        assert inv.check(Durable({"m": 4, "s": 5}, set(), {}), {0: 5, 4: 1}, "ok") == 0
        assert "document 'm' is at record 2" in inv.found.examples[-1]
    finally:
        inv.close()


def _offset_order_allowed(truth: Truth, doc_id: str, low: int, high: int) -> tuple[set[int], bool]:
    """`Truth.allowed` of a document on one partition, written independently: from the last
    op below `low`, by bisecting its offsets, to the last below `high`."""
    ops = truth.ops[doc_id]
    offsets = [truth.recs[i].offset for i in ops]
    below = bisect_left(offsets, low)
    window = [i for i in ops[max(below - 1, 0) :] if truth.recs[i].offset < high]
    states = {i for i in window if truth.recs[i].value is not None}
    absent = below == 0 or any(truth.recs[i].value is None for i in window)
    return states, absent


def test_documents_on_one_partition_are_judged_by_their_offset_order() -> None:
    recs = generate(3000, seed=7, partitions=4, tombstone_share=0.05)
    for i, rec in enumerate(recs):
        rec.offset = sum(r.partition == rec.partition for r in recs[:i])
    truth = build("t", recs, deletes=True)
    assert not truth.moved
    rng = random.Random(3)
    for doc_id in sorted(truth.ops):
        p = truth.partitions(doc_id)[0]
        for _ in range(3):
            low = rng.randrange(0, 900)
            high = rng.choice([INFINITY, low, low + rng.randrange(0, 200)])
            got = truth.allowed(doc_id, low, high)
            assert (got.recs, got.absent) == _offset_order_allowed(truth, doc_id, low, high)
            got = truth.allowed(doc_id, {p: low}, {p: high})
            assert (got.recs, got.absent) == _offset_order_allowed(truth, doc_id, low, high)


def test_growth_places_keys_by_hash_over_the_new_total_and_moves_are_counted() -> None:
    first = generate(2000, seed=11, partitions=4)
    more = growth(first, 1000, 11, 4, 4)
    old = {r.key: r.partition for r in first if r.key and r.kind == "good"}
    moved = 0
    for r in more:
        if r.key and r.kind == "good":
            assert r.partition == partition_for(r.key, 8)
            if r.key in old:
                assert r.partition in (old[r.key], old[r.key] + 4)
                moved += r.partition != old[r.key]
    assert moved > 0
    recs = first + more
    for i, rec in enumerate(recs):
        rec.offset = sum(r.partition == rec.partition for r in recs[:i])
    truth = build("t", recs, deletes=False, grown_at=len(first))
    assert truth.moved
    ends = {p: sum(r.partition == p for r in first) for p in range(4)}
    read = Moves.of(truth, 4, dict(ends), ends)
    assert (read.backlog, read.moved_unread) == (0, 0)
    assert read.keys_moved == len(truth.moved) and read.newest_new >= read.keys_moved
    unread = Moves.of(truth, 4, dict.fromkeys(range(4), 0), ends)
    assert unread.backlog == len(first) and unread.moved_unread == len(truth.moved)
