"""Transforms for integration tests that need a run to last several epochs."""

from __future__ import annotations

import time

from flows.record import Doc


def pause(doc: Doc) -> Doc:
    """Spend 0.2 ms per record, so 10,000 records take about two seconds."""
    time.sleep(0.0002)
    return doc
