"""Graceful, bounded stop on SIGTERM/SIGINT (and the status API's PUT /stop, `stop`):
sources stop reading, sinks flush, offsets commit.

The first signal only sets a flag; each source partition sees it, stops reading, and ends
after its last offset is committed (see `flows.kafka.source`), so the dataflow completes normally
and the process exits 0. That needs Elasticsearch and Kafka to answer: when they do not
(an outage is exactly when operators stop things), the stop is bounded by
SHUTDOWN_TIMEOUT_S, like Kubernetes' grace period: then the process exits with status 1,
having committed only what was durable. A second signal exits at once (128 + signal).
Neither loses anything: offsets are committed only behind durable writes, so whatever was
not committed is read again by the next run.

Why a signal thread: Bytewax workers can be blocked inside a sink's `snapshot()` waiting
for a bulk that retries, and with several workers the main thread sits in Bytewax's Rust
code joining them, so a Python handler on the main thread may never run. The signals are
blocked in every thread and received by one thread of ours with `sigwait`, which runs
whatever the other threads are doing. A Python-level handler stays installed for threads
started before `install()` (they do not inherit the mask).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType

from flows.runtime.args import run_args

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)
TIMEOUT_EXIT_STATUS = 1

_requested = threading.Event()
_lock = threading.Lock()
_timeout_s: float | None = None  # set by install(); None: no watchdog (tests, embedding)
_signals_seen = 0
_for_good = False  # the operator asked for a stop through the status API (PUT /stop)
_cause = "requested"  # what the stop line says asked for a requested stop


def requested() -> bool:
    """True once SIGTERM or SIGINT arrived (or `request()` was called)."""
    return _requested.is_set()


def signalled() -> bool:
    """True once SIGTERM or SIGINT arrived."""
    return _signals_seen > 0


def wanted_gone() -> bool:
    """True once the operator asked for the process to end (a signal, or `stop()`): a drain
    begun for another reason, such as a restart, must not restart it."""
    return _signals_seen > 0 or _for_good


def cause() -> str:
    """What asked for a stop that no signal asked for (the stop line's parenthesis)."""
    return _cause


def request(reason: str = "stop requested", grace_s: float = 0.0, cause: str = "requested") -> bool:
    """Ask the flow to finish as if a signal had arrived (tests, embedding, restarts); True
    if this began the stop, False if one was under way already.

    When `install()` set a timeout, the stop is bounded by it (plus `grace_s`: a restart
    waits for the other processes of a cluster to notice too) like a signalled one.
    `cause` names the asker in the stop line (`flows.runtime.lifecycle`).
    """
    global _cause
    with _lock:
        if _requested.is_set():
            return False
        _requested.set()
        _cause = cause
    logger.warning("%s: finishing the current epoch, flushing and committing, then exiting", reason)
    _arm_timeout(grace_s)
    return True


def stop(reason: str, cause: str) -> bool:
    """The operator's stop through the status API (PUT /stop): as SIGTERM, the process ends
    once it flushed and committed, bounded by SHUTDOWN_TIMEOUT_S. A drain under way for a
    restart ends in an exit instead, bounded by SHUTDOWN_TIMEOUT_S alone. True if this
    began the stop."""
    global _for_good
    with _lock:
        final = _for_good or _signals_seen > 0  # an operator's stop already: nothing changes
        under_way, _for_good = _requested.is_set(), True
    if not under_way:
        return request(reason, cause=cause)
    if not final:
        logger.warning("%s: the stop under way ends the process, within SHUTDOWN_TIMEOUT_S", reason)
        _arm_timeout(0.0)
    return False


def _arm_timeout(grace_s: float) -> None:
    """Exit with status 1 once SHUTDOWN_TIMEOUT_S (plus `grace_s`) has passed from now."""
    if _timeout_s:
        threading.Thread(
            target=_exit_after,
            args=(_timeout_s, grace_s),
            name="es-sink-stop-timeout",
            daemon=True,
        ).start()


def install(timeout_s: float = 30.0) -> None:
    """Route SIGTERM and SIGINT to a graceful stop bounded by `timeout_s` (0: unbounded);
    a second signal exits at once. Call it from the main thread, before starting clients
    (their threads then inherit the blocked signals)."""
    global _timeout_s
    if threading.current_thread() is not threading.main_thread():
        return
    _timeout_s = timeout_s or None
    for signum in SIGNALS:
        signal.signal(signum, _on_python_signal)
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    threading.Thread(target=_wait_for_signals, name="es-sink-signals", daemon=True).start()


def _wait_for_signals() -> None:
    while True:
        _on_signal(signal.sigwait(SIGNALS))


def _on_python_signal(signum: int, frame: FrameType | None) -> None:
    _on_signal(signum)


def _on_signal(signum: int) -> None:
    global _signals_seen
    name = signal.Signals(signum).name
    with _lock:
        _signals_seen += 1
        first = _signals_seen == 1
    if not first:
        logger.warning("second %s: exiting now without flushing (nothing is lost)", name)
        exit_now(128 + signum)
    if requested():
        # A drain another part of the flow asked for (a restart, with its grace) is under
        # way: the operator's signal still bounds it by SHUTDOWN_TIMEOUT_S alone.
        logger.warning("%s: the stop under way must finish within SHUTDOWN_TIMEOUT_S", name)
        _arm_timeout(0.0)
        return
    request(name)


_returned = threading.Event()


def returned() -> None:
    """The dataflow has returned (called from the exit hooks): the stop finished, so the
    timeout no longer applies to what the hooks still do (the stop line asks Kafka for the
    committed offsets; a restart executes the command line again)."""
    _returned.set()


def _exit_after(timeout_s: float, grace_s: float) -> None:
    if _returned.wait(timeout_s + grace_s):
        return
    try:
        why = "is Elasticsearch or Kafka unreachable?"
        if run_args().processes > 1:  # an epoch ends only once every process finished it
            why = f"were the other processes of the cluster stopped too (es-sink stop)? Or {why}"
        logger.error(
            "the graceful stop did not finish within SHUTDOWN_TIMEOUT_S=%gs%s (%s); exiting "
            "with status %d; what was not committed is read again by the next run",
            timeout_s,
            f" plus {grace_s:g}s for the other processes to restart too" if grace_s else "",
            why,
            TIMEOUT_EXIT_STATUS,
        )
    finally:  # the last resort must end the process, whatever the line did
        exit_now(TIMEOUT_EXIT_STATUS)


def exit_now(status: int) -> None:
    """Leave now, without flushing or committing (a stop that cannot finish, a stalled
    cluster): Bytewax would join worker threads that wait on Elasticsearch forever. A
    flush that fails (stdout a closed pipe) must not keep the process alive."""
    try:
        flush_logs()
    finally:
        os._exit(status)


def flush_logs() -> None:
    """Write out what was logged, before the process image ends without Python's cleanup."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
