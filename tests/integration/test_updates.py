"""Partial updates (WRITE_METHOD=update, ON_MISSING_DOCUMENT), retry on conflict against a
concurrent writer, an update whose document a later record deleted (retried, replayed),
per-record actions in order, and confined index names, against the real broker and node.
Scripted updates: tests/integration/test_scripted_updates.py."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from tests.integration.updates_support import racing
from tests.support.es_proxy import EsProxy, refuse_once
from tests.support.flows import (
    committed_offsets,
    consume_all,
    create_topic,
    produce,
    run_flow,
    search_all,
)

pytestmark = [pytest.mark.integration, pytest.mark.compat("opensearch")]

P = "__connect.errors."
UT = "tests.integration.updates_support"


def _topic(services: Any, names: Any, prefix: str) -> str:
    topic = names(prefix)
    create_topic(services.kafka, topic, 1)
    return topic


def _dead(kafka: str, dlq: str) -> dict[str, dict[str, str]]:
    """Dead letters by record key: their error context headers."""
    out = {}
    for m in consume_all(kafka, dlq):
        ctx = {k[len(P) :]: v.decode() for k, v in m.headers() or [] if k.startswith(P)}
        out[m.key().decode()] = ctx
    return out


@pytest.mark.parametrize("on_missing", ["dlq", "ignore", "upsert"])
def test_partial_updates_on_present_and_missing_documents(services, es, names, on_missing):
    topic = _topic(services, names, f"upd-{on_missing}")
    dlq = _topic(services, names, f"upd-{on_missing}-dlq")
    es.index(index=topic, id="present", document={"a": 1, "c": {"x": 1}}, refresh=True)
    produce(
        services.kafka,
        topic,
        [
            (b"present", b'{"b": 2, "c": {"y": 2}}'),
            (b"absent", b'{"b": 3}'),
            (b"present", b'{"a": 4}'),
        ],
    )
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "WRITE_METHOD": "update",
        "ON_MISSING_DOCUMENT": on_missing,
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    merged = {"a": 4, "b": 2, "c": {"x": 1, "y": 2}}
    expected = {"present": merged} | ({"absent": {"b": 3}} if on_missing == "upsert" else {})
    assert search_all(es, topic) == expected
    dead = _dead(services.kafka, dlq)
    if on_missing == "dlq":
        assert list(dead) == ["absent"]
        assert dead["absent"]["stage"] == "index"
        assert dead["absent"]["exception.class.name"] == "elasticsearch.document_missing_exception"
        assert dead["absent"]["exception.message"] == "[absent]: document missing"
    else:
        assert dead == {}
    assert committed_offsets(services.kafka, topic, topic) == {0: 3}


@pytest.mark.parametrize("method", ["update", "upsert"])
def test_a_concurrent_writer_is_retried_on_conflict_not_dead_lettered(services, es, names, method):
    """The flow and a direct client update one document at once: with ES_RETRY_ON_CONFLICT
    Elasticsearch re-runs the update that met the other's write, so nothing is dead-lettered
    and both writers' last values are in the document."""
    topic = _topic(services, names, f"race-{method}")
    dlq = _topic(services, names, f"race-{method}-dlq")
    es.index(index=topic, id="hot", document={"flow": -1, "racer": -1}, refresh=True)
    n = 1500
    produce(services.kafka, topic, [(b"hot", orjson.dumps({"flow": i})) for i in range(n)])
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "WRITE_METHOD": method,
        "ES_RETRY_ON_CONFLICT": "5",
        "BULK_MAX_ACTIONS": "20",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }

    def update(j: int) -> None:
        es.update(index=topic, id="hot", doc={"racer": j}, retry_on_conflict=10)

    with racing(update) as racer_writes:
        run = run_flow(services, env)
    assert run.returncode == 0, run.output
    assert len(racer_writes) > 50  # the two really overlapped
    assert _dead(services.kafka, dlq) == {}
    assert search_all(es, topic) == {"hot": {"flow": n - 1, "racer": racer_writes[-1]}}


def _updated_then_deleted(services: Any, es: Any, names: Any, prefix: str) -> dict[str, str]:
    """x exists; an update of x, then its tombstone. The flow's settings (the defaults
    otherwise: ERRORS_TOLERANCE=none, ON_MISSING_DOCUMENT as they make it)."""
    topic = _topic(services, names, prefix)
    es.index(index=topic, id="x", document={"n": 0}, refresh=True)
    produce(services.kafka, topic, [(b"x", b'{"n": 1}'), (b"x", None)])
    return {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "WRITE_METHOD": "update",
        "ON_NULL_VALUE": "delete",
        "BULK_LINGER_MS": "1000",
    }


def test_an_update_retried_after_its_document_s_delete_is_done(services, es, names):
    """The update is refused for a while (429) and the delete after it in the same bulk
    succeeds: the delete decided, so the update is done. Its retry used to meet `document
    missing` and stop the flow."""
    env = _updated_then_deleted(services, es, names, "upd-retried")
    topic = env["KAFKA_TOPICS"]
    seen: dict[str, int] = {}

    with EsProxy(services.es_url) as proxy:
        proxy.rule = refuse_once(lambda call: 0 if call.ids() == ["x", "x"] else None, seen)
        run = run_flow(services, {**env, "ES_HOSTS": proxy.url})
        requests = [c.ids() for c in proxy.bulks]
    assert run.returncode == 0, run.output
    assert "fault" in seen, requests
    assert search_all(es, topic) == {}
    assert committed_offsets(services.kafka, topic, topic) == {0: 2}


