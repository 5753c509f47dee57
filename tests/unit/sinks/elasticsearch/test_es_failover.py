"""The item errors a shard's failover can answer during an Elasticsearch node restart are
retried, never dead letters. In tests/integration/test_es_rolling_restart.py
no item failed at all (the stopped node's bulks failed as connection errors and went to the
other host); these are the errors Elasticsearch would give if a request reached a node or a
shard copy that was going away (statuses as the server's exception classes set them)."""

from __future__ import annotations

import pytest

from sinks.backoff import Backoff
from sinks.elasticsearch import bulk
from sinks.model import Action, Record

FAILOVER = [
    (500, "node_closed_exception", "node closed {data-1}{c-XEe_WxR62GajxMTc5TJw}"),
    (500, "node_not_connected_exception", "[data-1][127.0.0.1:19370] Node not connected"),
    (
        503,
        "unavailable_shards_exception",
        "[t][0] primary shard is not active Timeout: [1m], request: [BulkShardRequest "
        "[[t][0]] containing [1] requests]",
    ),
    (503, "no_shard_available_action_exception", "No shard available for [t][0]"),
]


class _Clock:
    def monotonic(self) -> float:
        return 0.0

    def sleep(self, seconds: float, /) -> None:
        pass


@pytest.mark.parametrize(("status", "etype", "reason"), FAILOVER)
def test_a_failover_item_error_is_retried_not_dead_lettered(
    status: int, etype: str, reason: str
) -> None:
    line = b'{"index":{"_index":"t","_id":"k1"}}\n'
    pending = [Action("k1", line + b'{"seq":1}\n', Record("t", 0, 0, None, b"k1", b"{}"))]
    answer = {
        "errors": True,
        "items": [{"index": {"status": status, "error": {"type": etype, "reason": reason}}}],
    }
    verdict = bulk.classify(
        pending,
        answer,
        bulk.Call(Backoff(0.1, 1.0).start(_Clock())),
        rules=bulk.Rules(),
        item_retry_max=10,
    )
    assert verdict.retry == (0,) and verdict.counted == (0,)
    assert verdict.rejected == () and verdict.stop is None
