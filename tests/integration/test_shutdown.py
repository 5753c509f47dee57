"""Stopping during an Elasticsearch outage, against the real broker.

Elasticsearch is replaced by a blackhole on 127.0.0.1 that accepts connections and never
answers, so the sink's bulks hang and retry: the case where an operator's SIGTERM used to
wait forever, and a second signal did not stop the process either.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.flows import (
    Services,
    committed_offsets,
    count_docs,
    create_topic,
    produce,
    run_flow,
    start_flow,
    wait_for,
)

pytestmark = pytest.mark.integration


class Blackhole:
    """A TCP listener that reads requests and never answers them."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.received = b""
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                self.received += data[:200]
        except OSError:
            pass

    def sink_waits(self) -> bool:
        """The sink's first bulk call waits here: the start-up check's request timed out
        first, and the sink's client asks what the server is (GET /) inside its first
        `_bulk` call (sinks.elasticsearch.server), or sends the `_bulk` itself."""
        return self.received.count(b"HTTP/1.1") >= 2 or b"_bulk" in self.received

    def close(self) -> None:
        self._sock.close()
        for conn in self._conns:
            conn.close()


@pytest.fixture
def blackhole() -> Iterator[Blackhole]:
    hole = Blackhole()
    yield hole
    hole.close()


def _start(
    services: Services, blackhole: Blackhole, topic: str, tmp_path: Path, workers: str, **env: str
) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp_path / f"flow-{workers}.log"
    proc = start_flow(
        services,
        {
            "KAFKA_TOPICS": topic,
            "KAFKA_GROUP_ID": topic,
            "KAFKA_STOP_AT_END": "false",
            "ES_HOSTS": f"http://127.0.0.1:{blackhole.port}",
            "ES_REQUEST_TIMEOUT_S": "2",
            **env,
        },
        "-w",
        workers,
        log=log,
    )
    wait_for(blackhole.sink_waits, 60, "the sink's request to the blackhole")
    time.sleep(0.5)  # the bulk thread is now waiting on the blackhole
    return proc, log


def _exit_within(proc: subprocess.Popen[bytes], seconds: float) -> int | None:
    try:
        return proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        return None


def _backlog(services: Services, names: object, partitions: int = 2) -> str:
    topic = names("stop")  # type: ignore[operator]
    create_topic(services.kafka, topic, partitions)
    produce(services.kafka, topic, ((f"k{i}".encode(), b'{"n": %d}' % i) for i in range(2000)))
    return topic


def test_sigterm_during_outage_exits_nonzero_after_the_timeout_and_loses_nothing(
    services: Services, names: object, blackhole: Blackhole, es: object, tmp_path: Path
) -> None:
    topic = _backlog(services, names)
    proc, log = _start(services, blackhole, topic, tmp_path, "2", SHUTDOWN_TIMEOUT_S="3")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    status = _exit_within(proc, 20)
    took = time.monotonic() - sent
    output = log.read_text()
    assert status == 1, f"exit status {status} after {took:.1f}s:\n{output[-3000:]}"
    assert 2.5 < took < 10, took
    assert "SHUTDOWN_TIMEOUT_S=3s" in output
    # Nothing reached Elasticsearch, so nothing past the start (the announcement) is committed.
    assert all(o <= 0 for o in committed_offsets(services.kafka, topic, topic).values())
    # The next run (Elasticsearch back) indexes everything: nothing was lost.
    run = run_flow(services, {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic})
    assert run.returncode == 0, run.output[-3000:]
    assert count_docs(es, topic) == 2000


@pytest.mark.parametrize("workers", ["1", "2"])
def test_second_signal_during_outage_exits_at_once(
    services: Services, names: object, blackhole: Blackhole, tmp_path: Path, workers: str
) -> None:
    topic = _backlog(services, names)
    proc, log = _start(services, blackhole, topic, tmp_path, workers, SHUTDOWN_TIMEOUT_S="120")
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.5)
    assert proc.poll() is None, "the first signal must wait for the flush, not exit"
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    status = _exit_within(proc, 10)
    took = time.monotonic() - sent
    output = log.read_text()
    assert status == 128 + signal.SIGTERM, f"exit {status} after {took:.1f}s:\n{output[-3000:]}"
    assert took < 3, took
    assert "second SIGTERM: exiting now" in output
    assert all(o <= 0 for o in committed_offsets(services.kafka, topic, topic).values())


def test_a_failure_outside_the_sinks_ends_the_process_while_a_bulk_waits(
    services: Services, names: object, blackhole: Blackhole, tmp_path: Path
) -> None:
    """One worker's processor stops the flow (DLQ_MAX_CONSECUTIVE) while the other worker
    waits in the sink for a bulk to an unreachable Elasticsearch: Bytewax joins that
    worker, which used to wait for the bulk forever."""
    topic, dlq = names("fail"), names("fail-dlq")  # type: ignore[operator]
    create_topic(services.kafka, topic, 2)
    create_topic(services.kafka, dlq)

    def good(start: int) -> list[tuple[bytes, bytes]]:
        return [(f"k{i}".encode(), b'{"n": 1}') for i in range(start, start + 200)]

    produce(services.kafka, topic, good(0), 0)
    log = tmp_path / "flow.log"
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "KAFKA_STOP_AT_END": "false",
        "ES_HOSTS": f"http://127.0.0.1:{blackhole.port}",
        "ES_REQUEST_TIMEOUT_S": "2",
        "ES_SINK_PARTITIONS": "1",  # every write waits behind the one bulk in flight
        "BULK_MAX_ACTIONS": "100",  # a full buffer waits for the bulk in flight
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
        "DLQ_MAX_CONSECUTIVE": "2",
    }
    # A long epoch: the failing records are read in the epoch the sink is stuck in.
    proc = start_flow(services, env, "-w", "2", "-s", "60", log=log)
    wait_for(blackhole.sink_waits, 60, "the sink's request to the blackhole")
    produce(services.kafka, topic, good(200), 0)  # the next write waits for that bulk
    time.sleep(2)
    produce(services.kafka, topic, [(f"b{i}".encode(), b"{bad") for i in range(5)], 1)
    status = _exit_within(proc, 30)
    output = log.read_text()
    assert status not in (None, 0), f"exit {status}:\n{output[-3000:]}"
    assert "DLQ_MAX_CONSECUTIVE=2" in output
    assert all(o <= 0 for o in committed_offsets(services.kafka, topic, topic).values())