def test_a_replayed_update_of_a_document_a_later_record_deleted_is_no_stop(services, es, names):
    """The records are read again (a replay after a crash before the commit; here, a
    second group): the update finds x deleted. That used to stop the flow, at every
    restart, under the defaults; the update is now skipped (ON_MISSING_DOCUMENT=ignore is
    the default where the flow deletes)."""
    env = _updated_then_deleted(services, es, names, "upd-replayed")
    topic = env["KAFKA_TOPICS"]
    for group in (topic, f"{topic}-replay"):
        run = run_flow(services, {**env, "KAFKA_GROUP_ID": group})
        assert run.returncode == 0, f"{group}: {run.output}"
        assert search_all(es, topic) == {}
        assert committed_offsets(services.kafka, group, topic) == {0: 2}


def test_mixed_per_record_actions_on_one_id_stay_in_order(services, es, names, tmp_path):
    """The `action` built-in (a field, a header) and a Python transform choose each record's
    write; one id gets index, update, delete, create, upsert... across several bulks and
    sink partitions, and ends as the last of them says."""
    topic = _topic(services, names, "mixed")
    dlq = _topic(services, names, "mixed-dlq")

    def rec(key: str, op: str | None, body: dict[str, Any], headers: Any = None) -> tuple:
        value = orjson.dumps({**body, "op": op} if op else body)
        return (key.encode(), value, headers) if headers else (key.encode(), value)

    records = [
        rec("k", "i", {"v": 1, "a": 1}),
        rec("k", "u", {"v": 2}),  # merged: {v: 2, a: 1}
        rec("k", "d", {}),  # deleted
        rec("k", "u", {"v": 9}),  # update of a missing document: skipped (the flow deletes)
        rec("k", "c", {"v": 3}),  # created again
        rec("k", "c", {"v": 4}),  # exists: a create's 409 is done, v stays 3
        rec("k", None, {"w": 5}),  # no op: WRITE_METHOD=upsert merges
        rec("j", "i", {"x": 1}),
        rec("j", None, {"x": 2}, [("x-op", b"delete")]),  # the header deletes it
        rec("j", "i", {"x": 3, "how": "create"}),  # Python transform: create
        rec("h", "i", {"y": 1}),
        rec("h", None, {"y": 2, "how": "delete"}),  # Python transform: delete
        rec("h", "u", {"y": 3}, [("x-op", b"index")]),  # header wins over the field (later)
    ]
    produce(services.kafka, topic, records)
    config = tmp_path / "mixed.yaml"
    config.write_text(
        json.dumps(
            {
                "transforms": [
                    {"type": "action", "field": "op",
                     "map": {"i": "index", "u": "update", "d": "delete", "c": "create"}},
                    {"type": "action", "header": "x-op"},
                    {"python": f"{UT}:action_from_source"},
                    {"type": "drop", "fields": ["op"]},
                ]
            }
        )
    )  # fmt: skip
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "ES_SINK_CONFIG": str(config),
        "WRITE_METHOD": "upsert",
        "BULK_MAX_ACTIONS": "2",
        "ES_SINK_PARTITIONS": "3",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }
    run = run_flow(services, env)
    assert run.returncode == 0, run.output
    assert search_all(es, topic) == {"k": {"v": 3, "w": 5}, "j": {"x": 3}, "h": {"y": 3}}
    assert _dead(services.kafka, dlq) == {}


def test_invalid_and_unconfined_index_names_are_dead_lettered(services, es, names):
    """A Python transform names the index from the record (a tenant field): names
    Elasticsearch would refuse, and names outside ES_INDEX_ALLOW, are dead letters with
    stage `index` and the reason; the rest of the bulk is indexed."""
    topic = _topic(services, names, "tenants")
    dlq = _topic(services, names, "tenants-dlq")
    suffix = topic.split("-")[-2]  # the run's part of `names`: lower-case hex
    tenants = {
        "ok1": f"acme{suffix}",
        "upper": f"Acme{suffix}",
        "star": f"acme*{suffix}",
        "space": f"ac me{suffix}",
        "long": "a" * 260,
        "outside": f"acme_{suffix}",  # valid for Elasticsearch, outside ES_INDEX_ALLOW
        "ok2": f"beta{suffix}",
    }
    records = [
        (k.encode(), orjson.dumps({"tenant": t, "n": i}))
        for i, (k, t) in enumerate(tenants.items())
    ]
    produce(services.kafka, topic, records)
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "TRANSFORMS": f"{UT}:tenant_index",
        "ES_INDEX_ALLOW": "tenant-[a-z0-9]+",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }
    try:
        run = run_flow(services, env)
        assert run.returncode == 0, run.output
        assert search_all(es, f"tenant-acme{suffix}") == {"ok1": {"n": 0}}
        assert search_all(es, f"tenant-beta{suffix}") == {"ok2": {"n": 6}}
        dead = _dead(services.kafka, dlq)
        assert sorted(dead) == ["long", "outside", "space", "star", "upper"]
        assert {d["stage"] for d in dead.values()} == {"index"}
        assert {d["exception.class.name"] for d in dead.values()} == {
            "sinks.actions.InvalidIndexName"
        }
        msg = {k: d["exception.message"] for k, d in dead.items()}
        assert msg["upper"] == f"index name 'tenant-Acme{suffix}' must be lower case"
        assert msg["star"] == f"index name 'tenant-acme*{suffix}' contains '*'"
        assert msg["space"] == f"index name 'tenant-ac me{suffix}' contains ' '"
        assert msg["long"].endswith("is longer than 255 bytes")
        assert msg["outside"] == (
            f"index name 'tenant-acme_{suffix}' does not match ES_INDEX_ALLOW (tenant-[a-z0-9]+)"
        )
        assert committed_offsets(services.kafka, topic, topic) == {0: 7}
    finally:
        es.indices.delete(index=f"tenant-*{suffix}", ignore_unavailable=True)
