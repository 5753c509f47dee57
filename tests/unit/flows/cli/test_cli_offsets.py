"""`es-sink offsets reset`: who holds the partitions it would move, from the metadata of
the group's commits (the broker and a running flow: tests/integration/test_cli_offsets.py)."""

from __future__ import annotations

import dataclasses

import pytest

from flows.cli.common import PartitionOffsets
from flows.cli.offsets import _ownerless, held
from flows.kafka import fencing

NOW = 1_767_225_600_000


def _part(partition: int, metadata: str, committed: int | None = 5) -> PartitionOffsets:
    return PartitionOffsets("orders", partition, 0, 10, committed, metadata)


def test_an_owner_that_runs_here_or_committed_lately_holds_its_partitions() -> None:
    me = dataclasses.replace(fencing._me(), token="aaa", gen=2, lease_s=80.0, at_ms=NOW)
    elsewhere = dataclasses.replace(me, token="bbb", host="b", node="other", at_ms=NOW - 5000)
    gone = dataclasses.replace(elsewhere, token="ccc", at_ms=NOW - 4_000_000)
    released = dataclasses.replace(me, token="ddd", released=True)
    reset = fencing.reset_metadata(f"es-sink {me.words()}", fencing.Reset(NOW, "ops"))
    parts = [
        _part(0, f"es-sink partitions=6 {me.words()}"),
        _part(1, f"es-sink partitions=6 {elsewhere.words()}"),
        _part(2, f"es-sink partitions=6 {me.words()}"),
        _part(3, f"es-sink partitions=6 {gone.words()}"),
        _part(4, f"es-sink partitions=6 {released.words()}"),
        _part(5, reset),
        _part(6, f"es-sink partitions=6 {me.words()}", committed=None),
    ]
    first, second = held(parts, NOW)
    assert first.startswith("orders/0, orders/2 are held by instance aaa (host ")
    assert first.endswith(": its process runs on this host")
    assert second.startswith("orders/1 is held by instance bbb (host b, ")
    assert ": it has not released it and committed last at 2025-12-31T23:59:55+00:00" in second
    assert held(parts[3:], NOW) == []


def test_only_partitions_whose_commit_names_no_owner_nor_a_reset_are_probed() -> None:
    me = dataclasses.replace(fencing._me(), gen=1, lease_s=80.0)
    reset = fencing.reset_metadata("", fencing.Reset(NOW, "ops"))
    parts = [
        _part(0, f"es-sink {me.words()}"),
        _part(1, reset),
        _part(2, "es-sink partitions=3"),  # FENCING=false
        _part(3, "", committed=None),
    ]
    assert [p.partition for p in _ownerless(parts)] == [2, 3]


def test_force_waits_for_the_holder_to_follow_and_names_one_that_wrote_over_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from flows.cli import common, offsets
    from flows.config import Settings

    mark = fencing.Reset(NOW, "ops")
    me = dataclasses.replace(fencing._me(), token="aaa", gen=2, lease_s=5.0)
    reset = fencing.reset_metadata(f"es-sink {me.words()}", mark)
    followed = f"es-sink {mark.words()} {me.words()}"
    answers = [[_part(0, reset, 0)], [_part(0, followed, 0)]]
    monkeypatch.setattr(common, "offsets", lambda *a: answers.pop(0))
    monkeypatch.setattr(offsets.time, "sleep", lambda s: None)
    settings = Settings.load({"KAFKA_TOPICS": "orders", "KAFKA_GROUP_ID": "g"})
    held_by = [(me, "its process runs on this host", [_part(0, f"es-sink {me.words()}")])]
    offsets.followed(settings, held_by, mark)
    assert (
        "instance aaa reads orders/0 from the new offset (committed 0)" in capsys.readouterr().err
    )

    answers = [[_part(0, f"es-sink {me.words()}", 10)]]  # its position, written over the reset
    with pytest.raises(common.Problem, match=r"aaa .* committed orders/0 at 10 over the reset"):
        offsets.followed(settings, held_by, mark)
