"""Graceful stop on SIGTERM/SIGINT: sources stop reading, sinks flush, offsets commit, exit 0.

The handler only sets a flag; each source partition sees it, stops reading, and ends after
its last offset is committed (see `flows.source`), so the dataflow completes normally.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

logger = logging.getLogger(__name__)
_requested = threading.Event()


def requested() -> bool:
    """True once SIGTERM or SIGINT arrived."""
    return _requested.is_set()


def request() -> None:
    """Ask the flow to finish as if a signal had arrived (tests, embedding)."""
    _requested.set()


def install() -> None:
    """Route SIGTERM and SIGINT to a graceful stop; a second signal stops at once."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _requested.is_set():
        logger.warning("second %s: stopping now without flushing", signal.Signals(signum).name)
        raise KeyboardInterrupt
    logger.warning(
        "%s: finishing the current epoch, flushing and committing, then exiting",
        signal.Signals(signum).name,
    )
    _requested.set()
