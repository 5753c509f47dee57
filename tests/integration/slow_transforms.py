"""Transforms for integration tests that need a run to last several epochs."""

from __future__ import annotations

import time

from flows.record import Doc


def pause(doc: Doc) -> Doc:
    """Spend 0.2 ms per record, so 10,000 records take about two seconds."""
    time.sleep(0.0002)
    return doc


def half_second(doc: Doc) -> Doc:
    """Spend 0.5 s per record, so a batch of 5 records outlasts a 2 s epoch."""
    time.sleep(0.5)
    return doc


def tenth_of_a_second(doc: Doc) -> Doc:
    """Spend 0.1 s per record, so a run can be stopped while it still has records to read."""
    time.sleep(0.1)
    return doc
