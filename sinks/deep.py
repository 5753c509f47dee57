"""Deeply nested JSON on the slow paths.

Decoding accepts up to 1,024 levels (orjson's limit), but orjson encodes at most 254, and
the standard library's C code stops at Python's recursion limit (1,000 by default). The
rare paths that must re-walk such a document raise the limit for the call.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

DEEP_LIMIT = 5000


@contextmanager
def deep_recursion() -> Iterator[None]:
    """Run the body with a recursion limit high enough for 1,024 levels of JSON."""
    old = sys.getrecursionlimit()
    if old < DEEP_LIMIT:
        sys.setrecursionlimit(DEEP_LIMIT)
    try:
        yield
    finally:
        if old < DEEP_LIMIT:
            sys.setrecursionlimit(old)
