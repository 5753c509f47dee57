"""The values that flow through the pipeline (defined in `sinks.model`, re-exported here:
`from flows.record import Doc` is the public API for Python transforms)."""

from __future__ import annotations

from sinks.model import MISSING, Action, DeadLetter, Doc, FieldPath, Headers, Record, Stage

__all__ = ["MISSING", "Action", "DeadLetter", "Doc", "FieldPath", "Headers", "Record", "Stage"]
