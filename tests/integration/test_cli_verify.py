"""`es-sink verify` against the real broker, node and flow: nothing on an index the flow
wrote; a deleted, a stale, an extra and an undeleted document planted in it are found, and
a dead letter missing from the dead-letter topic is a lost record."""

from __future__ import annotations

import json

import pytest

from tests.support.flows import create_topic, produce, run_cli, run_flow

pytestmark = pytest.mark.integration


def _flow(services, names) -> tuple[str, dict[str, str]]:
    topic, dlq = names("ver"), names("ver-dlq")
    create_topic(services.kafka, topic, 2)
    create_topic(services.kafka, dlq)
    for version in range(3):  # each key written three times: the last one wins
        for p in (0, 1):
            docs = [
                (f"k{p}{i}".encode(), json.dumps({"key": f"k{p}{i}", "v": version}).encode())
                for i in range(5)
            ]
            produce(services.kafka, topic, docs, partition=p)
    produce(services.kafka, topic, [(b"gone", b'{"v": 0}'), (b"gone", None)], partition=0)
    produce(services.kafka, topic, [(b"bad", b"{not json")], partition=1)
    env = {
        "KAFKA_TOPICS": topic,
        "DLQ_TOPIC": dlq,
        "ERRORS_TOLERANCE": "all",
        "ON_NULL_VALUE": "delete",
        "KAFKA_GROUP_ID": names("ver-group"),
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output[-2000:]
    return topic, env


def test_verify_finds_what_was_planted_and_nothing_on_a_clean_index(services, names, es) -> None:
    topic, env = _flow(services, names)
    clean = run_cli(services, env, "verify", "--json")
    assert clean.exit_code == 0, clean.stdout + clean.stderr
    report = clean.json()
    assert report["ok"] and set(report["counts"].values()) == {0}
    assert (report["records"], report["documents"], report["compared"]) == (33, 11, 11)
    # The undecodable record is accounted for; Elasticsearch refused nothing.
    assert (report["failed_before_index"], report["refused_by_es"]) == (1, 0)
    assert [(r["partition"], r["from"], r["to"]) for r in report["ranges"]] == [
        (0, 0, 17),
        (1, 0, 16),
    ]

    es.delete(index=topic, id="k01", refresh=True)  # missing
    es.index(index=topic, id="k12", document={"key": "k12", "v": 1}, refresh=True)  # stale
    es.index(index=topic, id="planted", document={"v": 9}, refresh=True)  # extra
    es.index(index=topic, id="gone", document={"v": 0}, refresh=True)  # undeleted
    es.index(index=topic, id="k03", document={"key": "k03", "v": 7}, refresh=True)  # differs
    found = run_cli(services, env, "verify", "--json")
    assert found.exit_code == 1
    report = found.json()
    assert report["counts"] == {"missing": 1, "stale": 2, "undeleted": 1, "extra": 1, "lost": 0}
    d = report["discrepancies"]
    assert [(x["id"], x["source"]) for x in d["missing"]] == [("k01", f"{topic}/0@11")]
    stale = {x["id"]: x["detail"] for x in d["stale"]}
    assert stale == {"k12": f"holds the document of {topic}/1@7", "k03": "content differs"}
    assert [x["id"] for x in d["extra"]] == ["planted"]
    assert [(x["id"], x["source"]) for x in d["undeleted"]] == [("gone", f"{topic}/0@16")]

    text = run_cli(services, env, "verify")
    assert text.exit_code == 1
    assert "missing=1 stale=2 undeleted=1 extra=1 lost=0" in text.stdout
    print(text.stdout)

    sample = run_cli(services, env, "verify", "--json", "--sample", "3").json()
    assert sample["compared"] == 3 and sample["counts"]["extra"] == 0  # no scan for extras
    one = run_cli(services, env, "verify", "--json", "--partition", "1").json()
    assert one["counts"] == {"missing": 0, "stale": 1, "undeleted": 0, "extra": 0, "lost": 0}
    # Records up to offset 10 of partition 1 wrote k10..k14; the committed ones after them
    # overwrote them, so the state to expect is still the latest.
    older = run_cli(services, env, "verify", "--json", "--partition", "1", "--to-offset", "10")
    assert (older.json()["compared"], older.json()["counts"]["stale"]) == (5, 1)


def test_a_dead_letter_missing_from_the_topic_is_lost(services, names) -> None:
    _, env = _flow(services, names)
    empty = names("ver-empty-dlq")
    create_topic(services.kafka, empty)
    run = run_cli(services, {**env, "DLQ_TOPIC": empty}, "verify", "--json")
    assert run.exit_code == 1
    (lost,) = run.json()["discrepancies"]["lost"]
    assert lost["source"].endswith("/1@15") and "stage deserialize" in lost["detail"]
