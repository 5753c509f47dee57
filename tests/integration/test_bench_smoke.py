"""Smoke tests of scripts/bench: a --quick run against the suite's Kafka and Elasticsearch
reports all seven systems with positive figures (the floor without latency), and a tiny
run of the other variants reports each beside its ceiling. Not timed tests: the numbers
are not checked, only that every system ran end to end (docs/benchmarks.md has the real
runs)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.flows import ROOT

pytestmark = pytest.mark.system

SYSTEMS = {"ceiling", "loop", "floor", "quix", "flow-1w", "flow-2w", "flow-2p"}
LATENCY = {"p50_ms", "p99_ms"}
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


@pytest.mark.timeout(600)  # scripts/provision made the Quix Streams virtualenv
def test_quick_bench_reports_every_system(services, tmp_path):
    out = tmp_path / "tools.bench.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "bench"), "--quick", "--json", str(out)]
    cmd += ["--bootstrap", services.kafka, "--es", services.es_url]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=540, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]

    rows = json.loads(out.read_text())
    assert [r["system"] for r in rows] == [
        "ceiling", "loop", "floor", "quix", "flow-1w", "flow-2w", "flow-2p"
    ], output[-3000:]  # fmt: skip
    for row in rows:
        assert set(row) == KEYS, row
        assert row["variant"] == "small", row
        # the floor sends only full bulks: no latency runs
        measured = KEYS - {"system", "variant"} - (LATENCY if row["system"] == "floor" else set())
        for key in measured:
            assert isinstance(row[key], int | float) and row[key] > 0, (key, row)
        if row["system"] == "floor":
            assert row["p50_ms"] is row["p99_ms"] is None, row
    assert next(r for r in rows if r["system"] == "ceiling")["ratio_to_ceiling"] == 1.0
    assert set(r["system"] for r in rows) == SYSTEMS
    # when each sampled document was indexed, apart from the harness's _refresh
    for d in json.loads(out.with_suffix(".details.json").read_text()):
        if d["system"] == "floor":
            continue
        assert d["ix_unmapped"] == 0 and d["ix_p50_ms"] is not None, d
        assert 0 < d["ix_p50_ms"] <= d["ix_p99_ms"] and d["refresh_p99_ms"] > 0, d
        # the broker's and Elasticsearch's CPU per record during the latency window
        assert d["live_cpu_us"] > 0 and d["live_kafka_us"] >= 0 <= d["live_es_us"], d
        # CPU between the 10% and 90% marks: none where a quick run used < 0.1 s there
        assert d["steady_us"] is None or d["steady_us"] > 0, d


NEW_VARIANTS = ["small-dlq5", "small-transforms", "small-avro", "small-p120"]


@pytest.mark.timeout(600)
def test_tiny_bench_runs_the_new_variants(services, tmp_path):
    """2,000 records per variant, the ceiling and flow-1w each (the variants' defaults, no
    latency runs; about 90 s): the bench itself fails a run whose index or dead-letter
    topic does not hold what the variant's dataset says."""
    out = tmp_path / "tools.bench.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "bench"), "--quick", "--records", "2000"]
    cmd += ["--variants", ",".join(NEW_VARIANTS), "--json", str(out)]
    cmd += ["--bootstrap", services.kafka, "--es", services.es_url]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=540, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]

    rows = json.loads(out.read_text())
    assert [(r["variant"], r["system"]) for r in rows] == [
        (v, s) for v in NEW_VARIANTS for s in ("ceiling", "flow-1w")
    ], output[-3000:]
    for row in rows:
        assert set(row) == KEYS, row
        for key in ("docs_per_s", "cpu_s_per_million", "peak_rss_mb", "ratio_to_ceiling"):
            assert isinstance(row[key], int | float) and row[key] > 0, (key, row)
        assert row["p50_ms"] is None and row["p99_ms"] is None, row  # latency: small, large
    details = {(d["variant"], d["system"]): d for d in json.loads(
        out.with_suffix(".details.json").read_text())}  # fmt: skip
    flow = {v: details[(v, "flow-1w")] for v in NEW_VARIANTS}
    assert (flow["small-dlq5"]["docs"], flow["small-dlq5"]["dead_letters"]) == (1900, 100)
    assert details[("small-dlq5", "ceiling")]["docs"] == 1900  # the good documents only
    assert flow["small-transforms"]["docs"] == 1960  # the example's filter drops 2%
    for d in flow.values():
        assert d["records"] == 2000 and d["peak_threads"] > 0 and d["searchable_s"] > 0, d
    assert "Schema Registry stand-in served 1 requests" in output, output[-3000:]
    assert "flow-1w by variant" in proc.stdout, proc.stdout


@pytest.mark.timeout(300)
def test_latency_without_the_harness_refreshing(services, tmp_path):
    """`--lat-poll-ms 0`: no `_refresh` while the records come (at 20 a second they made
    Elasticsearch's per-document cost and the flow's latency the harness's doing), so only
    the indexed latency is measured, from when each record was due."""
    out = tmp_path / "tools.bench.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "bench"), "--quick", "--lat-poll-ms", "0"]
    cmd += ["--systems", "ceiling,flow-1w", "--json", str(out)]
    cmd += ["--bootstrap", services.kafka, "--es", services.es_url]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    rows = json.loads(out.read_text())
    assert [r["system"] for r in rows] == ["ceiling", "flow-1w"], output[-3000:]
    assert all(r["p50_ms"] is None and r["p99_ms"] is None for r in rows), rows
    for d in json.loads(out.with_suffix(".details.json").read_text()):
        assert d["lat_poll_ms"] == 0 and d["refresh_p99_ms"] is None, d
        assert d["ix_unmapped"] == 0 and 0 < d["ix_p50_ms"] <= d["ix_p99_ms"], d
        assert d["latency_rate"] > 0 and d["saturated"] in (True, False), d
    flow = json.loads(out.with_suffix(".details.json").read_text())[1]
    assert flow["producer_late_ms"] is not None and flow["producer_late_ms"] >= 0, flow
