"""`tools.chaos.compare`'s pure parts: the faults and when they fire, the flow's settings, the
count of writes beyond one per record, and the printed table."""

from __future__ import annotations

import random

import pytest

from tools.chaos import compare
from tools.chaos.compare import Outcome


def test_fault_plan_draws_every_fault_once_for_all_systems() -> None:
    plan = compare.fault_plan(4, 2, random.Random(7))
    assert sorted(f.kind for f in plan) == ["kill"] * 4 + ["outage"] * 2
    assert plan == compare.fault_plan(4, 2, random.Random(7))
    for f in plan:
        assert 0 <= f.delay_s <= 0.3
        if f.kind == "outage":
            assert f.cut in ("refuse", "blackhole")
            assert compare.OUTAGE_S[0] <= f.outage_s <= compare.OUTAGE_S[1]
        else:
            assert f.cut == "" and f.outage_s == 0
    text = compare.describe(plan)
    assert text.count("kill") == 4 and text.count("outage(") == 2


def test_thresholds_spread_the_faults_evenly() -> None:
    assert compare.thresholds(70, 6) == [10, 20, 30, 40, 50, 60]
    assert compare.thresholds(100, 0) == []


def test_ours_runs_as_a_service_with_the_key_as_id() -> None:
    s = compare.ours_settings(bootstrap="b:1", es_url="http://p:2", topic="t", group="g", index="i")
    assert s["DOC_ID"] == "key"
    assert s["KAFKA_STOP_AT_END"] == "false"
    assert (s["ES_HOSTS"], s["ES_INDEX"], s["KAFKA_TOPICS"], s["KAFKA_GROUP_ID"]) == (
        "http://p:2", "i", "t", "g"
    )  # fmt: skip
    # every other setting at its default
    assert "VERSION" not in s and "BULK_MAX_ACTIONS" not in s


def test_rewrites_count_versions_beyond_the_writes_of_each_key() -> None:
    hits = {"a": {"_version": 5}, "b": {"_version": 2}, "c": {"_version": 1}, "x": {}}
    writes = {"a": 3, "b": 2, "c": 4}
    # a: 2 more than its 3 writes; b: exact; c: fewer (older writes never indexed): 0
    assert compare.rewrites(hits, writes.get) == 2


def test_table_has_a_row_per_system_and_says_which_failed() -> None:
    ok = Outcome("bento", records=1000, documents=250, lost=12, stale=3, kills=4, outages=2)
    ok.completed = True
    text = compare.format_table([ok, Outcome("quix", error="TimeoutError: late\nmore")])
    lines = text.splitlines()
    assert lines[0].split()[:6] == ["system", "records", "docs", "lost", "stale", "dup"]
    assert lines[2].split()[:6] == ["bento", "1,000", "250", "12", "3", "0"]
    assert lines[3] == "quix    FAILED: TimeoutError: late"


def test_unknown_system_is_refused() -> None:
    with pytest.raises(SystemExit):
        compare.parse_args(["--systems", "ours,kafka-connect"])
