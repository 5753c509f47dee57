"""Scripted updates (WRITE_METHOD=script) against the real node: a counter incremented by a
stored and by an inline Painless script, a scripted upsert, a concurrent writer's
increments all counted (retry on conflict), a retried script run once, and the docs'
script that skips a replayed record (ES_SCRIPT_RECORD).

`es-sink verify` after a scripted run compares presence only.

Painless runs only where the node has it: OpenSearch nodes from scripts/stack get
OpenSearch's lang-painless module from Maven Central (scripts/stacklib/painless.py);
Elasticsearch's is not on Maven Central, so on the integ-test-zip node these tests check
instead that the flow stops at its first write with one line naming ES_SCRIPT_LANG or
ES_SCRIPT_ID, and writes nothing."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from tests.integration.updates_support import racing
from tests.support.es_proxy import BulkCall, EsProxy, refuse_once
from tests.support.flows import (
    committed_offsets,
    consume_all,
    create_topic,
    produce,
    run_cli,
    run_flow,
)
from tests.support.paths import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.compat("opensearch")]

P = "__connect.errors."
COUNTER = "ctx._source.n += params.doc.n"


def _painless(es: Any) -> bool:
    """Whether the node can run Painless scripts."""
    langs = es.get_script_languages()["types_allowed"]
    contexts = es.get_script_languages().get("language_contexts", [])
    return "inline" in langs and any(c.get("language") == "painless" for c in contexts)


def _topic(services: Any, names: Any, prefix: str) -> str:
    topic = names(prefix)
    create_topic(services.kafka, topic, 1)
    return topic


def _source(es: Any, index: str, doc_id: str) -> Any:
    got = es.options(ignore_status=404).get(index=index, id=doc_id)
    return got.body.get("_source")


def _no_painless_stops(services: Any, es: Any, topic: str, env: dict[str, str], says: str) -> None:
    """Where the node cannot run the script: the first write to an existing document stops
    the flow, naming the setting (a missing one would be answered `document missing`
    first), instead of dead-lettering every record."""
    es.index(index=topic, id=_KEY, document={"n": 0}, refresh=True)
    produce(services.kafka, topic, [(_KEY.encode(), b'{"n": 1}')] * 3)
    dlq = f"{topic}-dlq"
    create_topic(services.kafka, dlq, 1)
    tolerate = {"ERRORS_TOLERANCE": "all", "DLQ_TOPIC": dlq}
    run = run_flow(services, {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, **tolerate, **env})
    assert run.returncode != 0, run.output
    assert says in run.output, run.output
    assert consume_all(services.kafka, dlq, timeout=2) == []  # not a dead letter per record
    assert committed_offsets(services.kafka, topic, topic)[0] <= 0
    assert _source(es, topic, _KEY) == {"n": 0}


_KEY = "c"


def test_stored_and_inline_scripts_increment_a_counter(services, es, names):
    stored = _topic(services, names, "script-stored")
    inline = _topic(services, names, "script-inline")
    dlq = _topic(services, names, "script-dlq")
    if not _painless(es):
        env = {"WRITE_METHOD": "script", "ES_SCRIPT_SOURCE": COUNTER}
        says = "ES_SCRIPT_LANG: Elasticsearch cannot run the script (script_lang not supported"
        _no_painless_stops(services, es, inline, env, says)
        env = {"WRITE_METHOD": "script", "ES_SCRIPT_ID": f"{stored}-count"}
        says = "ES_SCRIPT_ID: Elasticsearch cannot run the stored script"
        _no_painless_stops(services, es, stored, env, says)
        return
    records = [(b"c", orjson.dumps({"n": i})) for i in (1, 2, 3)] + [(b"new", b'{"n": 5}')]
    produce(services.kafka, stored, records)
    produce(services.kafka, inline, records)
    script_id = f"{stored}-count"
    es.put_script(id=script_id, script={"lang": "painless", "source": COUNTER})
    try:
        for topic in (stored, inline):
            es.index(index=topic, id="c", document={"n": 10, "keep": "x"}, refresh=True)
        base = {"ERRORS_TOLERANCE": "all", "DLQ_TOPIC": dlq, "WRITE_METHOD": "script"}
        run = run_flow(
            services, {**base, "KAFKA_TOPICS": stored, "KAFKA_GROUP_ID": stored,
                       "ES_SCRIPT_ID": script_id}
        )  # fmt: skip
        assert run.returncode == 0, run.output
        # An inline script that creates a missing document by running on {} (scripted upsert).
        upsert = "ctx._source.n = (ctx._source.n ?: 0) + params.doc.n"
        env = {
            **base,
            "KAFKA_TOPICS": inline,
            "KAFKA_GROUP_ID": inline,
            "ES_SCRIPT_SOURCE": upsert,
            "ON_MISSING_DOCUMENT": "upsert",
            "ES_SCRIPTED_UPSERT": "true",
        }
        run = run_flow(services, env)
        assert run.returncode == 0, run.output
    finally:
        es.delete_script(id=script_id)
    assert _source(es, stored, "c") == {"n": 16, "keep": "x"}
    assert _source(es, stored, "new") is None  # ON_MISSING_DOCUMENT=dlq
    assert _source(es, inline, "c") == {"n": 16, "keep": "x"}
    assert _source(es, inline, "new") == {"n": 5}
    # `es-sink verify` cannot know what a script made of a document: it checks presence.
    verified = run_cli(services, env, "verify", "--json")
    assert verified.exit_code == 0, verified.stdout + verified.stderr
    report = verified.json()
    assert report["ok"] and not report["content_compared"], report
    assert (report["records"], report["documents"], report["compared"]) == (4, 2, 2), report
    dead = [(m.topic(), m.key(), dict(m.headers() or [])) for m in consume_all(services.kafka, dlq)]
    assert [(t, k) for t, k, _ in dead] == [(dlq, b"new")]
    headers = dead[0][2]
    assert headers[f"{P}exception.class.name"] == b"elasticsearch.document_missing_exception"
    assert headers[f"{P}topic"] == stored.encode()


def test_a_concurrent_writer_s_increments_are_all_counted(services, es, names):
    """The flow and a direct client increment one counter at once: with retry on conflict
    every increment of both lands exactly once."""
    topic = _topic(services, names, "script-race")
    dlq = _topic(services, names, "script-race-dlq")
    n = 600
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "WRITE_METHOD": "script",
        "ES_SCRIPT_SOURCE": COUNTER,
        "BULK_MAX_ACTIONS": "20",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
    }
    if not _painless(es):
        says = "ES_SCRIPT_LANG: Elasticsearch cannot run the script"
        _no_painless_stops(services, es, topic, env, says)
        return
    produce(services.kafka, topic, [(b"c", b'{"n": 1}')] * n)
    es.index(index=topic, id="c", document={"n": 0}, refresh=True)
    script = {"source": COUNTER, "lang": "painless", "params": {"doc": {"n": 1000}}}

    def increment(_: int) -> None:
        es.update(index=topic, id="c", script=script, retry_on_conflict=20)

    with racing(increment) as done:
        run = run_flow(services, env)
    assert run.returncode == 0, run.output
    assert len(done) > 20  # the two really overlapped
    assert consume_all(services.kafka, dlq) == []
    assert _source(es, topic, "c") == {"n": n + 1000 * len(done)}


PAGE = ROOT / "docs" / "elasticsearch.md"


def test_a_retried_script_runs_once(services, es, names):
    """The first write of x is refused for a while (429, as an ingest-side rejection of one
    item answers): its retry must not run the later script of x a second time."""
    topic = _topic(services, names, "script-retry")
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "WRITE_METHOD": "script",
        "ES_SCRIPT_SOURCE": COUNTER,
        "ON_MISSING_DOCUMENT": "upsert",
        "BULK_LINGER_MS": "1000",
    }
    if not _painless(es):
        says = "ES_SCRIPT_LANG: Elasticsearch cannot run the script"
        _no_painless_stops(services, es, topic, env, says)
        return
    es.index(index=topic, id="x", document={"n": 0}, refresh=True)
    produce(services.kafka, topic, [(b"x", b'{"n": 1}'), (b"x", b'{"n": 1}')])
    seen: dict[str, int] = {}

    def first_x(call: BulkCall) -> int | None:
        return call.ids().index("x") if "x" in call.ids() else None

    with EsProxy(services.es_url) as proxy:
        proxy.rule = refuse_once(first_x, seen)
        run = run_flow(services, {**env, "ES_HOSTS": proxy.url})
        requests = [c.ids() for c in proxy.bulks]
    assert run.returncode == 0, run.output
    assert "fault" in seen, requests
    assert _source(es, topic, "x") == {"n": 2}, requests  # was 3: the later script ran twice
    assert committed_offsets(services.kafka, topic, topic) == {0: 2}


def test_a_script_that_remembers_offsets_skips_a_replayed_record(services, es, names):
    """The pattern of docs/elasticsearch.md with ES_SCRIPT_RECORD=true: the same records read
    again (a replay after a crash; here, a second group) leave the counter as it was."""
    (script,) = re.findall(r"```painless\n(.*?)```", PAGE.read_text(), re.DOTALL)
    topic = _topic(services, names, "script-replay")
    env = {
        "KAFKA_TOPICS": topic,
        "WRITE_METHOD": "script",
        "ES_SCRIPT_SOURCE": script,
        "ES_SCRIPT_RECORD": "true",
        "ON_MISSING_DOCUMENT": "upsert",
        "ES_SCRIPTED_UPSERT": "true",
    }
    if not _painless(es):
        says = "ES_SCRIPT_LANG: Elasticsearch cannot run the script"
        _no_painless_stops(services, es, topic, env, says)
        return
    mappings = {"properties": {"applied": {"type": "object", "enabled": False}}}
    es.indices.create(index=topic, mappings=mappings)
    es.index(index=topic, id="x", document={"n": 10}, refresh=True)
    produce(services.kafka, topic, [(b"x", b'{"n": 1}')] * 3 + [(b"new", b'{"n": 5}')])
    for group in ("first", "replay"):
        run = run_flow(services, {**env, "KAFKA_GROUP_ID": f"{topic}-{group}"})
        assert run.returncode == 0, run.output
        applied = {f"{topic}/0": 2}
        assert _source(es, topic, "x") == {"n": 13, "applied": applied}, group
        assert _source(es, topic, "new") == {"n": 5, "applied": {f"{topic}/0": 3}}, group
