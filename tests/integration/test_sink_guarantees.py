"""The Elasticsearch sink's guarantees against the real broker and node: every refused
record reaches the dead-letter topic or stops the flow on every code path, a retry never
applies an older write over a newer one, a write-blocked index is a record failure rather
than a stall, and a missing index or privilege stops the flow as a configuration error.

Where Elasticsearch cannot be made to answer as needed (an item 429 then a 413, a
rejection of one item before the shard, a missing privilege without security enabled), a
fault-injecting proxy (`tests.support.es_proxy`) in front of the real node rewrites just that.
"""

from __future__ import annotations

import subprocess
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.support.es_proxy import BUSY, BulkCall, EsProxy, refuse_once
from tests.support.flows import (
    committed_offsets,
    consume_all,
    count_docs,
    create_topic,
    produce,
    run_flow,
    start_flow,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def _run(services: Any, env: dict[str, str], timeout: float = 150) -> Any:
    """Run the flow to completion; a flow that never finishes fails the test, not hangs it."""
    try:
        return run_flow(services, env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"")[-3000:] if isinstance(e.stdout, bytes) else str(e.stdout)[-3000:]
        pytest.fail(f"the flow did not finish within {timeout}s (retrying forever?): {out}")


def _headers(message: Any) -> dict[str, bytes]:
    return dict(message.headers() or [])


def _env(topic: str, **extra: str) -> dict[str, str]:
    return {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, **extra}


# ------------------------------------------------- every refused record accounted once


def test_a_rejection_before_a_413_split_reaches_the_dead_letter_topic(services, es, names):
    """Attempt 1: b is a mapping error, c and d get 429; attempt 2 (c, d) gets 413 and is
    split. b used to vanish: not indexed, not dead-lettered, offsets committed past it."""
    topic, dlq = names("f2"), names("f2dlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)
    es.indices.create(index=topic, mappings={"properties": {"n": {"type": "integer"}}})
    records = [(b"a", b'{"n": 1}'), (b"b", b'{"n": "x"}'), (b"c", b'{"n": 3}'), (b"d", b'{"n": 4}')]
    produce(services.kafka, topic, records)
    seen: dict[str, int] = {}

    def rule(call: BulkCall) -> None:
        if "first" not in seen and call.ids() == ["a", "b", "c", "d"]:
            seen["first"] = call.n
            call.rewrite(2, 429, BUSY)
            call.rewrite(3, 429, BUSY)
        elif "first" in seen and "split" not in seen and call.ids() == ["c", "d"]:
            seen["split"] = call.n
            call.answer(413, {"error": {"type": "content_too_long", "reason": "proxy"}})

    with EsProxy(services.es_url) as proxy:
        proxy.rule = rule
        env = _env(
            topic,
            ES_HOSTS=proxy.url,
            ERRORS_TOLERANCE="all",
            DLQ_TOPIC=dlq,
            ES_SINK_PARTITIONS="1",
            BULK_LINGER_MS="1000",
        )
        run = _run(services, env)
        requests = [c.ids() for c in proxy.bulks]
    assert run.returncode == 0, run.output[-3000:]
    assert set(seen) == {"first", "split"}, requests  # the faults were injected
    assert requests[seen["split"] + 1 :][:2] == [["c"], ["d"]]
    letters = consume_all(services.kafka, dlq)
    assert [(m.key(), m.value()) for m in letters] == [(b"b", b'{"n": "x"}')]
    headers = _headers(letters[0])
    assert headers["__connect.errors.stage"] == b"index"
    # The node's own type for a value its mapping refuses (OpenSearch keeps the older name).
    assert headers["__connect.errors.exception.class.name"] in (
        b"elasticsearch.document_parsing_exception",
        b"elasticsearch.mapper_parsing_exception",
    )
    assert count_docs(es, topic) == 3
    assert committed_offsets(services.kafka, topic, topic) == {0: 4}


# ------------------------------------------- a retried write never lands over a later one


def _first_pair_fails(seen: dict[str, int]) -> Any:
    """On the first bulk holding two actions for x: answer 429 for the first."""
    return refuse_once(lambda call: 0 if call.ids()[:2] == ["x", "x"] else None, seen)


def test_a_retried_write_is_not_applied_over_a_later_one(services, es, names):
    topic = names("f4")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, [(b"x", b'{"v": 1}'), (b"x", b'{"v": 2}')])
    seen: dict[str, int] = {}
    with EsProxy(services.es_url) as proxy:
        proxy.rule = _first_pair_fails(seen)
        run = _run(services, _env(topic, ES_HOSTS=proxy.url, BULK_LINGER_MS="1000"))
        requests = [c.ids() for c in proxy.bulks]
    assert run.returncode == 0, run.output[-3000:]
    assert "fault" in seen, requests
    es.indices.refresh(index=topic)
    assert es.get(index=topic, id="x")["_source"] == {"v": 2}  # was {"v": 1}
    # The failed write went again, followed by the later one it must not land over.
    assert requests[seen["fault"] + 1] == ["x", "x"], requests


def test_a_retried_write_does_not_resurrect_a_later_delete(services, es, names):
    topic = names("f4del")
    create_topic(services.kafka, topic)
    es.indices.create(index=topic)
    produce(services.kafka, topic, [(b"x", b'{"v": 1}'), (b"x", None)])
    seen: dict[str, int] = {}
    with EsProxy(services.es_url) as proxy:
        proxy.rule = _first_pair_fails(seen)
        env = _env(topic, ES_HOSTS=proxy.url, BULK_LINGER_MS="1000", ON_NULL_VALUE="delete")
        run = _run(services, env)
        requests = [c.ids() for c in proxy.bulks]
    assert run.returncode == 0, run.output[-3000:]
    assert "fault" in seen, requests
    es.indices.refresh(index=topic)
    assert not es.exists(index=topic, id="x")  # the retried v1 used to bring it back


def test_an_overloaded_bad_record_before_a_delete_of_its_document_is_dead_lettered(
    services, es, names
):
    """The 429 hid that x's first record breaks the mapping; the delete after it in the
    same request succeeded. Treating the 429 as done since the delete decided x dropped a
    bad record without a dead letter, and committed past it."""
    topic, dlq = names("f4bad"), names("f4baddlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)
    es.indices.create(index=topic, mappings={"properties": {"n": {"type": "integer"}}})
    produce(services.kafka, topic, [(b"x", b'{"n": "bad"}'), (b"x", None)])
    seen: dict[str, int] = {}
    with EsProxy(services.es_url) as proxy:
        proxy.rule = _first_pair_fails(seen)
        env = _env(
            topic,
            ES_HOSTS=proxy.url,
            BULK_LINGER_MS="1000",
            ON_NULL_VALUE="delete",
            ERRORS_TOLERANCE="all",
            DLQ_TOPIC=dlq,
        )
        run = _run(services, env)
        requests = [c.ids() for c in proxy.bulks]
    assert run.returncode == 0, run.output[-3000:]
    assert "fault" in seen, requests
    letters = consume_all(services.kafka, dlq)
    assert [(m.key(), m.value()) for m in letters] == [(b"x", b'{"n": "bad"}')]
    es.indices.refresh(index=topic)
    assert not es.exists(index=topic, id="x")
    assert committed_offsets(services.kafka, topic, topic) == {0: 2}


def test_a_timed_out_bulk_is_retried_only_once_elasticsearch_is_done_with_it(
    services, es, names, tmp_path
):
    """The first bulk of x → v1 times out while a node still holds it (the proxy forwards it
    after 8 s); v2 follows. Retried at once, v1 would land after v2 when the held one runs."""
    topic = names("timedout")
    create_topic(services.kafka, topic)
    es.indices.create(index=topic)
    produce(services.kafka, topic, [(b"x", b'{"v": 1}')])
    with EsProxy(services.es_url) as proxy:
        held: list[BulkCall] = []

        def rule(call: BulkCall) -> None:
            if not held and "x" in call.ids():
                held.append(call)
                call.hold(8)
                # Written once the first attempt has timed out: the next bulk carries it.
                threading.Timer(3, produce, (services.kafka, topic, [(b"x", b'{"v": 2}')])).start()

        proxy.rule = rule
        env = _env(topic, ES_HOSTS=proxy.url, ES_REQUEST_TIMEOUT_S="2", KAFKA_STOP_AT_END="false")
        flow = start_flow(services, env, log=tmp_path / "flow.log")
        try:
            wait_for(lambda: bool(held) and held[0].forwarded.is_set(), 60, "the held bulk")
            wait_for(
                lambda: committed_offsets(services.kafka, topic, topic).get(0) == 2, 60, "commits"
            )
            time.sleep(1)
        finally:
            flow.terminate()
            flow.wait(60)
        requests = [c.ids() for c in proxy.bulks]
    es.indices.refresh(index=topic)
    assert es.get(index=topic, id="x")["_source"] == {"v": 2}  # was {"v": 1}
    assert len(requests) >= 3, requests  # the timed-out one, its retry, then v2


# ---------------------------------------------- a write-blocked index is a record failure


def _produce_at(kafka: str, topic: str, messages: list[tuple[bytes, bytes, int]]) -> None:
    """Produce (key, value, timestamp ms), in order, and wait for every delivery."""
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
    for key, value, ts in messages:
        producer.produce(topic, key=key, value=value, timestamp=ts)
        producer.poll(0)
    assert producer.flush(30) == 0


def _blocked_day(es: Any, base: str) -> str:
    index = f"{base}-2024.01.01"
    es.indices.create(index=index, settings={"index.blocks.write": True})
    return index


OLD_DAY_MS = int(datetime(2024, 1, 1, 12, tzinfo=UTC).timestamp() * 1000)


def test_a_late_record_for_a_write_blocked_index_is_dead_lettered(services, es, names):
    """`index.blocks.write` (403, as ILM's readonly sets on old indices): a late event for
    that day was retried forever and stalled the whole flow; it is now a dead letter."""
    topic, dlq, base = names("f7"), names("f7dlq"), names("f7idx")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)
    _blocked_day(es, base)
    now_ms = int(time.time() * 1000)
    messages = [(b"late", b'{"n": -1}', OLD_DAY_MS)]
    messages += [(f"k{i}".encode(), b'{"n": %d}' % i, now_ms) for i in range(200)]
    _produce_at(services.kafka, topic, messages)
    env = _env(topic, ES_INDEX=f"{base}-{{yyyy.MM.dd}}", ERRORS_TOLERANCE="all", DLQ_TOPIC=dlq)
    run = _run(services, env, timeout=120)
    assert run.returncode == 0, run.output[-3000:]
    letters = consume_all(services.kafka, dlq)
    assert [m.key() for m in letters] == [b"late"]
    headers = _headers(letters[0])
    assert headers["__connect.errors.stage"] == b"index"
    assert headers["__connect.errors.exception.class.name"] == (
        b"elasticsearch.cluster_block_exception"
    )
    assert b"FORBIDDEN/8/index write" in headers["__connect.errors.exception.message"]
    assert count_docs(es, f"{base}-2*") == 200
    assert committed_offsets(services.kafka, topic, topic) == {0: 201}


def test_a_write_blocked_index_stops_the_flow_under_tolerance_none(services, es, names):
    topic, base = names("f7none"), names("f7nidx")
    create_topic(services.kafka, topic)
    _blocked_day(es, base)
    _produce_at(services.kafka, topic, [(b"late", b'{"n": -1}', OLD_DAY_MS)])
    run = _run(services, _env(topic, ES_INDEX=f"{base}-{{yyyy.MM.dd}}"), timeout=120)
    assert run.returncode != 0
    assert f"record {topic}/0@0 failed at stage index: elasticsearch.cluster_block_exception" in (
        run.output
    )
    assert committed_offsets(services.kafka, topic, topic)[0] <= 0


# -------------------------------------- a missing index or privilege is a configuration error


def _auto_create(es: Any, value: str | None) -> str | None:
    """Set the cluster's action.auto_create_index; returns the previous persistent value."""
    before = es.cluster.get_settings(flat_settings=True)["persistent"]
    es.cluster.put_settings(persistent={"action.auto_create_index": value})
    return before.get("action.auto_create_index")


def test_a_missing_index_that_is_not_auto_created_stops_the_flow(services, es, names):
    """Auto-create refused for this index (a deny pattern for its name only, so other
    tests on the node are unaffected): every record used to be dead-lettered; now the
    flow stops with one line naming ES_INDEX and the index, nothing committed."""
    topic, dlq = names("w4idx"), names("w4dlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)
    produce(services.kafka, topic, [(f"k{i}".encode(), b'{"n": 1}') for i in range(20)])
    previous = _auto_create(es, f"-{topic},+*")
    try:
        env = _env(topic, ERRORS_TOLERANCE="all", DLQ_TOPIC=dlq)
        run = _run(services, env, timeout=120)
    finally:
        _auto_create(es, previous)
    assert run.returncode != 0, run.output[-3000:]
    assert f"ES_INDEX: index {topic} does not exist and Elasticsearch does not create it" in (
        run.output
    )
    assert consume_all(services.kafka, dlq, timeout=2) == []
    assert committed_offsets(services.kafka, topic, topic)[0] <= 0


def test_an_item_security_exception_stops_the_flow(services, es, names):
    """A missing index privilege (item 403 security_exception; the test node runs without
    security, so the proxy answers it): records used to pour into the dead-letter topic."""
    topic, dlq = names("w4sec"), names("w4secdlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)
    produce(services.kafka, topic, [(f"k{i}".encode(), b'{"n": 1}') for i in range(20)])
    denied = {
        "type": "security_exception",
        "reason": f"action [indices:data/write/bulk[s]] is unauthorized for user [es_sink] "
        f"on indices [{topic}]",
    }

    def rule(call: BulkCall) -> None:
        for i in range(len(call.actions)):
            call.fake(i, 403, denied)

    with EsProxy(services.es_url) as proxy:
        proxy.rule = rule
        env = _env(topic, ES_HOSTS=proxy.url, ERRORS_TOLERANCE="all", DLQ_TOPIC=dlq)
        run = _run(services, env, timeout=120)
    assert run.returncode != 0, run.output[-3000:]
    assert f"ES_HOSTS: Elasticsearch refused writes to index {topic} with HTTP 403" in run.output
    assert "lack a privilege" in run.output
    assert consume_all(services.kafka, dlq, timeout=2) == []
    assert committed_offsets(services.kafka, topic, topic)[0] <= 0
