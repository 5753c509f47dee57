"""`scripts/chaos` in short form against the suite's broker and node: real flow processes,
real SIGKILLs, and an audit that nothing was lost, changed or invented, and that every bad
record reached the dead-letter topic. One layout per mode keeps it under two minutes each;
`scripts/chaos` with no arguments is the full run (200,000 records, 20+ kills per mode)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, Services

pytestmark = pytest.mark.integration

SUMMARY = re.compile(r"^mode=(\w+) (.*)$", re.MULTILINE)


@pytest.mark.timeout(280)
@pytest.mark.parametrize(("mode", "layout"), [("recovery", "2w"), ("offsets", "2p")])
def test_chaos_kills_lose_nothing(
    services: Services, mode: str, layout: str, tmp_path: Path
) -> None:
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "chaos"),
        "--records", "20000",
        "--kills", "5",
        "--modes", mode,
        "--layouts", layout,
        "--bootstrap", services.kafka,
        "--es", services.es_url,
        "--timeout", "240",
        "--workdir", str(tmp_path / "chaos"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=270, check=False)
    report = f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-6000:]}"
    lines = SUMMARY.findall(proc.stdout)
    assert [m for m, _ in lines] == [mode], report
    fields = dict(kv.split("=", 1) for kv in lines[0][1].split())
    counts = {k: int(v) for k, v in fields.items() if v.isdigit()}
    assert counts["lost"] == counts["wrong"] == counts["extra"] == 0, report
    assert counts["dlq_found"] >= counts["dlq_expected"] > 0, report
    assert counts["dlq_good"] == counts["dlq_mismatch"] == counts["commit_mismatch"] == 0, report
    assert fields["completed"] == "true", report
    assert counts["kills"] >= 3, report  # else the backfill outran the kills: proves little
    assert counts["records"] == 20000, report
    assert proc.returncode == 0, report


def test_ground_truth_and_offset_checks_catch_losses() -> None:
    """Negative control (no services): the harness's own checks must flag a loss."""
    from chaos.invariants import Durable, Invariants
    from chaos.workload import Rec, expected_state

    recs = [
        Rec("good", b"a", b'{"v":1}', None, 0, 0),
        Rec("good", b"a", b'{"v":2}', None, 0, 1),
        Rec("mapping-long", b"a", b'{"n":"x"}', "index", 0, 2),
        Rec("tombstone", b"a", None, None, 0, 3),
        Rec("good-null-key", None, b'{"v":3}', None, 1, 0),
    ]
    exp = expected_state("t", recs)
    # The last good write wins: neither the bad record nor the tombstone changes "a".
    assert exp.docs == {"a": (1, 1), "t-1-0": (0, 4)}
    assert exp.bad == {(0, 2): 2}
    assert exp.good == {(0, 0), (0, 1), (0, 3), (1, 0)}
    inv = Invariants(
        es=None, bootstrap="127.0.0.1:1", topic="t", index="t", dlq_topic="d", group="g",
        recs=recs,
    )  # fmt: skip
    try:
        durable = Durable({"a": 1, "t-1-0": 0}, {(0, 2)}, {})
        assert inv.check(durable, {0: 4, 1: 1}, "ok") == 0
        # "a" only at version 0, the bad record not dead-lettered, the null-key doc missing.
        assert inv.check(Durable({"a": 0}, set(), {}), {0: 4, 1: 1}, "lossy") == 3
        # Offsets below the lost writes claim nothing about them.
        assert inv.check(Durable({"a": 0}, set(), {}), {0: 1, 1: 0}, "early") == 0
    finally:
        inv.close()
