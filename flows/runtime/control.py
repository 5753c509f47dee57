"""Pause and resume: the operator's hold on reading Kafka (the status API's PUT /pause).

A paused process reads no more records; everything already read is still written, flushed,
snapshotted and committed as usual, because only the source looks at the flag (once per
batch). It is process-wide: every partition of every worker of this process.

A pause outlives the process: every commit of a paused process carries it in the group's
commit metadata (`marker`: `paused=<epoch ms> paused_by=<who>`), which follows the group to
any host and any layout of processes, and a process that starts while any partition of its
topics says so starts paused (`restore`, from `flows.kafka.discovery.check_start`, before any
partition reads). Resuming commits every partition again without it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from flows import metrics

logger = logging.getLogger(__name__)

paused = False
"""Read by the source on every batch; written only through `pause`, `resume` and `restore`."""
_lock = threading.Lock()  # the flag, its metric and the pause's details change together

MAX_BY = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9@._:/+-]")  # a metadata word holds no space nor `=`


@dataclass(frozen=True)
class Pause:
    """Who paused the flow, and since when."""

    since_ms: int
    by: str

    def words(self) -> str:
        """The commit metadata words that record it."""
        return f"paused={self.since_ms} paused_by={self.by}"


_pause: Pause | None = None


def who(text: str | None) -> str:
    """`text` as one metadata word: at most MAX_BY safe characters ("unknown" when empty)."""
    word = _UNSAFE.sub("_", (text or "").strip())[:MAX_BY]
    return word or "unknown"


def current() -> Pause | None:
    """The pause in force (None while reading)."""
    return _pause


def marker() -> str:
    """What the commits of this process add to their metadata now ("" while reading)."""
    pause = _pause
    return "" if pause is None else pause.words()


def recorded(metadata: str | None) -> Pause | None:
    """The pause a commit's metadata records (None: none, or metadata es-sink did not write)."""
    words = (metadata or "").split()
    if not words or words[0] != "es-sink":
        return None
    fields = dict(word.partition("=")[::2] for word in words[1:])
    since = fields.get("paused", "")
    if not since.isdigit():
        return None
    return Pause(int(since), who(fields.get("paused_by")))


def pause(by: str = "unknown") -> bool:
    """Stop reading Kafka; True if this changed anything."""
    global paused, _pause
    with _lock:
        was, paused = paused, True
        if not was:
            _pause = Pause(int(time.time() * 1000), who(by))
        metrics.PAUSED.set(1)
    if not was:
        logger.info("paused reading Kafka (by %s); buffered records are still written", by)
    return not was


def resume(by: str = "unknown") -> bool:
    """Read Kafka again; True if this changed anything."""
    global paused, _pause
    with _lock:
        was, paused, _pause = paused, False, None
        metrics.PAUSED.set(0)
    if was:
        logger.info("resumed reading Kafka (by %s)", by)
    return was


def restore(metadata: Iterable[str | None], group: str) -> Pause | None:
    """Start paused when a commit of the group records a pause (`metadata`: the committed
    metadata of every partition of the flow's topics); the earliest one is kept. One line
    says so and how to resume."""
    global paused, _pause
    found = [p for p in map(recorded, metadata) if p is not None]
    if not found:
        return None
    first = min(found, key=lambda p: p.since_ms)
    with _lock:
        if paused:
            return _pause
        paused, _pause = True, first
        metrics.PAUSED.set(1)
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(first.since_ms / 1000))
    logger.info(
        "starting paused: group %s was paused since %s by %s (recorded in its committed "
        "offsets); nothing is read until `es-sink resume` (PUT /resume on every process)",
        group, since, first.by,
    )  # fmt: skip
    return first
