"""Sinks whose partitions are numbered (`es-0000`, `dlq-0000`, ...), items keyed by number.

Bytewax 0.21.1 resumes every snapshot it finds for a step and panics (`Key ... is not in
this worker's routing map`) when no worker lists that key. So a sink that lists fewer
partitions than an earlier run (fewer workers, a lower ES_SINK_PARTITIONS) must list the
stored keys too. The store is a directory of SQLite files `part-<i>.sqlite3`; snapshots are
rows of the `snaps` table `(step_id, state_key, snap_epoch, ser_change)`, checked against
bytewax 0.21.1's files. Keys are matched by their shape, whatever step wrote them: a
recovery directory belongs to one dataflow, and a key listed in excess only adds an idle
partition (nothing routes items to it, nothing is loaded for it).
"""

from __future__ import annotations

import logging
import re
import sqlite3
from pathlib import Path
from typing import Any

from bytewax.outputs import FixedPartitionedSink

from sinks.errors import ConfigError

logger = logging.getLogger(__name__)


class NumberedSink(FixedPartitionedSink[Any, None]):
    """A partitioned sink with `count` routed partitions `<prefix>-NNNN`; items are keyed by
    their partition number. No I/O here: a sink is part of the flow description."""

    def __init__(self, prefix: str, count: int, recovery_dir: Path | None) -> None:
        self._prefix = prefix
        self._partitions = count
        self._recovery_dir = recovery_dir

    def list_parts(self) -> list[str]:
        """`<prefix>-0000` ... in an order that matches the partition numbers, then any
        further partition of this prefix a recovery store holds (an earlier run had more):
        Bytewax cannot resume a stored key nobody lists; items never go there."""
        return sink_parts(self._prefix, self._partitions, self._recovery_dir)

    def part_fn(self, item_key: str) -> int:
        """Items are keyed by their partition number (see `flows.process`)."""
        return int(item_key)


def stored_keys(shape: re.Pattern[str], directory: Path | None) -> list[str]:
    """Sorted state keys that fully match `shape` in the recovery `directory`; empty without
    one. Each process sees only its own partition files, which is enough: the one that
    holds a key's snapshot lists it."""
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


def sink_parts(prefix: str, count: int, directory: Path | None) -> list[str]:
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
