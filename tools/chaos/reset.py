"""The `reset` mode's event: a paused partition whose position the broker deletes.

Under KAFKA_AUTO_OFFSET_RESET=latest, once during the run: pick the partition with the
most left to read among those already read from, pause the flow (`PUT /pause`), wait
until what it read is committed, have the broker delete the partition's records from the
position up to a cut (`AdminClient.delete_records`), and resume (`PUT /resume`). The
flow may hold a few records read past its position (its queue): those it still writes.
From the first offset it finds gone (its warning, which must lie between the position
and the cut) to the cut, the records were never read and are gone by the broker's doing:
the ground truth drops them (`deleted`), so a document the flow wrote from them is extra
or wrong and one it skipped past the cut is lost; the flow must count exactly them in
`es_sink_offsets_deleted_unread_total`.

A pause outlives the process (the group's commits record it): an event that ends without
its resume (the flow exited, or would not pause in time) resumes the flow there if it still
runs, and otherwise leaves `left_paused` for the runner to resume the next start
(`resume_left`).
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tools.chaos.flow import Flow
from tools.chaos.monitor import Monitor

CUT_MAX = 300
"""At most this many offsets are deleted past what the flow may hold already read."""
QUEUED_MAX = 3 * 50
"""What the flow may have read past its status `position` (its queue: two batches of the
mode's KAFKA_CONSUME_BATCH_SIZE=50, and one more being read): records it still writes."""
WAIT_S = 20.0


@dataclass
class Reset:
    """See the module docstring."""

    at_kill: int
    api_port: int
    bootstrap: str
    topic: str
    deleted: Callable[[int, int, int], None]
    """(partition, first, cut): the records in [first, cut) are gone."""
    done: bool = False
    partition: int = -1
    position: int = -1
    """The flow's status `position` when paused (the next record it would emit)."""
    first: int = -1
    """The first offset the flow found gone (its warning), at or past `position`: what
    lies between was read before the deletion and must still be written."""
    cut: int = -1
    metric: int = -1
    """es_sink_offsets_deleted_unread_total of the partition after the resume (-1: unread)."""
    warned: bool = False
    left_paused: bool = False
    """Paused, and not resumed yet: the next start of the flow starts paused."""

    @property
    def unread(self) -> int:
        return max(self.cut - self.first, 0) if self.first >= 0 else 0

    @property
    def consistent(self) -> bool:
        """The flow's first gone offset lies between its position and the cut."""
        return self.position <= self.first < self.cut

    def due(self, kills: int) -> bool:
        return not self.done and kills >= self.at_kill

    def describe(self) -> str:
        return (
            f"deleted offsets up to {self.cut - 1} of partition {self.partition} while paused "
            f"at {self.position}; the flow found {self.first} on gone and counted "
            f"{self.metric}"
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
        self.left_paused = True
        try:
            return self._paused(api, p, pick, flow, monitor, check_time)
        finally:
            if self.left_paused and not flow.any_exited():
                self._resume(api)

    def _resume(self, api: _Api) -> None:
        try:
            api.put("/resume")
            self.left_paused = False
        except OSError:  # gone meanwhile: `resume_left` resumes its next start
            pass

    def resume_left(self, flow: Flow, check_time: Callable[[], None]) -> None:
        """Resume a start that a pause left by an unfinished event holds (its API up)."""
        api = _Api(self.api_port)
        deadline = time.monotonic() + 60
        while self.left_paused and time.monotonic() < deadline and not flow.any_exited():
            check_time()
            self._resume(api)
            time.sleep(0.3)

    def _paused(
        self,
        api: _Api,
        p: int,
        pick: dict[str, Any],
        flow: Flow,
        monitor: Monitor,
        check_time: Callable[[], None],
    ) -> bool:
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
        self.cut = position + max(1, min(QUEUED_MAX + CUT_MAX, (end - position) * 3 // 4))
        _delete_records(self.bootstrap, self.topic, p, self.cut)
        api.put("/resume")
        self.left_paused = False
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
        gone = rf"source {re.escape(self.topic)}/{p}: offset (\d+) .*is gone: the broker deleted"
        found_gone = re.search(gone.encode(), flow.text())
        self.warned = found_gone is not None
        self.first = int(found_gone.group(1)) if found_gone is not None else self.cut
        self.deleted(p, self.first, self.cut)
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
