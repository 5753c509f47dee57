"""Deeply nested JSON on the slow paths: see `sinks.deep` (re-exported here for decoding)."""

from __future__ import annotations

from sinks.deep import DEEP_LIMIT, deep_recursion

__all__ = ["DEEP_LIMIT", "deep_recursion"]
