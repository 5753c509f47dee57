"""What happens to a failed record: ERRORS_TOLERANCE and the dead-letter circuit breaker.

With `none` the first failure stops the flow: raised inside the epoch by the sink (so its
offsets are never committed), or held by the processor until the records before it are
written (`flows.halt`). With `all` failures become dead letters until the breaker trips: more
than DLQ_MAX_CONSECUTIVE failures in a row, or a failed share above DLQ_MAX_RATIO once
DLQ_RATIO_MIN_RECORDS records were seen. A tripped breaker stops the flow the same way, so
a broken deploy does not pour a whole topic into the dead-letter topic.

Callers keep the run of consecutive failures in a local variable while they walk a batch
(starting from `consecutive`, reset to 0 on each success), call `failed()` for each
failure and `end_batch()` once: the per-record cost is an integer update.

One policy may be shared by the worker threads of a process (the processor's is):
`end_batch()` updates the counters under a lock, once per batch, and a batch that only
continued the run it read from `consecutive` adds its failures to the run as it stands
then, so concurrent batches do not overwrite each other's failures.
"""

from __future__ import annotations

import logging
import threading

from sinks.dead_letter.config import ErrorTolerance
from sinks.errors import DeadLetterLimitError, RecordFailedError
from sinks.model import DeadLetter
from sinks.secrets import redact

logger = logging.getLogger(__name__)


class ErrorPolicy:
    """Decides whether failures are dead-lettered or stop the flow."""

    def __init__(self, tolerance: ErrorTolerance, where: str) -> None:
        self.tolerate = tolerance.tolerate
        self.max_consecutive = tolerance.max_consecutive
        self.max_ratio = tolerance.max_ratio
        self.min_records = tolerance.min_records
        self.where = where
        self.secrets = tolerance.secrets
        self._consecutive = 0
        self.seen = 0
        self.failed_total = 0
        self._lock = threading.Lock()
        self._read = threading.local()  # the run each thread's batch started from

    @property
    def consecutive(self) -> int:
        """Failures in a row at the end of the last batch (the run continues across batches)."""
        value = self._consecutive
        self._read.run = value
        return value

    def failed(self, dl: DeadLetter, run: int) -> None:
        """One failure, the `run`-th in a row; raise to stop the flow."""
        if not self.tolerate:
            err = self.stop_error(dl)
            logger.error("%s", err)
            raise err
        if self.max_consecutive and run > self.max_consecutive:
            why = f"{run} records in a row failed (DLQ_MAX_CONSECUTIVE={self.max_consecutive})"
            self._trip(why, dl)

    def stop_error(self, dl: DeadLetter) -> RecordFailedError:
        """The error that stops the flow on `dl` under ERRORS_TOLERANCE=none, secrets masked."""
        return RecordFailedError(
            dl.record.where, dl.stage, f"{dl.error_class}: {redact(dl.message, self.secrets)}"
        )

    def end_batch(self, ok: int, failed: int, run: int, last: DeadLetter | None = None) -> None:
        """Account a batch; `run` is the failure run it ended with. Raise on a ratio breach.

        A batch that only continued the run it read from `consecutive` (no success, `run`
        = that run + its failures) extends the run as it stands now, which another thread's
        batch may have moved since.
        """
        started = getattr(self._read, "run", None)
        self._read.run = None
        with self._lock:
            if ok == 0 and started is not None and run == started + failed:
                self._consecutive += failed
            else:
                self._consecutive = run
            self.seen += ok + failed
            self.failed_total += failed
            seen, failed_total = self.seen, self.failed_total
        if failed and self.max_ratio and seen >= self.min_records:
            ratio = failed_total / seen
            if ratio > self.max_ratio and last is not None:
                self._trip(
                    f"{failed_total} of {seen} records failed "
                    f"({ratio:.1%} > DLQ_MAX_RATIO={self.max_ratio})",
                    last,
                )

    def _trip(self, why: str, dl: DeadLetter) -> None:
        msg = (
            f"{self.where}: {why}; stopping. Last: {dl.record.where} "
            f"stage {dl.stage}: {dl.error_class}: {redact(dl.message, self.secrets)}"
        )
        logger.error("%s", msg)
        raise DeadLetterLimitError(msg)
