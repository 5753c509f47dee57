"""What happens to a failed record: ERRORS_TOLERANCE and the dead-letter circuit breaker.

With `none` the first failure stops the flow (raised inside the epoch, so its offsets are
never committed). With `all` failures become dead letters until the breaker trips: more
than DLQ_MAX_CONSECUTIVE failures in a row, or a failed share above DLQ_MAX_RATIO once
DLQ_RATIO_MIN_RECORDS records were seen. A tripped breaker stops the flow the same way, so
a broken deploy does not pour a whole topic into the dead-letter topic.
"""

from __future__ import annotations

import logging

from flows.config import Settings
from flows.errors import DeadLetterLimitError, RecordFailedError
from flows.record import DeadLetter

logger = logging.getLogger(__name__)


class ErrorPolicy:
    """Decides, per batch, whether failures are dead-lettered or stop the flow."""

    def __init__(self, settings: Settings, where: str) -> None:
        self.tolerate = settings.errors_tolerance == "all"
        self.max_consecutive = settings.dlq_max_consecutive
        self.max_ratio = settings.dlq_max_ratio
        self.min_records = settings.dlq_ratio_min_records
        self.where = where
        self.consecutive = 0
        self.seen = 0
        self.failed = 0

    def check(self, ok: int, failures: list[DeadLetter], trailing: int) -> None:
        """Account a batch of `ok` successes and `failures`; raise to stop the flow.

        `trailing` is how many failures ended the batch with no success after them (the
        run that continues into the next batch); when the batch had no success at all the
        run simply grows.
        """
        self.seen += ok + len(failures)
        if not failures:
            if ok:
                self.consecutive = 0
            return
        first = failures[0]
        if not self.tolerate:
            rec = first.record
            raise RecordFailedError(
                f"{rec.topic}/{rec.partition}@{rec.offset}",
                first.stage,
                f"{first.error_class}: {first.message}",
            )
        self.failed += len(failures)
        self.consecutive = self.consecutive + len(failures) if ok == 0 else trailing
        if self.max_consecutive and self.consecutive > self.max_consecutive:
            msg = (
                f"{self.where}: {self.consecutive} records in a row failed "
                f"(DLQ_MAX_CONSECUTIVE={self.max_consecutive}); last: {first.stage} "
                f"{first.error_class}: {first.message}"
            )
            raise DeadLetterLimitError(msg)
        if self.max_ratio and self.seen >= self.min_records:
            ratio = self.failed / self.seen
            if ratio > self.max_ratio:
                msg = (
                    f"{self.where}: {self.failed} of {self.seen} records failed "
                    f"({ratio:.1%} > DLQ_MAX_RATIO={self.max_ratio}); last: {first.stage} "
                    f"{first.error_class}: {first.message}"
                )
                raise DeadLetterLimitError(msg)
