"""What happens to a failed record: ERRORS_TOLERANCE and the dead-letter circuit breaker.

With `none` the first failure stops the flow: raised inside the epoch by the sink (so its
offsets are never committed), or held by the processor until the records before it are
written (`flows.halt`). With `all` failures become dead letters until the breaker trips: more
than DLQ_MAX_CONSECUTIVE failures in a row, or a failed share above DLQ_MAX_RATIO once
DLQ_RATIO_MIN_RECORDS records were seen. A tripped breaker stops the flow the same way, so
a broken deploy does not pour a whole topic into the dead-letter topic.

With `log` (Kafka Connect's `errors.tolerance=all` with `errors.log.enable=true` and no
dead-letter topic) `failed()` writes one WARNING line per failed record instead (its
coordinates, stage and error, secrets masked; its key and value only with
ERRORS_LOG_VALUES, which also keeps the first bytes a decode error quotes; a reason from
Elasticsearch or a transform may still quote a field's value, as in Kafka Connect's log)
and counts it in `es_sink_records_skipped{reason="failed_<stage>"}`; the
caller then drops it. The breaker applies unchanged. A record that trips the breaker is not
logged as skipped: the flow stops on it, and nothing from it on is committed.

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
from typing import get_args

from sinks import metrics
from sinks.dead_letter.config import ErrorTolerance
from sinks.dead_letter.headers import MAX_MESSAGE_CHARS
from sinks.errors import DeadLetterLimitError, RecordFailedError
from sinks.model import DeadLetter, Stage
from sinks.secrets import redact

logger = logging.getLogger(__name__)

LOGGED_VALUE_CHARS = 2000
"""ERRORS_LOG_VALUES: how much of a key's or value's repr a skipped record's line shows."""
PAYLOAD_QUOTE = "; payload starts "
"""How a decode error ends when it quotes the record's first bytes (flows.decode.common):
without ERRORS_LOG_VALUES the line leaves that part out, as it leaves out the value."""
_REASONS = {stage: f"failed_{stage}" for stage in get_args(Stage)}


class ErrorPolicy:
    """Decides whether failures are dead-lettered or stop the flow."""

    def __init__(self, tolerance: ErrorTolerance, where: str) -> None:
        self.tolerate = tolerance.tolerate
        self.max_consecutive = tolerance.max_consecutive
        self.max_ratio = tolerance.max_ratio
        self.min_records = tolerance.min_records
        self.where = where
        self.secrets = tolerance.secrets
        self.skips = tolerance.log
        """ERRORS_TOLERANCE=log: `failed()` logs the record; the caller drops it."""
        self._log_values = tolerance.log_values
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
        if self.skips:
            self._log_skipped(dl)

    def _log_skipped(self, dl: DeadLetter) -> None:
        """ERRORS_TOLERANCE=log: the one line that is all that remains of a skipped record."""
        rec = dl.record
        message = dl.message
        if not self._log_values and PAYLOAD_QUOTE in message:
            message = message.split(PAYLOAD_QUOTE, 1)[0] + "; payload not shown"
        line = (
            f"skipped a failed record (ERRORS_TOLERANCE=log): topic={rec.topic} "
            f"partition={rec.partition} offset={rec.offset} stage={dl.stage} "
            f"error={dl.error_class}: {self._shown(message, MAX_MESSAGE_CHARS)}"
        )
        if self._log_values:
            line += f" key={self._shown(repr(rec.key), LOGGED_VALUE_CHARS)}"
            line += f" value={self._shown(repr(rec.value), LOGGED_VALUE_CHARS)}"
        logger.warning("%s", line)
        metrics.SKIPPED.labels(_REASONS[dl.stage]).inc()

    def _shown(self, text: str, limit: int) -> str:
        """`text` on one line, secrets masked (before the cut: no half secret survives it)."""
        text = redact(text, self.secrets).replace("\r", "\\r").replace("\n", "\\n")
        return text if len(text) <= limit else f"{text[: limit - 15]}... (truncated)"

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
