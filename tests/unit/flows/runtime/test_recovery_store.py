"""Reading the keys of a real Bytewax 0.21.1 recovery store, and resuming one written with
more sink partitions than the run lists."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition
from bytewax.recovery import RecoveryConfig, init_db_dir
from bytewax.testing import TestingSource, run_main

from flows.errors import ConfigError
from flows.runtime.recovery_store import SOURCE_KEY, sink_parts, stored_keys


class _Part(StatefulSinkPartition[int, None]):
    def write_batch(self, items: list[int]) -> None:
        pass

    def snapshot(self) -> None:
        return None


class _Sink(FixedPartitionedSink[int, None]):
    """Like ElasticsearchSink: `es-NNNN` keys, items keyed by a partition number."""

    def __init__(self, count: int, directory: Path) -> None:
        self.count = count
        self.directory = directory

    def list_parts(self) -> list[str]:
        return sink_parts("es", self.count, self.directory)

    def part_fn(self, item_key: str) -> int:
        return int(item_key)

    def build_part(self, step_id: str, for_part: str, resume_state: None) -> _Part:
        return _Part()


def _run(directory: Path, count: int, items: int) -> None:
    flow = Dataflow("store")
    nums = op.input("in", flow, TestingSource(list(range(items))))
    keyed = op.map("key", nums, lambda i: (str(i % count), i))
    op.output("out", keyed, _Sink(count, directory))
    run_main(flow, epoch_interval=timedelta(0), recovery_config=RecoveryConfig(directory))


def test_a_store_written_with_more_sink_partitions_resumes_with_fewer(tmp_path):
    init_db_dir(tmp_path, 2)
    _run(tmp_path, 12, 48)
    # Bytewax 0.21.1's files: every partition that saw an item is stored, whatever step.
    assert stored_keys(SOURCE_KEY, tmp_path) == []
    keys = [f"es-{i:04d}" for i in range(12)]
    assert sink_parts("es", 12, tmp_path) == keys
    assert sink_parts("es", 4, tmp_path) == keys  # the first 4 routed, 8 kept idle
    assert sink_parts("dlq", 4, tmp_path) == [f"dlq-{i:04d}" for i in range(4)]
    _run(tmp_path, 4, 8)  # panicked before: Key "es-0004" is not in this worker's routing map
    assert stored_keys(SOURCE_KEY, tmp_path) == []


def test_without_a_recovery_directory_nothing_is_stored(tmp_path):
    assert stored_keys(SOURCE_KEY, tmp_path / "missing") == []
    assert sink_parts("es", 2, tmp_path / "missing") == ["es-0000", "es-0001"]


def test_stored_sink_keys_that_would_sort_among_the_routed_ones_are_refused(tmp_path):
    init_db_dir(tmp_path, 1)
    conn = sqlite3.connect(tmp_path / "part-0.sqlite3")
    with conn:
        conn.execute(
            "INSERT INTO snaps (step_id, state_key, snap_epoch, ser_change) "
            "VALUES ('f.elasticsearch', 'es-10000', 1, NULL)"
        )
    conn.close()
    assert sink_parts("es", 8, tmp_path)[8:] == ["es-10000"]  # sorts after es-0007: fine
    with pytest.raises(ConfigError, match="ES_SINK_PARTITIONS"):
        sink_parts("es", 3000, tmp_path)
