"""elastic_transport's node-pool lines through our filter: a probe's 405 says nothing, an
outage says little."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from elastic_transport import NodeConfig, NodePool, Urllib3HttpNode

from sinks.elasticsearch import node_log


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[NodePool]:
    """A node pool of two nodes whose logger folds with a fresh filter."""
    logger = logging.getLogger(node_log.LOGGER)
    fresh = node_log.NodePoolLines(every_s=60)
    monkeypatch.setattr(node_log, "_installed", fresh)
    node_log.install()
    configs = [NodeConfig("http", "127.0.0.1", port) for port in (9200, 9201)]
    try:
        yield NodePool(configs, Urllib3HttpNode)
    finally:
        logger.removeFilter(fresh)


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == node_log.LOGGER]


def test_one_failure_then_an_answer_logs_nothing(
    pool: NodePool, caplog: pytest.LogCaptureFixture
) -> None:
    node = pool.get()
    with caplog.at_level(logging.WARNING, logger=node_log.LOGGER):
        pool.mark_dead(node)  # GET / answered 405 (the integ-test-zip)
        pool.mark_live(node)
    assert lines(caplog) == []


def test_an_outage_logs_a_line_a_minute_per_node_and_its_end(
    pool: NodePool, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(node_log.time, "monotonic", lambda: clock[0])
    a, b = pool.all()
    with caplog.at_level(logging.WARNING, logger=node_log.LOGGER):
        for _ in range(30):  # 30 failed requests a node in 45 s
            pool.mark_dead(a)
            pool.mark_dead(b)
            clock[0] += 1.5
        clock[0] += 20  # a minute after the first line
        pool.mark_dead(a)
        pool.mark_live(a)
        pool.mark_live(b)
    got = lines(caplog)
    assert got == [
        f"Elasticsearch node {a!r} does not answer (2 failures in a row)",
        f"Elasticsearch node {b!r} does not answer (2 failures in a row)",
        f"Elasticsearch node {a!r} does not answer (31 failures in a row); 28 such lines folded",
        f"Elasticsearch node {a!r} answers again",
        f"Elasticsearch node {b!r} answers again",
    ]
