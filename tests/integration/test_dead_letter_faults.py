"""The dead-letter topic refusing writes for a while: nothing is committed past the
undelivered dead letters, and once the topic accepts them the flow finishes."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from tests.conftest import (
    committed_offsets,
    consume_all,
    count_docs,
    create_topic,
    produce,
    start_flow,
    wait_for,
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


def test_unwritable_dead_letter_topic_holds_back_commits(services, es, names, tmp_path):
    topic, dlq = names("src"), names("dlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)
    # The dead-letter topic refuses every record until its size limit is raised again.
    _set_max_message_bytes(services.kafka, dlq, 1)
    produce(services.kafka, topic, [(b"good-1", b'{"a": 1}')])
    produce(services.kafka, topic, [(b"bad", b"{not json")])
    produce(services.kafka, topic, [(b"good-2", b'{"a": 2}')])
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "DLQ_TOPIC": dlq,
        "ERRORS_TOLERANCE": "all",
    }
    log = tmp_path / "flow.log"
    proc = start_flow(services, env, log=log)
    try:
        wait_for(
            lambda: "deliveries failed" in log.read_text(), 60, "a failed dead-letter delivery"
        )
        time.sleep(3)  # several epochs would have closed by now, were it not held back
        assert proc.poll() is None, log.read_text()[-3000:]
        # The bad record is offset 1: a commit of at most 1 has not passed it.
        assert committed_offsets(services.kafka, topic, topic)[0] <= 1, "committed past it"
        assert consume_all(services.kafka, dlq, timeout=2) == []
        _set_max_message_bytes(services.kafka, dlq, 1048588)
        assert proc.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    letters = consume_all(services.kafka, dlq)
    assert [(m.key(), m.value()) for m in letters] == [(b"bad", b"{not json")]
    assert count_docs(es, topic) == 2
    assert committed_offsets(services.kafka, topic, topic) == {0: 3}
