"""The stand-in for examples/es-sink.yaml's `python: mycompany.transforms:enrich` in the
`small-transforms` variant: a user's own function of the usual size (one derived field).
Imports nothing, so the flow process loads it from the bench's copy of the sources."""

from __future__ import annotations

from typing import Any


def enrich(doc: Any) -> Any:
    """Add `amount_cents` (the amount as an integer of cents)."""
    src = doc.source
    if src is not None and "amount" in src:
        src["amount_cents"] = round(src["amount"] * 100)
    return doc
