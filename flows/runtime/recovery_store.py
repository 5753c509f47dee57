"""Read which state keys a Bytewax recovery directory holds (read-only).

Bytewax 0.21.1 resumes every snapshot it finds for a step and panics (`Key ... is not in
this worker's routing map`) when no worker lists that key. So a source or sink that lists
fewer partitions than an earlier run (fewer workers, a lower ES_SINK_PARTITIONS, a topic
no longer configured) must list the stored keys too. The reading itself is
`sinks.partitioned` (the sinks list their stored keys); this module adds this run's
recovery directory as the default.
"""

from __future__ import annotations

import re
from pathlib import Path

from flows.runtime.args import run_args
from sinks import partitioned

SOURCE_KEY = re.compile(r"[^/]+/\d+")
"""A Kafka source partition's state key, `topic/partition` (a topic name never holds `/`)."""


def stored_keys(shape: re.Pattern[str], directory: Path | None = None) -> list[str]:
    """Sorted state keys that fully match `shape` in the recovery directory (this run's
    `-r` by default); empty without one (see `sinks.partitioned.stored_keys`)."""
    return partitioned.stored_keys(
        shape, directory if directory is not None else run_args().recovery_dir
    )


def sink_parts(prefix: str, count: int, directory: Path | None = None) -> list[str]:
    """A partitioned sink's keys, with the stored extras of this run's recovery directory by
    default (see `sinks.partitioned.sink_parts`)."""
    return partitioned.sink_parts(
        prefix, count, directory if directory is not None else run_args().recovery_dir
    )
