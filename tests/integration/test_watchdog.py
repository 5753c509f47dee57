"""A two-process cluster whose peer stops answering ends with one line instead of hanging
(flows.api.watchdog); an Elasticsearch outage, which stalls epochs too, does not end it."""

from __future__ import annotations

import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.flows import (
    Services,
    committed_offsets,
    count_docs,
    create_topic,
    numbered,
    produce,
    start_flow,
    wait_for,
)
from tools.chaos.flow import consecutive_ports, free_ports
from tools.chaos.proxy import Proxy
from tools.devkit.kafka import end_offsets

pytestmark = pytest.mark.integration

STALL_S = 10


Cluster = Callable[..., list[subprocess.Popen[bytes]]]


@pytest.fixture
def cluster(services: Services, tmp_path: Path) -> Iterator[Cluster]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(env: dict[str, str], tag: str) -> list[subprocess.Popen[bytes]]:
        addresses = ";".join(f"127.0.0.1:{p}" for p in free_ports(2))
        api = consecutive_ports(2)  # process i serves on API_PORT + i
        settings = {
            "KAFKA_STOP_AT_END": "false",
            "API_PORT": str(api),
            "CLUSTER_STALL_S": str(STALL_S),
            **env,
        }
        started = [
            start_flow(
                services, settings, "-i", str(i), "-a", addresses, log=tmp_path / f"{tag}-{i}.log"
            )
            for i in range(2)
        ]
        procs.extend(started)
        return started

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def test_a_frozen_peer_ends_the_cluster_with_one_line(
    services: Services, names: Callable[[str], str], es: Any, cluster: Cluster, tmp_path: Path
) -> None:
    topic = names("wd")
    create_topic(services.kafka, topic, 4)
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": f"g-{topic}", "ES_INDEX": topic}
    produce(services.kafka, topic, numbered(0, 400))
    first, second = cluster(env, "a")
    wait_for(lambda: count_docs(es, topic) == 400, 90, "the first records")
    # Freeze a peer of a running cluster: epochs closed, commits made, and the watchdog
    # has asked its peer (every second until it answered once). A peer frozen before it
    # ever answered is, by design, not held against the cluster (a network policy).
    wait_for(lambda: committed_all(services, topic), 60, "the first commits")
    time.sleep(3)
    second.send_signal(signal.SIGSTOP)  # a host that stops answering, links kept open
    frozen_at = time.monotonic()
    try:
        code = first.wait(STALL_S + 60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"process 0 did not exit; its status: {_status(tmp_path)}") from None
    finally:
        second.kill()
    took = time.monotonic() - frozen_at
    log = (tmp_path / "a-0.log").read_text()
    assert code == 1, log[-3000:]
    lines = [line for line in log.splitlines() if "cluster stalled" in line]
    assert len(lines) == 1 and "process 1 (http://127.0.0.1:" in lines[0], log[-3000:]
    assert STALL_S <= took <= STALL_S + 30, took
    # The supervisor restarts the cluster: nothing was lost.
    produce(services.kafka, topic, numbered(400, 100))
    cluster(env, "b")
    wait_for(lambda: count_docs(es, topic) == 500, 120, "every record after the restart")
    wait_for(lambda: committed_all(services, topic), 60, "the commits")


def committed_all(services: Services, topic: str) -> bool:
    return committed_offsets(services.kafka, f"g-{topic}", topic) == end_offsets(
        services.kafka, topic
    )


def _status(tmp_path: Path) -> str:
    """Process 0's /status (what it retries, its partitions), for a failure message."""
    found = re.search(r"status API on (http://\S+)", (tmp_path / "a-0.log").read_text())
    if found is None:
        return "no API"
    try:
        with urllib.request.urlopen(f"{found[1]}/status", timeout=5) as resp:
            return resp.read().decode()
    except OSError as e:
        return f"no answer ({e})"


def test_an_elasticsearch_outage_does_not_end_the_cluster(
    services: Services, names: Callable[[str], str], es: Any, cluster: Cluster
) -> None:
    topic = names("wdes")
    create_topic(services.kafka, topic, 4)
    proxy = Proxy(services.es_url)
    try:
        env = {
            "KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": f"g-{topic}", "ES_INDEX": topic,
            "ES_HOSTS": proxy.url,
        }  # fmt: skip
        procs = cluster(env, "es")
        produce(services.kafka, topic, numbered(0, 200))
        wait_for(lambda: count_docs(es, topic) == 200, 90, "the first records")
        proxy.cut("refuse")
        produce(services.kafka, topic, numbered(200, 200))
        time.sleep(STALL_S * 3)  # epochs stall behind the retrying sink
        assert [p.poll() for p in procs] == [None, None]
        proxy.restore()
        wait_for(lambda: count_docs(es, topic) == 400, 120, "every record after the outage")
        assert [p.poll() for p in procs] == [None, None]
    finally:
        proxy.close()
