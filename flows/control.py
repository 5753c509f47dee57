"""Pause and resume: the operator's hold on reading Kafka (the status API's PUT /pause).

A paused process reads no more records; everything already read is still written, flushed,
snapshotted and committed as usual, because only the source looks at the flag (once per
batch). It is process-wide: every partition of every worker of this process.
"""

from __future__ import annotations

import logging
import threading

from flows import metrics

logger = logging.getLogger(__name__)

paused = False
"""Read by the source on every batch; written only through `pause` and `resume`."""
_lock = threading.Lock()  # the flag and its metric change together


def pause(reason: str = "PUT /pause") -> bool:
    """Stop reading Kafka; True if this changed anything."""
    global paused
    with _lock:
        was, paused = paused, True
        metrics.PAUSED.set(1)
    if not was:
        logger.info("paused reading Kafka (%s); buffered records are still written", reason)
    return not was


def resume(reason: str = "PUT /resume") -> bool:
    """Read Kafka again; True if this changed anything."""
    global paused
    with _lock:
        was, paused = paused, False
        metrics.PAUSED.set(0)
    if was:
        logger.info("resumed reading Kafka (%s)", reason)
    return was
