"""The `reset` mode's event: a paused partition whose position the broker deletes.

Under KAFKA_AUTO_OFFSET_RESET=latest, once during the run: pick the partition with the
most left to read among those already read from, pause the flow (`PUT /pause`), wait
until what it read is committed, have the broker delete the partition's records from the
position up to a cut (`AdminClient.delete_records`), and resume (`PUT /resume`). The
deleted records were never read and are gone by the broker's doing: the ground truth
drops them (`deleted`) and the summary counts them; everything from the cut on must still
be read, not skipped to the log end. The flow must count exactly them in
`es_sink_offsets_deleted_unread_total` and warn.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chaos.flow import Flow
from chaos.monitor import Monitor

CUT_MAX = 300
"""At most this many offsets are deleted past the position."""
WAIT_S = 20.0


@dataclass
class Reset:
    """See the module docstring."""

    at_kill: int
    api_port: int
    bootstrap: str
    topic: str
    deleted: Callable[[int, int, int], None]
    """(partition, position, cut): the records in [position, cut) are gone."""
    done: bool = False
    partition: int = -1
    position: int = -1
    cut: int = -1
    metric: int = -1
    """es_sink_offsets_deleted_unread_total of the partition after the resume (-1: unread)."""
    warned: bool = False

    @property
    def unread(self) -> int:
        return max(self.cut - self.position, 0)

    def due(self, kills: int) -> bool:
        return not self.done and kills >= self.at_kill

    def describe(self) -> str:
        return (
            f"deleted offsets {self.position}..{self.cut - 1} of partition {self.partition} "
            f"while paused; the flow counted {self.metric}, warned: {self.warned}"
        )

    def run(self, flow: Flow, monitor: Monitor, check_time: Callable[[], None]) -> bool:
        """The event; False if the flow exited or would not pause in time."""
        api = _Api(self.api_port)
        parts = api.status()
        mine = [q for q in parts if q["topic"] == self.topic and q.get("end") is not None]
        if not mine:
            return False
        # One already read from, so the deletion passes a position the flow reached.
        pick = max(mine, key=lambda q: (q["position"] > 0, q["end"] - q["position"]))
        p = int(pick["partition"])
        api.put("/pause")
        deadline = time.monotonic() + WAIT_S
        position = -1
        while time.monotonic() < deadline and not flow.any_exited():
            check_time()
            now = next(
                int(q["position"]) for q in api.status()
                if q["topic"] == self.topic and int(q["partition"]) == p
            )  # fmt: skip
            if now == position and monitor.committed_by_partition().get(p, -1) >= now:
                break
            position = now
            time.sleep(0.3)
        else:
            return False
        end = int(pick["end"])
        self.partition, self.position = p, position
        self.cut = position + max(1, min(CUT_MAX, (end - position) // 2))
        _delete_records(self.bootstrap, self.topic, p, self.cut)
        self.deleted(p, position, self.cut)
        api.put("/resume")
        self.done = True
        label = re.compile(
            rf'^es_sink_offsets_deleted_unread_total\{{[^}}]*partition="{p}"[^}}]*\}} (\S+)$',
            re.MULTILINE,
        )
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not flow.any_exited():
            found = label.search(api.get("/metrics").decode())
            if found is not None and float(found.group(1)) > 0:
                self.metric = int(float(found.group(1)))
                break
            time.sleep(0.3)
        gone = rf"source {re.escape(self.topic)}/{p}: offset \d+ .*is gone: the broker deleted"
        self.warned = re.search(gone.encode(), flow.text()) is not None
        return not flow.any_exited()


class _Api:
    """The flow's status and control API (API_PORT)."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str) -> bytes:
        # S310: the URL is http://127.0.0.1, never a caller's scheme
        with urllib.request.urlopen(self.base + path, timeout=5) as answer:  # noqa: S310
            return bytes(answer.read())

    def put(self, path: str) -> None:
        request = urllib.request.Request(self.base + path, method="PUT")  # noqa: S310
        with urllib.request.urlopen(request, timeout=5):  # noqa: S310
            pass

    def status(self) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = json.loads(self.get("/status"))["partitions"]
        return parts


def _delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_records([TopicPartition(topic, partition, before)]).values():
        fut.result(30)
