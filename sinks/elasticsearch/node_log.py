"""elastic_transport's node-pool lines, folded so that they inform instead of flood.

The transport logs a WARNING each time a node fails and each time it answers again. Both
are noise as they come: a node that answers a probe with an error status (the
integ-test-zip answers `GET /` with 405, which server detection asks on purpose) "fails"
once and is "marked alive" at once, and an outage logs a line per failed request of every
client. The sink logs its own retries with their reason; this filter keeps, per node, the
first line of a run of failures (from the second failure in a row on) and one line a
`EVERY_S` after, with the count of lines folded, and says once that the node answers again.
"""

from __future__ import annotations

import logging
import math
import threading
import time

__all__ = ["EVERY_S", "NodePoolLines", "install"]

EVERY_S = 60.0
LOGGER = "elastic_transport.node_pool"

_FAILED = "Node %r has failed for %i times in a row, putting on %i second timeout"
_ALIVE = "Node %r has been marked alive after a successful request"


class NodePoolLines(logging.Filter):
    """Folds the node pool's failure and recovery lines, per node."""

    def __init__(self, every_s: float = EVERY_S) -> None:
        super().__init__()
        self._every_s = every_s
        self._lock = threading.Lock()
        self._shown_at: dict[str, float] = {}  # node -> when its last failure line was shown
        self._folded: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg not in (_FAILED, _ALIVE) or not isinstance(record.args, tuple):
            return True
        node = repr(record.args[0])
        with self._lock:
            if record.msg == _ALIVE:  # said only after a failure line was shown
                if self._shown_at.pop(node, None) is None:
                    return False
                self._folded.pop(node, None)
                record.msg, record.args = "Elasticsearch node %s answers again", (node,)
                return True
            failures = record.args[1]
            if isinstance(failures, int) and failures < 2:  # a probe's error status, a blip
                return False
            now = time.monotonic()
            if now - self._shown_at.get(node, -math.inf) < self._every_s:
                self._folded[node] = self._folded.get(node, 0) + 1
                return False
            self._shown_at[node] = now
            folded = self._folded.pop(node, 0)
        record.msg = "Elasticsearch node %s does not answer (%i failures in a row)%s"
        record.args = (node, failures, f"; {folded} such lines folded" if folded else "")
        return True


_installed = NodePoolLines()


def install() -> None:
    """Fold the node pool's lines in this process (idempotent)."""
    logger = logging.getLogger(LOGGER)
    if _installed not in logger.filters:
        logger.addFilter(_installed)
