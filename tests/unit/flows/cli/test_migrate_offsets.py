"""`es-sink migrate offsets` without Kafka: where the flow starts a partition the connector
never committed, and the metadata a copied commit carries (the copy itself, and its
refusals, run against a real Connect worker in tests/integration/test_migrate_connect.py)."""

from __future__ import annotations

from flows.cli.migrate_offsets import Change, _auto, metadata
from flows.config import Settings
from flows.kafka.fencing import Owner, Reset, metadata_fields


def settings(**env: str) -> Settings:
    return Settings.load({"KAFKA_TOPICS": "orders", "KAFKA_GROUP_ID": "es-sink-orders", **env})


def test_a_partition_never_committed_starts_per_auto_offset_reset() -> None:
    earliest = settings()
    start, why = _auto(earliest, ("orders", 3), {("orders", 0)}, "connect-orders")
    assert start == "earliest"
    assert "never committed by connect-orders" in why
    latest = settings(KAFKA_AUTO_OFFSET_RESET="latest")
    assert _auto(latest, ("orders", 0), set(), "connect-orders")[0] == "latest"
    # once the group has read other partitions, the flow takes it for one added since
    start, why = _auto(latest, ("orders", 3), {("orders", 0)}, "connect-orders")
    assert start == "earliest"
    assert "not latest" in why


def test_a_copied_commit_is_a_resets_naming_no_owner() -> None:
    s = settings()
    mark = Reset(1_767_225_600_000, "ops1")
    text = metadata(s, "es-sink-orders", "connect-orders", 4, "", mark)
    assert text == (
        "es-sink partitions=4 reset-by=es-sink reset-at=1767225600000 reset-host=ops1 "
        "migrated-from=connect-orders"
    )
    assert metadata_fields(text)["partitions"] == "4"
    assert Owner.parse(text) is None  # the flow's next instance waits for nobody
    assert Reset.parse(text) == mark  # and reads from it even over a recovery snapshot
    # over an earlier owner of the flow's group: its generation kept, its owner not
    earlier = "es-sink partitions=4 owner=5f0c9a1e2b7d gen=3 since=1 lease=80 host=h pid=7 released"
    again = metadata(s, "es-sink-orders", "connect-orders", 4, earlier, mark)
    assert metadata_fields(again)["gen"] == "3"
    assert Owner.parse(again) is None
    assert metadata(s, "connect-orders", "es-sink-orders", 4, earlier, mark) == ""  # Connect's


def test_the_json_shape_of_a_change() -> None:
    change = Change("orders", 0, 0, 40, 30, None, 30, "committed")
    assert change.as_json() == {
        "topic": "orders", "partition": 0, "source": 30, "from": None, "to": 30,
        "start": "committed", "low": 0, "end": 40, "note": "",
    }  # fmt: skip
