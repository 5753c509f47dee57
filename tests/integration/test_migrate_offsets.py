"""`es-sink migrate offsets` refuses while something may still commit for either group,
against the suite's Kafka: commits that move during the probe (a committer that is no group
member, as the flow is), and a flow instance that holds a partition of the target group. The
copy itself, and the refusal while a connector's task is a member, run against a real
Connect worker in tests/integration/test_migrate_connect.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.flows import Services, create_topic, numbered, produce, run_cli

pytestmark = pytest.mark.integration


def commit(services: Services, group: str, topic: str, offset: int, metadata: str = "") -> None:
    """Commit `offset` of partition 0 for `group` without joining it (as assign() does)."""
    c = Consumer({"bootstrap.servers": services.kafka, "group.id": group})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset, metadata)], asynchronous=False)
    finally:
        c.close()


def test_refused_while_the_source_groups_commits_move(
    services: Services, names: Callable[[str], str]
) -> None:
    topic, source, target = names("migoff"), names("connect-g"), names("flow-g")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, numbered(0, 20))
    commit(services, source, topic, 1)
    stop = threading.Event()

    def committer() -> None:
        n = 2
        while not stop.is_set() and n < 20:
            commit(services, source, topic, n)
            n += 1
            time.sleep(0.3)

    thread = threading.Thread(target=committer, daemon=True)
    thread.start()
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": target}
    try:
        refused = run_cli(services, env, "migrate", "offsets", "--from-group", source,
                          "--probe-s", "2")  # fmt: skip
    finally:
        stop.set()
        thread.join(10)
    assert refused.exit_code == 1, refused.stdout + refused.stderr
    assert f"refusing to copy the offsets of {source}" in refused.stderr
    assert f"committed offsets moved within 2 s ({source} {topic}/0)" in refused.stderr
    # once they stand still, the copy goes through
    done = run_cli(services, env, "migrate", "offsets", "--from-group", source, "--probe-s", "1")
    assert done.exit_code == 0, done.stderr
    assert f"copied {topic}/0: {source} " in done.stdout


def test_refused_while_a_flow_instance_holds_the_target(
    services: Services, names: Callable[[str], str]
) -> None:
    topic, source, target = names("migoff"), names("connect-g"), names("flow-g")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, numbered(0, 5))
    commit(services, source, topic, 5)
    now = int(time.time() * 1000)
    owner = (f"es-sink partitions=1 owner=0123456789ab gen=2 since={now} lease=80 "
             f"host=elsewhere pid=7 at={now}")  # fmt: skip
    commit(services, target, topic, 2, owner)
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": target}
    refused = run_cli(services, env, "migrate", "offsets", "--from-group", source,
                      "--probe-s", "0")  # fmt: skip
    assert refused.exit_code == 1, refused.stdout + refused.stderr
    assert f"an instance of the flow holds {topic}/0 (owner 0123456789ab" in refused.stderr
    released = owner + " released"
    commit(services, target, topic, 2, released)
    done = run_cli(services, env, "migrate", "offsets", "--from-group", source, "--probe-s", "0",
                   "--json")  # fmt: skip
    assert done.exit_code == 0, done.stderr
    (change,) = done.json()["changes"]
    assert (change["source"], change["from"], change["to"]) == (5, 2, 5)
