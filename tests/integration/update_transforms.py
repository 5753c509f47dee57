"""Python transforms for tests/integration/test_updates.py."""

from __future__ import annotations

from flows.record import Doc


def tenant_index(doc: Doc) -> Doc:
    """The index from the record's data, unchecked (the sink checks it)."""
    assert doc.source is not None
    doc.index = f"tenant-{doc.source.pop('tenant')}"
    return doc


def action_from_source(doc: Doc) -> Doc:
    """A Python transform choosing the record's action (`how`, removed from the body)."""
    if doc.source is not None and "how" in doc.source:
        doc.action = doc.source.pop("how")
    return doc
