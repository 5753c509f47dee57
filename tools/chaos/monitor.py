"""What the harness watches to time kills: committed offsets and in-flight bulks."""

from __future__ import annotations

import time
import warnings
from typing import Any

from tools.chaos.audit import partitions_of


class Monitor:
    """Polls the group's committed offsets and Elasticsearch's task list, cheaply."""

    def __init__(self, es: Any, bootstrap: str, group: str, topic: str, index: str) -> None:
        from confluent_kafka import Consumer

        self._es = es
        self._bootstrap = bootstrap
        self._topic = topic
        self._index = index
        # Same group id, never subscribed: committed() is a plain OffsetFetch.
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        self._tps: list[Any] = []
        self.refresh()

    def refresh(self) -> None:
        """List the topic's partitions again (after partitions were added)."""
        from confluent_kafka import TopicPartition

        self._tps = [
            TopicPartition(self._topic, p) for p in partitions_of(self._bootstrap, self._topic)
        ]

    def committed_by_partition(self) -> dict[int, int]:
        """The committed offsets (absent: none yet, or the broker did not answer)."""
        try:
            tps = self._consumer.committed(self._tps, timeout=5)
        except Exception:
            return {}
        return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}

    def committed(self) -> int:
        """Sum of the committed offsets (records durably done, per the flow's commits)."""
        try:
            tps = self._consumer.committed(self._tps, timeout=5)
        except Exception:
            return -1
        return sum(max(tp.offset, 0) for tp in tps)

    def index_ops(self) -> int:
        """Index operations Elasticsearch executed (done or lost to a newer version).

        Mapping errors are not counted, replays are: this measures how fast the flow
        works, not how far it got (that is `committed`).
        """
        try:
            stats = self._es.indices.stats(index=self._index, metric="indexing")
            ix = stats["_all"]["primaries"]["indexing"]
        except Exception:
            return -1
        return int(ix["index_total"]) + int(ix.get("index_failed_due_to_version_conflict", 0))

    def bulk_in_flight(self) -> bool:
        """True when Elasticsearch is executing a `_bulk` request for our index."""
        try:
            with warnings.catch_warnings():  # the task API is "technical preview"
                warnings.simplefilter("ignore")
                resp = self._es.tasks.list(actions="indices:data/write/bulk*", detailed=True)
        except Exception:
            return False
        for node in resp.get("nodes", {}).values():
            for task in node.get("tasks", {}).values():
                if self._index in task.get("description", ""):
                    return True
        return False

    def settle(self, limit_s: float = 10.0) -> None:
        """Wait until no `_bulk` of a dead flow still runs inside Elasticsearch, so the
        next attempt's writes cannot be overtaken by it (VERSION=none has no 409 guard)."""
        deadline = time.monotonic() + limit_s
        while self.bulk_in_flight() and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        self._consumer.close()
