"""The latency runs' senders stamp pre-encoded documents (`tools.bench.data.LatencyDocs`): record
`seq` must be `make_doc`'s document `seq % POOL` with `lat_seq` and `lat_ts` set, encoded
as `orjson.dumps` would, so that cheaper senders send documents of the same shape; and
`lat_ts` is when a record was due."""

from __future__ import annotations

import random

import orjson
import pytest

from tools.bench.data import SEED, LatencyDocs, due_time_ms, make_doc


@pytest.mark.parametrize("variant", ["small", "large"])
def test_stamped_values_are_make_docs_documents(variant: str) -> None:
    docs = LatencyDocs(variant)
    rng = random.Random(SEED + 1)
    made = [make_doc(variant, rng, i) for i in range(LatencyDocs.POOL)]
    for seq in (0, 1, 517, LatencyDocs.POOL - 1, LatencyDocs.POOL, 3 * LatencyDocs.POOL + 5):
        expected = dict(made[seq % LatencyDocs.POOL], lat_seq=seq, lat_ts=1_764_460_800_123)
        assert docs.value(seq, 1_764_460_800_123) == orjson.dumps(expected)


def test_lat_ts_is_the_schedule_not_the_clock() -> None:
    t0 = 1_764_460_800.25
    assert due_time_ms(t0, 1000.0, 0) == 1_764_460_800_250
    assert due_time_ms(t0, 1000.0, 1500) == 1_764_460_801_750
    assert due_time_ms(t0, 28_000.0, 28_000) == 1_764_460_801_250
