"""`es-sink migrate offsets` without Kafka: where the flow starts a partition the connector
never committed, and the metadata a copied commit carries (the copy itself, and its
refusals, run against a real Connect worker in tests/integration/test_migrate_connect.py)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from flows.cli import migrate_offsets as offsets_cli
from flows.cli.common import Problem
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


class _Failing:
    """A describe_consumer_groups future that fails with `code`."""

    def __init__(self, code: int) -> None:
        self.code = code

    def result(self, timeout: float) -> None:
        raise KafkaException(KafkaError(self.code))


class _Admin:
    def __init__(self, code: int) -> None:
        self.code = code

    def describe_consumer_groups(self, groups: list[str]) -> dict[str, _Failing]:
        return {g: _Failing(self.code) for g in groups}


def test_a_group_that_cannot_be_described_refuses_the_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Not knowing whether the connector's group has members is no proof that it has none.
    s = settings()
    monkeypatch.setattr(offsets_cli, "_holders", lambda *a: "")
    monkeypatch.setattr(
        offsets_cli.common, "admin", lambda _s: _Admin(KafkaError.GROUP_AUTHORIZATION_FAILED)
    )
    with pytest.raises(Problem) as caught:
        offsets_cli.refusal(s, "connect-orders", "es-sink-orders", [], 0)
    message = str(caught.value)
    assert message.startswith("--from-group: cannot tell whether group connect-orders has members")
    assert "\n" not in message
    # a group Kafka says does not exist has no member
    monkeypatch.setattr(
        offsets_cli.common, "admin", lambda _s: _Admin(KafkaError.GROUP_ID_NOT_FOUND)
    )
    monkeypatch.setattr(offsets_cli, "_commits", lambda *a: {})
    assert offsets_cli.refusal(s, "connect-orders", "es-sink-orders", [], 0) is None


class _Silent:
    """A describe whose answer never comes: the future's wait times out."""

    asked = 0

    def describe_consumer_groups(self, groups: list[str]) -> dict[str, Any]:
        _Silent.asked += 1

        class Never:
            def result(self, timeout: float) -> Any:
                raise TimeoutError

        return {g: Never() for g in groups}


def test_a_group_that_never_answers_is_asked_again_then_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = settings()
    monkeypatch.setattr(offsets_cli, "_holders", lambda *a: "")
    monkeypatch.setattr(offsets_cli.common, "admin", lambda _s: _Silent())
    with pytest.raises(Problem) as caught:
        offsets_cli.refusal(s, "connect-orders", "es-sink-orders", [], 0)
    message = str(caught.value)
    assert message.startswith("--from-group: cannot tell whether group connect-orders has members")
    assert "no answer within" in message and "\n" not in message
    assert _Silent.asked == 3


def test_offsets_that_moved_between_the_plan_and_the_probe_are_not_copied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The plan read 30; the connector's last commit (41) landed before the probe began, so
    # the probe sees no movement: what it saw settled is 41, not the 30 the plan would copy.
    s = settings()
    monkeypatch.setattr(offsets_cli, "_members", lambda *a: None)
    monkeypatch.setattr(offsets_cli, "_holders", lambda *a: "")
    monkeypatch.setattr(offsets_cli.time, "sleep", lambda _s: None)
    settled = {("connect-orders", "orders", 0): 41, ("es-sink-orders", "orders", 0): None}
    monkeypatch.setattr(offsets_cli, "_commits", lambda *a: dict(settled))
    planned = [Change("orders", 0, 0, 50, 30, None, 30, "committed")]
    why = offsets_cli.refusal(s, "connect-orders", "es-sink-orders", planned, 12.0)
    assert why is not None
    assert "moved after they were read (connect-orders orders/0)" in why
    # the same read as the plan's: copied
    fresh = [Change("orders", 0, 0, 50, 41, None, 41, "committed")]
    assert offsets_cli.refusal(s, "connect-orders", "es-sink-orders", fresh, 12.0) is None
    # without a probe the commits are still read once more and compared
    assert offsets_cli.refusal(s, "connect-orders", "es-sink-orders", planned, 0) is not None
