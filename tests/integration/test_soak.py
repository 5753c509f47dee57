"""`scripts/soak` in its 3-minute form against the suite's broker and a node of its own.

The flow runs as a two-process service at half the capacity it measured, is restarted by
SIGTERM every minute (each stop must exit 0), and meets a write queue of 1 (a node
restart in, one out) and a plain node restart; resources are sampled every 5 s, latency
~20 times a second. Passes when the audit finds nothing lost, wrong or extra, every bad
record and no good one dead-lettered, offsets at the end, every stop exited 0, no process
crashed, every sampled record showed up, and descriptors, threads and the recovery store
stayed flat (`chaos.soak_report`). Three minutes leave no quiet stretch to judge memory on:
RSS is reported; the full 30-minute run judges it (docs/soak.md).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from chaos.soak import Plan, Soak
from chaos.soak_report import passed, report, summary, write
from tests.conftest import Services

pytestmark = pytest.mark.integration

PORT = int(os.environ.get("ES_SINK_TEST_SOAK_ES_PORT", "19280"))
STACK_DIR = Path(os.environ.get("ES_SINK_TEST_STACK_DIR", "/var/tmp/es-sink-test") + "-soak")

PLAN = Plan(
    minutes=3,
    restart_every_s=60,
    slow_every_s=90,
    slow_s=20,
    sample_s=5,
    window_s=30,
    load=0.5,
    calibrate=20_000,
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
    assert [what for what, _ in out.es_restarts], "Elasticsearch was never restarted"
    assert len(out.restarts) >= 2, "the flow was never restarted"
