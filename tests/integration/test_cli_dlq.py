"""`es-sink dlq inspect` and `dlq replay` against the real broker, node and flow: a mix of
deserialize, transform and mapping failures is grouped right; after the mapping is fixed a
replay indexes every replayable record exactly once and sends the rest back with the
replay-count header; an interrupted replay resumes where it stopped."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.flows import consume_all, create_topic, produce, run_cli, run_flow

pytestmark = pytest.mark.integration

FT = "tests.integration.feature_transforms:fail_on_boom"
MAPPING = {
    "dynamic": "strict",
    "properties": {"id": {"type": "long"}, "price": {"type": "long"}, "boom": {"type": "boolean"}},
}


def _scenario(services: Any, names: Any, es: Any) -> tuple[str, str, dict[str, str]]:
    """A flow run that dead-letters 4 mapping, 3 + 1 deserialize and 2 transform failures
    among 10 good records."""
    topic, dlq = names("dlq-src"), names("dlq-dlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)
    es.indices.create(index=topic, mappings=MAPPING)
    good = [(f"g{i}".encode(), json.dumps({"id": i, "price": i}).encode()) for i in range(10)]
    mapping = [
        (f"m{i}".encode(), json.dumps({"id": 30 + i, "color": "red" * (i + 1)}).encode())
        for i in range(4)
    ]
    bad_json = [(f"d{i}".encode(), b"{not json") for i in range(3)] + [(b"d9", b"[1, 2]")]
    boom = [(f"b{i}".encode(), json.dumps({"id": 20 + i, "boom": True}).encode()) for i in range(2)]
    produce(services.kafka, topic, [*good, *mapping[:2], *bad_json, *boom, *mapping[2:]])
    env = {
        "KAFKA_TOPICS": topic,
        "DLQ_TOPIC": dlq,
        "ERRORS_TOLERANCE": "all",
        "TRANSFORMS": FT,
        "KAFKA_GROUP_ID": names("dlq-group"),
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output[-3000:]
    return topic, dlq, env


def test_inspect_groups_the_failures_and_replay_after_the_fix(services, names, es) -> None:
    topic, dlq, env = _scenario(services, names, es)

    run = run_cli(services, env, "dlq", "inspect", "--json")
    assert run.exit_code == 0, run.stderr
    found = run.json()
    assert found["scanned"] == found["matched"] == 10
    groups = [(g["stage"], g["error_class"], g["count"]) for g in found["groups"]]
    assert groups == [
        ("index", "elasticsearch.strict_dynamic_mapping_exception", 4),
        ("deserialize", "flows.decode.DecodeError", 3),
        ("transform", "builtins.ValueError", 2),
        ("deserialize", "flows.decode.DecodeError", 1),
    ]
    mapping = found["groups"][0]
    assert "[color]" in mapping["reason"] and mapping["topics"] == {topic: 4}
    offsets = {f"{topic}/0@{o}" for o in (10, 11, 18, 19)}
    assert {mapping["first"]["source"], mapping["last"]["source"]} <= offsets
    assert mapping["first"]["at"] <= mapping["last"]["at"]
    assert mapping["sample"]["key"] in ("m0", "m1", "m2", "m3")
    assert found["groups"][2]["reason"] == "boom in record N"

    only = run_cli(services, env, "dlq", "inspect", "--json", "--stage", "transform").json()
    assert [g["count"] for g in only["groups"]] == [2] and only["scanned"] == 10
    grep = run_cli(services, env, "dlq", "inspect", "--json", "--grep", "not json").json()
    assert [g["count"] for g in grep["groups"]] == [3]
    none = run_cli(services, env, "dlq", "inspect", "--json", "--topic", "other").json()
    assert none["groups"] == [] and none["matched"] == 0
    table = run_cli(services, env, "dlq", "inspect")
    assert table.exit_code == 0
    assert "10 of 10 dead letters (10 source records) in 4 groups" in table.stdout
    print(table.stdout)

    # A dry run writes nothing and commits nothing.
    dry = run_cli(services, env, "dlq", "replay", "--dry-run", "--json")
    summary = "dry-run: unverified=4 failed=6 skipped=0 duplicates=0"
    assert dry.json()["summary"] == summary, dry.stdout
    assert dry.json()["replayed"] == 0  # Elasticsearch was not asked
    assert len(consume_all(services.kafka, dlq)) == 10

    # The fix: the field the strict mapping lacked.
    es.indices.put_mapping(index=topic, properties={"color": {"type": "keyword"}})
    replay = run_cli(services, env, "dlq", "replay")
    assert replay.exit_code == 1  # records failed again: a problem found
    assert replay.stdout.strip() == "replayed=4 failed=6 skipped=0 duplicates=0"
    print(replay.stdout)
    es.indices.refresh(index=topic)
    for i in range(4):
        doc = es.get(index=topic, id=f"m{i}")
        assert doc["_version"] == 1 and doc["_source"]["color"] == "red" * (i + 1)
    assert es.count(index=topic)["count"] == 14
    letters = consume_all(services.kafka, dlq)
    assert len(letters) == 16
    again = [dict(m.headers()) for m in letters[10:]]
    assert all(h["__es_sink.replay.count"] == b"1" for h in again)
    stages = sorted(h["__connect.errors.stage"].decode() for h in again)
    assert stages == ["deserialize"] * 4 + ["transform"] * 2
    assert sorted(m.key() for m in letters[10:]) == [b"b0", b"b1", b"d0", b"d1", b"d2", b"d9"]

    # Run again: the replay group has committed everything, so only the 6 that failed in
    # the replay are read, and they fail once more (replay count 2).
    second = run_cli(services, env, "dlq", "replay", "--json").json()
    assert second["summary"] == "replayed=0 failed=6 skipped=0 duplicates=0"
    last = [dict(m.headers()) for m in consume_all(services.kafka, dlq)[16:]]
    assert [h["__es_sink.replay.count"] for h in last] == [b"2"] * 6


def test_an_interrupted_replay_resumes(services, names, es) -> None:
    topic, _, env = _scenario(services, names, es)
    es.indices.put_mapping(index=topic, properties={"color": {"type": "keyword"}})
    first = run_cli(services, env, "dlq", "replay", "--stage", "index", "--limit", "3", "--json")
    assert first.exit_code == 0
    one = first.json()
    assert (one["replayed"], one["failed"]) == (3, 0)
    rest = run_cli(services, env, "dlq", "replay", "--stage", "index", "--json").json()
    assert (rest["replayed"], rest["failed"]) == (1, 0)
    assert one["skipped"] + rest["skipped"] == 6  # the other stages, each read once
    assert rest["group"] == one["group"] and ".replay." in rest["group"]
    es.indices.refresh(index=topic)
    assert [es.get(index=topic, id=f"m{i}")["_version"] for i in range(4)] == [1, 1, 1, 1]
    # Nothing else is left for that selection; the unfiltered replay has its own group.
    done = run_cli(services, env, "dlq", "replay", "--stage", "index", "--json").json()
    assert done["summary"] == "replayed=0 failed=0 skipped=0 duplicates=0"
    everything = run_cli(services, env, "dlq", "replay", "--dry-run", "--json").json()
    assert everything["summary"] == "dry-run: unverified=4 failed=6 skipped=0 duplicates=0"


def test_replay_to_topic_reproduces_the_originals(services, names, es) -> None:
    topic, _, env = _scenario(services, names, es)
    run = run_cli(services, env, "dlq", "replay", "--stage", "deserialize", "--to-topic")
    assert run.stdout.strip() == "replayed=4 failed=0 skipped=6 duplicates=0", run.stderr
    tail = consume_all(services.kafka, topic)[20:]
    assert [(m.key(), m.value()) for m in tail] == [
        (b"d0", b"{not json"), (b"d1", b"{not json"), (b"d2", b"{not json"), (b"d9", b"[1, 2]")
    ]  # fmt: skip
    assert all(not (m.headers() or []) for m in tail)
