"""The dead-letter topic refusing a dead letter for good (too large, or invalid for the
topic): the flow stops, nothing is committed past the undelivered dead letter, and once
the topic accepts it a rerun finishes."""

from __future__ import annotations

import subprocess

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from tests.support.flows import (
    committed_offsets,
    consume_all,
    count_docs,
    create_topic,
    produce,
    start_flow,
)

pytestmark = pytest.mark.integration


def _set_max_message_bytes(kafka: str, topic: str, value: int) -> None:
    admin = AdminClient({"bootstrap.servers": kafka})
    entry = ConfigEntry(
        "max.message.bytes", str(value), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource("topic", topic, incremental_configs=[entry])
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(30)


def _env(topic: str, dlq: str) -> dict[str, str]:
    return {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "DLQ_TOPIC": dlq,
        "ERRORS_TOLERANCE": "all",
    }


def _refused_run(services, env: dict[str, str], log) -> str:  # type: ignore[no-untyped-def]
    """Run the flow until it stops on a dead letter its topic refuses; its output."""
    proc = start_flow(services, env, log=log)
    try:
        status = proc.wait(90)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the flow kept producing a dead letter the topic can never accept")
    out = log.read_text()
    assert status != 0, out[-3000:]
    return out


def test_dead_letter_over_the_topic_limit_stops_the_flow_until_the_limit_is_raised(
    services, es, names, tmp_path
):
    """A dead letter larger than the topic's max.message.bytes was retried forever, holding
    back every commit. It now stops the flow with one line
    naming DLQ_TOPIC, the record and the limit, nothing committed past it; once the
    operator raises the limit, a rerun delivers it and finishes."""
    topic, dlq = names("src"), names("dlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)
    _set_max_message_bytes(services.kafka, dlq, 1)  # refuses every record
    produce(services.kafka, topic, [(b"good-1", b'{"a": 1}')])
    produce(services.kafka, topic, [(b"bad", b"{not json")])
    produce(services.kafka, topic, [(b"good-2", b'{"a": 2}')])
    env, log = _env(topic, dlq), tmp_path / "flow.log"
    out = _refused_run(services, env, log)
    assert f"DLQ_TOPIC: topic {dlq} refused the dead letter of {topic}/0@1 (" in out
    assert "max.message.bytes (1): raise max.message.bytes on the topic" in out
    # The bad record is offset 1: a commit of at most 1 has not passed it.
    assert committed_offsets(services.kafka, topic, topic)[0] <= 1, "committed past it"
    assert consume_all(services.kafka, dlq, timeout=2) == []
    _set_max_message_bytes(services.kafka, dlq, 1048588)
    proc = start_flow(services, env, log=log)
    try:
        assert proc.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    letters = consume_all(services.kafka, dlq)
    assert [(m.key(), m.value()) for m in letters] == [(b"bad", b"{not json")]
    assert count_docs(es, topic) == 2
    assert committed_offsets(services.kafka, topic, topic) == {0: 3}


def test_dead_letter_a_compacted_topic_refuses_stops_the_flow_naming_the_reason(
    services, es, names, tmp_path
):
    """A compacted topic refuses a record without a key for good (INVALID_RECORD), and a
    dead letter keeps the original null key: it was produced again forever, every commit
    held back. It now stops the flow with one line naming DLQ_TOPIC, the record and the
    broker's reason, nothing committed past it."""
    topic, dlq = names("src"), names("dlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq, config={"cleanup.policy": "compact"})
    produce(services.kafka, topic, [(b"good-1", b'{"a": 1}'), (None, b"{bad"), (b"good-2", b"{}")])
    out = _refused_run(services, _env(topic, dlq), tmp_path / "flow.log")
    assert f"DLQ_TOPIC: topic {dlq} refused the dead letter of {topic}/0@1 for good: " in out
    assert "(INVALID_RECORD; a compacted topic refuses a record without a key)" in out
    assert committed_offsets(services.kafka, topic, topic)[0] <= 1, "committed past it"
    assert consume_all(services.kafka, dlq, timeout=2) == []
