"""`scripts/soak` in its 3-minute form against the suite's broker and a node of its own.

The flow runs as a two-process service at half the capacity it measured, meets a write
queue of 1 for 20 s from the first minute on (a node restart in, one out), then is
restarted by SIGTERM (each stop must exit 0); resources are sampled every 5 s, latency
~20 times a second. Passes when the audit finds nothing lost, wrong or extra, every bad
record and no good one dead-lettered, offsets at the end, every stop exited 0, no process
crashed, every sampled record showed up, and descriptors, threads and the recovery store
stayed flat (`tools.chaos.soak_report`). Three minutes leave no quiet stretch to judge memory on:
RSS is reported; the full 30-minute run judges it (docs/soak.md).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from tests.support.flows import Services
from tools.chaos.soak import Plan, Soak
from tools.chaos.soak_report import passed, report, summary, write

pytestmark = [pytest.mark.system, pytest.mark.long]

PORT = int(os.environ.get("ES_SINK_TEST_SOAK_ES_PORT", "19280"))
STACK_DIR = Path(os.environ.get("ES_SINK_TEST_STACK_DIR", "/var/tmp/es-sink-test") + "-soak")

PLAN = Plan(
    minutes=3,
    restart_every_s=100,
    slow_every_s=120,
    slow_s=20,
    sample_s=5,
    window_s=30,
    load=0.5,
    calibrate=40_000,
    keys=5_000,
    layout="2p",
    warmup_s=20,
)


@pytest.mark.timeout(900)
def test_a_three_minute_soak_loses_nothing_and_stays_flat(
    services: Services, tmp_path: Path
) -> None:
    t0 = time.monotonic()
    lines: list[str] = []

    def say(text: str) -> None:
        lines.append(f"[{time.monotonic() - t0:5.0f}s] {text}")

    soak = Soak(
        PLAN, bootstrap=services.kafka, es_port=PORT, stack_dir=STACK_DIR, workdir=tmp_path,
        run=uuid.uuid4().hex[:8], say=say,
    )  # fmt: skip
    out = soak.run()
    rep = report(soak, out, PLAN)
    write(rep, tmp_path / "soak.json")
    ok = passed(rep, out)
    line = summary(rep, ok)
    print(line)
    details = [*rep["unflat"], *out.bad_exits, *out.crashes]
    details += out.audit.details if out.audit else []
    assert ok, "\n".join([line, *lines, *details, f"runs: {rep['runs']}"])
    assert out.events, "no event happened"
    assert len(out.es_restarts) == 2, f"Elasticsearch restarts: {out.es_restarts}"
    assert [w for _, w in out.events] == ["slow", "fast", "restart"], out.events
    assert all(n > 0 for n in out.rejected), f"the write queue of 1 rejected: {out.rejected}"
    assert len(out.stops_s) >= 2, "the flow was never restarted"
