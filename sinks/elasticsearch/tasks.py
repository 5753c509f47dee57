"""Bulks that Elasticsearch may still execute, found in its task list.

Elasticsearch executes a `_bulk` it has received even when the client is gone (a bulk is
not cancelled with its connection), and a bulk queued for a busy write pool or a slow
ingest pipeline runs seconds later. Such a bulk must not land after a newer write of the
same document, so two writers never overlap: the retry of a bulk whose request timed out
waits for that request (`EsSinkPartition`), and a process that reads the partitions of a
previous owner that did not release them (a crash, even on this host) waits for that
owner's bulks (`flows.kafka.fencing`).

Every `_bulk` carries `X-Opaque-Id: es-sink/<owner>/<sink partition>`: the process's
fencing token and the partition, one value per partition and process. Elastic advises a
finite set of values (deprecation warnings are deduplicated per value), and a partition has
one bulk in flight, so its value names that bulk. `GET _tasks` (Elasticsearch and
OpenSearch; the `monitor` cluster privilege) lists a bulk from the moment a node accepts
it until it is done, with its X-Opaque-Id, also for the shard-level tasks on other nodes.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from enum import Enum

from elasticsearch import ApiError, Elasticsearch
from elasticsearch.exceptions import GeneralAvailabilityWarning

from sinks.elasticsearch.bulk import TRANSPORT_ERRORS

logger = logging.getLogger(__name__)
# The client marks the task API a technical preview on every call; it has been stable
# since Elasticsearch 5 and OpenSearch 1.
warnings.filterwarnings("ignore", category=GeneralAvailabilityWarning, module=__name__)

__all__ = ["POLL_S", "Gone", "opaque_id", "owner_gone", "running", "wait_gone"]

_PREFIX = "es-sink"
ACTIONS = "indices:data/write/bulk*"
POLL_S = 0.5
"""How often a wait lists the tasks again."""
LIST_TIMEOUT_S = 10.0


def opaque_id(owner: str, partition: str) -> str:
    """The X-Opaque-Id of the bulks of `owner`'s sink partition `partition`."""
    return f"{_PREFIX}/{owner}/{partition}"


def running(client: Elasticsearch, owner: str, partition: str | None = None) -> int:
    """How many bulk tasks of `owner` (of its sink `partition` only, if given) the cluster
    runs or queues. Raises the transport's errors (`bulk.TRANSPORT_ERRORS`)."""
    answer = client.options(request_timeout=LIST_TIMEOUT_S).tasks.list(
        actions=ACTIONS, group_by="none", filter_path="tasks.headers"
    )
    want = opaque_id(owner, partition) if partition is not None else None
    n = 0
    for task in answer.body.get("tasks", ()):
        value = (task.get("headers") or {}).get("X-Opaque-Id", "")
        prefix, _, rest = value.partition("/")
        if prefix == _PREFIX and (value == want if want else rest.split("/")[0] == owner):
            n += 1
    return n


class Gone(Enum):
    """How a wait for an owner's bulks ended."""

    NONE = "none were listed"
    DONE = "done"
    BOUND = "still listed at the bound"
    UNLISTED = "tasks cannot be listed"


def wait_gone(
    client: Elasticsearch,
    owner: str,
    partition: str | None,
    bound_s: float,
    what: str | None,
    stop: Callable[[], bool] = lambda: False,
) -> Gone:
    """Wait until no bulk of `owner` (and `partition`) is listed, at most `bound_s` (or
    until `stop()`); `what` names them in the log (None: say nothing). Tasks that cannot be
    listed (no `monitor` privilege, Elasticsearch away) may still run: the wait then lasts
    the bound, and a bulk listed before the listing failed counts as still listed."""
    deadline = time.monotonic() + bound_s
    seen = warned = False
    last = 0  # the last count Elasticsearch answered
    while True:
        try:
            n = running(client, owner, partition)
        except TRANSPORT_ERRORS as e:
            if isinstance(e, ApiError) and e.meta.status in (401, 403) and what and not warned:
                warned = True
                logger.warning(
                    "Elasticsearch refused to list its tasks (HTTP %d; the sink's credentials "
                    "need the monitor cluster privilege): waiting %gs for %s, which may "
                    "still run",
                    e.meta.status, bound_s, what,
                )  # fmt: skip
            n = -1
        else:
            last = n
            if n == 0:
                return Gone.DONE if seen else Gone.NONE
            if not seen and what:
                logger.warning(
                    "Elasticsearch still runs %d bulk tasks of %s; waiting for them so that "
                    "none lands after a newer write",
                    n, what,
                )  # fmt: skip
            seen = True
        if stop() or time.monotonic() >= deadline:
            return Gone.BOUND if last > 0 else Gone.UNLISTED
        time.sleep(POLL_S)


_lock = threading.Lock()
_owners: dict[str, Future[Gone]] = {}


def owner_gone(client: Elasticsearch, owner: str, bound_s: float) -> Future[Gone]:
    """The wait for every bulk of a previous `owner` (one per owner and process, on its own
    thread): done when none is listed any more, or after `bound_s`."""
    with _lock:
        future = _owners.get(owner)
        if future is not None:
            return future
        future = _owners[owner] = Future()

    def run() -> None:
        try:
            gone = wait_gone(client, owner, None, bound_s, f"the previous owner {owner}")
        except BaseException as e:  # never leave the partitions waiting for good
            logger.warning("bulks of the previous owner %s: cannot wait for them: %s", owner, e)
            gone = Gone.UNLISTED
        if gone is not Gone.NONE:
            logger.warning(
                "Elasticsearch: the bulks of the previous owner %s: %s (waited at most %gs)",
                owner, gone.value, bound_s,
            )  # fmt: skip
        future.set_result(gone)

    threading.Thread(target=run, name=f"es-sink-bulks-of-{owner}", daemon=True).start()
    return future
