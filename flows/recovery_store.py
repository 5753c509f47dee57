"""Read which state keys a Bytewax recovery directory holds (read-only).

Bytewax 0.21.1 resumes every snapshot it finds for a step and panics (`Key ... is not in
this worker's routing map`) when no worker lists that key. So a source or sink that lists
fewer partitions than an earlier run (fewer workers, a lower ES_SINK_PARTITIONS, a topic
no longer configured) must list the stored keys too. The store is a directory of SQLite
files `part-<i>.sqlite3`; snapshots are rows of the `snaps` table
`(step_id, state_key, snap_epoch, ser_change)`, checked against bytewax 0.21.1's files.

Keys are matched by their shape, whatever step wrote them: a recovery directory belongs to
one dataflow, and a key listed in excess only adds an idle partition (nothing routes
items to it, nothing is loaded for it).
"""

from __future__ import annotations

import logging
import re
import sqlite3
from pathlib import Path

from flows.errors import ConfigError
from flows.runtime import run_args

logger = logging.getLogger(__name__)

SOURCE_KEY = re.compile(r"[^/]+/\d+")
"""A Kafka source partition's state key, `topic/partition` (a topic name never holds `/`)."""


def stored_keys(shape: re.Pattern[str], directory: Path | None = None) -> list[str]:
    """Sorted state keys that fully match `shape` in the recovery directory (this run's
    `-r` by default); empty without one. Each process sees only its own partition files,
    which is enough: the one that holds a key's snapshot lists it."""
    directory = directory if directory is not None else run_args().recovery_dir
    if directory is None:
        return []
    keys: set[str] = set()
    for path in sorted(Path(directory).glob("part-*.sqlite3")):
        try:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            try:
                rows = conn.execute("SELECT DISTINCT state_key FROM snaps").fetchall()
            finally:
                conn.close()
        except sqlite3.Error as e:
            logger.warning("recovery partition %s: cannot read its keys: %s", path, e)
            continue
        keys.update(k for (k,) in rows if isinstance(k, str) and shape.fullmatch(k))
    return sorted(keys)


def sink_parts(prefix: str, count: int, directory: Path | None = None) -> list[str]:
    """A partitioned sink's keys: `<prefix>-0000` ... for the `count` partitions items are
    routed to, then the stored ones of an earlier run with more partitions.

    Bytewax sorts the keys of all workers together and `part_fn` indexes that order, so the
    stored extras (numbered `count` and up) must sort after the routed ones: they do with
    four-digit numbers; items never reach them, and their snapshot stays None.
    """
    parts = [f"{prefix}-{i:04d}" for i in range(count)]
    shape = re.compile(rf"{re.escape(prefix)}-(\d+)")
    extra = [k for k in stored_keys(shape, directory) if k not in set(parts)]
    if extra and parts and min(extra) < parts[-1]:
        msg = (
            f"ES_SINK_PARTITIONS: the recovery directory holds sink partitions {extra[:3]} "
            f"that would sort among the {count} partitions of this run; use at most 9999"
        )
        raise ConfigError(msg)
    return parts + extra
