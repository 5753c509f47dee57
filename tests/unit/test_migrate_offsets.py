"""`es-sink migrate offsets` without Kafka: where the flow starts a partition the connector
never committed, and the metadata a copied commit carries (the copy itself, and its
refusals, run against a real Connect worker in tests/integration/test_migrate_connect.py)."""

from __future__ import annotations

from flows.cli.migrate_offsets import Change, _auto, metadata
from flows.config import Settings
from flows.fencing import Owner, metadata_fields


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


def test_a_copied_commit_names_no_owner_and_keeps_the_partition_count() -> None:
    s = settings()
    text = metadata(s, "es-sink-orders", "connect-orders", 4)
    assert text == "es-sink partitions=4 migrated-from=connect-orders"
    assert metadata_fields(text)["partitions"] == "4"
    assert Owner.parse(text) is None  # the flow's next instance waits for nobody
    assert metadata(s, "connect-orders", "es-sink-orders", 4) == ""  # Kafka Connect's own


def test_the_json_shape_of_a_change() -> None:
    change = Change("orders", 0, 0, 40, 30, None, 30, "committed")
    assert change.as_json() == {
        "topic": "orders", "partition": 0, "source": 30, "from": None, "to": 30,
        "start": "committed", "low": 0, "end": 40, "note": "",
    }  # fmt: skip
