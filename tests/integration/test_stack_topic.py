"""`scripts/stack topic create` against the real broker: the topic the flow needs, once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient

from tests.support.flows import Services
from tests.support.paths import ROOT

pytestmark = pytest.mark.integration

STACK = ROOT / "scripts" / "stack"


def stack(services: Services, *args: str) -> subprocess.CompletedProcess[str]:
    host, _, port = services.kafka.rpartition(":")
    env = {**os.environ, "STACK_HOST": host, "KAFKA_PORT": port}
    cmd = [sys.executable, str(STACK), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_topic_create_makes_the_topic_once(services: Services, names: Callable[[str], str]) -> None:
    topic = names("stack-topic")
    made = stack(services, "topic", "create", topic, "--partitions", "3")
    assert made.returncode == 0, made.stderr
    assert made.stdout == f"stack: created topic {topic} with 3 partition(s) on {services.kafka}\n"
    admin = AdminClient({"bootstrap.servers": services.kafka})
    assert len(admin.list_topics(topic, timeout=20).topics[topic].partitions) == 3
    again = stack(services, "topic", "create", topic, "--partitions", "5")
    assert again.returncode == 0, again.stderr
    assert "exists already" in again.stdout
    assert len(admin.list_topics(topic, timeout=20).topics[topic].partitions) == 3
    bad = stack(services, "topic", "create", "no spaces allowed")
    assert bad.returncode == 1 and "Topic name is invalid" in bad.stderr, bad.stderr
