"""Per-process resources (one client, producer, pool or budget per process and config)."""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def locked_cache(make: Callable[[K], V]) -> Callable[[K], V]:
    """`functools.cache` for per-process resources whose first calls may race (worker threads
    build their first sink partitions at once): one lock serializes the first call per key,
    so every caller gets the same object; later calls are a dict lookup without the lock."""
    made: dict[K, V] = {}
    lock = threading.Lock()

    @functools.wraps(make)
    def get(key: K) -> V:
        try:
            return made[key]
        except KeyError:
            pass
        with lock:
            if key not in made:
                made[key] = make(key)
            return made[key]

    return get


T = TypeVar("T")


def members(live: weakref.WeakSet[T]) -> list[T]:
    """The objects of a WeakSet other threads add to or drop from: copying it raises
    RuntimeError when its size changes meanwhile (a partition built, a dead one collected),
    so copy again."""
    while True:
        try:
            return list(live)
        except RuntimeError:
            continue
