"""Smoke test of scripts/bench: a --quick run against the suite's Kafka and Elasticsearch
reports all six systems with positive figures. Not a timed test: the numbers are not
checked, only that every system ran end to end (docs/benchmarks.md has the real runs)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration

SYSTEMS = {"ceiling", "loop", "quix", "flow-1w", "flow-2w", "flow-2p"}
KEYS = {
    "system",
    "variant",
    "docs_per_s",
    "cpu_s_per_million",
    "peak_rss_mb",
    "p50_ms",
    "p99_ms",
    "ratio_to_ceiling",
}


@pytest.mark.timeout(900)  # the first run also creates the Quix Streams virtualenv
def test_quick_bench_reports_every_system(services, tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "bench"), "--quick", "--json", str(out)]
    cmd += ["--bootstrap", services.kafka, "--es", services.es_url]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=840, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]

    rows = json.loads(out.read_text())
    assert [r["system"] for r in rows] == [
        "ceiling", "loop", "quix", "flow-1w", "flow-2w", "flow-2p"
    ], output[-3000:]  # fmt: skip
    for row in rows:
        assert set(row) == KEYS, row
        assert row["variant"] == "small", row
        for key in KEYS - {"system", "variant"}:
            assert isinstance(row[key], int | float) and row[key] > 0, (key, row)
    assert next(r for r in rows if r["system"] == "ceiling")["ratio_to_ceiling"] == 1.0
    assert set(r["system"] for r in rows) == SYSTEMS
