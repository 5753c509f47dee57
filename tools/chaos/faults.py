"""Faults inside Elasticsearch's answers, by an HTTP proxy in ES_HOSTS (`tests.support.es_proxy`).

The outage proxy (`tools.chaos.proxy`) relays bytes and can only cut the flow off; these faults
need a proxy that reads each `_bulk`:

* late bulks: one bulk now and then is held for longer than ES_REQUEST_TIMEOUT_S and then
  delivered, as a node delivers a bulk it had queued, whether or not its sender still
  lives; while held it is listed in `GET _tasks` with its X-Opaque-Id, as a queued bulk
  is. The `late` plan arms a hold and kills the flow while it lasts, so the bulk lands
  after a restarted flow began writing. Documents must still end at their newest write.
* item 429s: some items of some bulks are answered 429 without reaching the node, as a
  node with full write queues answers; the flow must send them again.

The chain is flow -> `tools.chaos.proxy.Proxy` (outages) -> `EsProxy` (these faults) -> node, so
a held bulk still lands while the flow is cut off or dead.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

from tests.support.es_proxy import BulkCall, EsProxy

REQUEST_TIMEOUT_S = 3
"""ES_REQUEST_TIMEOUT_S of the modes that hold bulks."""
HOLD_S = (REQUEST_TIMEOUT_S + 0.5, REQUEST_TIMEOUT_S + 1.5)
"""How long a late bulk is held: past the request timeout, and past a kill and restart of
the flow, yet within the lease a restarted flow waits for a dead owner's listed bulks (two
epochs plus the request timeout): a bulk held longer is read past, as documented."""
LATE_SHARE = 0.01
"""Share of bulks held without a `late` plan asking (a timeout in a running flow)."""
REJECT_BULK_SHARE = 0.3
REJECT_ITEM_SHARE = 0.1
_REJECTED = {
    "type": "es_rejected_execution_exception",
    "reason": "rejected execution of coordinating operation (chaos)",
}


@dataclass
class Faults:
    """The rule `EsProxy` runs on each `_bulk`, and what it did."""

    rng: random.Random
    late: bool
    rejects: bool
    held: int = 0
    """Bulks held past the request timeout."""
    rejected: int = 0
    """Items answered 429 by the proxy."""
    _armed: bool = False
    _holding: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def rule(self, call: BulkCall) -> None:
        with self._lock:
            if self.late and (self._armed or self.rng.random() < LATE_SHARE):
                self._armed = False
                self.held += 1
                self._holding += 1
                call.hold(self.rng.uniform(*HOLD_S))
                threading.Thread(target=self._released, args=(call,), daemon=True).start()
                return
            if self.rejects and self.rng.random() < REJECT_BULK_SHARE:
                for i in range(len(call.actions)):
                    if self.rng.random() < REJECT_ITEM_SHARE:
                        call.fake(i, 429, _REJECTED)
                        self.rejected += 1

    def _released(self, call: BulkCall) -> None:
        call.forwarded.wait()
        with self._lock:
            self._holding -= 1

    def arm(self) -> None:
        """Hold the next bulk (the `late` plan kills the flow while it is held)."""
        with self._lock:
            self._armed = True

    def holding(self) -> bool:
        with self._lock:
            return self._holding > 0

    def start(self, upstream: str) -> EsProxy:
        """An `EsProxy` to `upstream` running this rule (the caller closes it)."""
        proxy = EsProxy(upstream).__enter__()
        proxy.rule = self.rule
        return proxy
