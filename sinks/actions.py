"""Bulk action encoding lives in `sinks.elasticsearch.actions`; this module keeps the
`sinks.actions` names working (`ActionError` is published under this module's name in
the dead letters' `exception.class.name` header, and unpickled from here)."""

from __future__ import annotations

from sinks.elasticsearch.actions import MAX_ID_BYTES, MAX_VERSION, ActionBuilder, ActionError
from sinks.model import Action

__all__ = ["MAX_ID_BYTES", "MAX_VERSION", "Action", "ActionBuilder", "ActionError"]
