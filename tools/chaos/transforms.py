"""The transform the chaos flow runs (TRANSFORMS=tools.chaos.transforms:explode).

It leaves good documents untouched, so the expected final state is the produced JSON, and
raises for records that carry the trigger field: the only way to exercise the `transform`
dead-letter stage with real flow processes.

With CHAOS_RATE_PER_PROCESS=N it also caps the process at N records/s (`scripts/chaos
--rate`): a short run then lasts long enough for its kills to land between epochs instead
of all in the first one. Off by default, so the full run goes at the flow's real speed.
"""

from __future__ import annotations

import os
import threading
import time

from flows.record import Doc

TRIGGER = "explode"
_RATE = float(os.environ.get("CHAOS_RATE_PER_PROCESS") or 0)
_SLOT_S = 1 / _RATE if _RATE > 0 else 0.0
_lock = threading.Lock()
_next = 0.0


class ChaosTransformError(ValueError):
    """The record asked to fail in the transform stage."""


def _throttle() -> None:
    """Token bucket shared by the worker threads of this process; sleeps in >=10 ms steps."""
    global _next
    with _lock:
        now = time.monotonic()
        slot = max(_next, now - 0.05)  # at most 50 ms of burst credit
        _next = slot + _SLOT_S
    if slot - now > 0.01:
        time.sleep(slot - now)


def explode(doc: Doc) -> Doc:
    """Fail records whose document has a truthy `explode` field; pass the rest unchanged."""
    if _SLOT_S:
        _throttle()
    if doc.source is not None and doc.source.get(TRIGGER):
        msg = f"chaos: transform failure trigger in {doc.record.coordinates}"
        raise ChaosTransformError(msg)
    return doc
