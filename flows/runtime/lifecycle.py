"""The last lines of a flow process: what it wrote and committed, and its exit status.

A stop ends with one INFO line (`stopped …: indexed …, committed …; exit status 0`), so an
operator reading the log knows the stop finished and what it left committed; before a
process executes itself again (`flows.kafka.discovery`: new partitions, PUT /restart) the line
ends `; restarting` instead. An error that
ends the process gets the line before its traceback, so that the error's own one line
(`flows.runtime.config_failure`, `flows.runtime.recovery_failure`) stays the last. A halt
(ERRORS_TOLERANCE=none) has its line before Bytewax's Rust panic and traceback: its reason
is said once more at interpreter exit, as the very last line, where an operator looks first.

None of this runs when the process ends through `os._exit` (a second signal,
SHUTDOWN_TIMEOUT_S), whose own lines say so.
"""

from __future__ import annotations

import atexit
import logging
import sys
from types import TracebackType

from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client import Counter

from flows import halt
from flows.config import Settings
from flows.runtime import shutdown
from sinks.elasticsearch import refusals
from sinks.metrics import DEAD_LETTERS, DOCS_INDEXED

logger = logging.getLogger(__name__)

__all__ = ["committed_offsets", "install", "log_restart", "stop_line"]

COMMITTED_TIMEOUT_S = 5.0
SHOWN_PARTITIONS = 8

_error: list[BaseException] = []  # the error that ends the process, if one does


def committed_offsets(
    settings: Settings, keys: list[tuple[str, int]]
) -> dict[tuple[str, int], int | None] | str:
    """The group's committed offset of each partition (None: none), or why Kafka did not say."""
    if not keys:
        return {}
    conf = settings.librdkafka("consumer", None, **{"group.id": settings.group_id, "log_level": 3})
    consumer = Consumer({**conf, "enable.auto.commit": "false"})
    try:
        tps = [TopicPartition(t, p) for t, p in keys]
        answer = consumer.committed(tps, timeout=COMMITTED_TIMEOUT_S)
        return {(tp.topic, tp.partition): tp.offset if tp.offset >= 0 else None for tp in answer}
    except (KafkaException, RuntimeError) as e:
        return f"unknown ({e})"
    finally:
        consumer.close()


def stop_line(
    why: str,
    indexed: int,
    dead_letters: int,
    committed: dict[tuple[str, int], int | None] | str,
    status: int | None,
) -> str:
    """The line a stop ends with (`status` None: the process executes itself again)."""
    if isinstance(committed, str):
        offsets = committed
    else:
        shown = [f"{t}/{p}@{'-' if o is None else o}" for (t, p), o in sorted(committed.items())]
        more = len(shown) - SHOWN_PARTITIONS
        offsets = " ".join(shown[:SHOWN_PARTITIONS]) + (f" and {more} more" if more > 0 else "")
        offsets = offsets or "no partition"
    then = "restarting" if status is None else f"exit status {status}"
    return (
        f"stopped{why}: indexed {indexed} documents, dead-lettered {dead_letters} records; "
        f"committed {offsets}; {then}"
    )


def _why(settings: Settings) -> str:
    if halt.HELD:
        return " (halted)"
    if _error:
        return " (failed)"
    if shutdown.signalled():
        return " (signal)"
    if shutdown.requested():
        return f" ({shutdown.cause()})"
    return " (end of the topics, KAFKA_STOP_AT_END)" if settings.stop_at_end else ""


def _total(counter: Counter) -> int:
    """A counter's count over all its labels."""
    return int(
        sum(s.value for m in counter.collect() for s in m.samples if s.name.endswith("_total"))
    )


def _log_stop(settings: Settings, restarting: bool = False) -> None:
    status = None if restarting else 1 if _error else 0
    committed = committed_offsets(settings, sorted(halt.EXAMINED))
    line = stop_line(_why(settings), _total(DOCS_INDEXED), _total(DEAD_LETTERS), committed, status)
    logger.info("%s", line)
    shutdown.flush_logs()


def log_restart(settings: Settings) -> None:
    """The stop line of a process about to execute itself again (`flows.kafka.discovery`): its
    own exit hook never runs then."""
    _log_stop(settings, restarting=True)


def _at_exit(settings: Settings) -> None:
    shutdown.returned()
    if not _error:
        _log_stop(settings)
    # The earliest failure of each partition: a record held by the processor, or one
    # Elasticsearch refused while the records before the held one were written.
    failures = refusals.refused()
    for key, (offset, error) in halt.HELD.items():
        if key not in failures or offset < failures[key][0]:
            failures[key] = (offset, error)
    if failures:
        logger.error("halted: %s", failures[min(failures)][1])
        shutdown.flush_logs()


def install(settings: Settings) -> None:
    """Say the stop line before the traceback of an error that ends the process, or at
    exit; and a halt's reason last."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        _error.append(error)
        _log_stop(settings)
        previous(kind, error, tb)

    sys.excepthook = hook
    atexit.register(_at_exit, settings)
