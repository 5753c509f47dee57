"""Python transforms and a concurrent writer for tests/integration/test_updates.py and
test_scripted_updates.py."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from elasticsearch import ConflictError

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


@contextlib.contextmanager
def racing(write: Callable[[int], None]) -> Iterator[list[int]]:
    """Call `write(0)`, `write(1)`, ... on another thread while the block runs (a second
    writer of the same document); yields the numbers written so far. A write that loses
    its own race (a 409 even after its retries) is not counted, and the writer goes on:
    it is there to make conflicts for the flow, and dying of one left the test with fewer
    (a CI run saw it stop once, after enough writes to pass)."""
    stop = threading.Event()
    done: list[int] = []

    def loop() -> None:
        j = 0
        while not stop.is_set():
            try:
                write(j)
            except ConflictError:
                pass
            else:
                done.append(j)
            j += 1

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield done
    finally:
        stop.set()
        thread.join(30)
