"""`scripts/chaos` in short form against the suite's broker and node: real flow processes, real
SIGKILLs and SIGTERMs during Elasticsearch outages, and an audit that nothing was lost,
changed or invented, and that every bad record reached the dead-letter topic. One short run
per mode (~45-90 s each on 2 cores): `recovery` rescales 1w,3w,2p,1w,9w,1w over one recovery
store, `offsets` deletes by tombstone with ES_ROUTING=key on 3 shards, `grow` adds
partitions while the flow has a backlog and moves keys to them, `late` delivers bulks held
past timeouts and kills (VERSION=none), `update` and `script` (WRITE_METHOD=update, and a
counting Painless script on OpenSearch) delete by tombstone while some items are answered
429, `reset` has the broker delete a paused partition's unread records under
KAFKA_AUTO_OFFSET_RESET=latest, `strict` stops on the earliest bad record
(ERRORS_TOLERANCE=none); all read a topic written partly in transactions, committed and
aborted. `script` runs against ES_SINK_TEST_OPENSEARCH_URL (an OpenSearch node with
Painless, scripts/stack ES_DISTRIBUTION=opensearch; scripts/test names its OpenSearch 3
node) and fails without it. `scripts/chaos` with no arguments is the full run (200,000
records, 20+ interruptions per mode)."""

from __future__ import annotations

import contextlib
import os
import random
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.flows import ROOT, Services

pytestmark = [pytest.mark.system, pytest.mark.long]  # minutes in all: one worker's share

SUMMARY = re.compile(r"^mode=(\w+) (.*)$", re.MULTILINE)
RECORDS = 8000
SCRIPT_RECORDS = 4000
"""A script per document per request: slower, so fewer records keep `script` near 45 s."""
OPENSEARCH = os.environ.get("ES_SINK_TEST_OPENSEARCH_URL")


@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    "mode", ["recovery", "offsets", "grow", "late", "update", "script", "reset", "strict"]
)
def test_chaos_interruptions_lose_nothing(services: Services, mode: str, tmp_path: Path) -> None:
    painless = ["--opensearch", OPENSEARCH] if OPENSEARCH else []
    if mode == "script":
        assert painless, "needs ES_SINK_TEST_OPENSEARCH_URL: an OpenSearch node with Painless"
    records = SCRIPT_RECORDS if mode == "script" else RECORDS
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "chaos"),
        "--records", str(records),
        "--kills", "5" if mode == "recovery" else "4",
        "--modes", mode,
        "--bootstrap", services.kafka,
        "--es", services.es_url,
        "--timeout", "170",
        "--workdir", str(tmp_path / "chaos"),
        *painless,
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=190, check=False)
    report = f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-6000:]}"
    lines = SUMMARY.findall(proc.stdout)
    assert [m for m, _ in lines] == [mode], report
    fields = dict(kv.split("=", 1) for kv in lines[0][1].split())
    counts = {k: int(v) for k, v in fields.items() if v.isdigit()}
    for name in ("lost", "wrong", "extra", "undeleted", "aborted_seen", "dlq_good"):
        assert counts[name] == 0, f"{name}\n{report}"
    for name in ("dlq_unknown", "dlq_mismatch", "commit_mismatch", "commit_ahead"):
        assert counts[name] == 0, f"{name}\n{report}"
    assert counts["resume_ahead"] == counts["crashes"] == 0, report
    assert fields["completed"] == "true", report
    assert counts["kills"] >= 3, report  # else the backfill outran the kills: proves little
    assert counts["records"] == records, report
    assert counts["txn_records"] > 0 and counts["txn_aborted"] > 0, report
    if mode == "strict":
        assert counts["dlq_found"] == counts["dlq_expected"] == 0, report
        assert counts["stops"] >= 2, report
        assert counts["stop_wrong"] == counts["stop_lost"] == counts["past_bad"] == 0, report
    else:
        assert counts["dlq_found"] >= counts["dlq_expected"] > 0, report
        assert counts["outages"] == 2, report
        assert counts["outage_hung"] == counts["outage_exit0"] == 0, report
    if mode == "recovery":  # 1w,3w,2p,1w,9w and 1w again, over one recovery store
        assert {"1w", "3w", "2p", "9w"} <= set(fields["layouts"].replace(",", ":").split(":"))
        assert counts["runs"] >= 6, report
    if mode == "grow":
        assert counts["partitions_added"] == 4 and counts["grow_live"] == 1, report
        # Keys moved to the new partitions while older writes of theirs were unread: each
        # such document still ended at its newest write (wrong=0 above).
        assert counts["grow_backlog"] > 0 and counts["keys_moved"] > 0, report
        assert counts["moved_unread"] > 0, report
    if mode == "late":
        assert counts["bulks_held"] > 0 and counts["late_kills"] >= 1, report
    if mode in ("update", "script"):
        assert counts["items_429"] > 0, report
    if mode == "reset":  # the deleted records, not one more, counted by the flow and warned
        assert counts["deleted_unread"] == counts["deleted_metric"] > 0, report
        assert counts["deleted_warned"] == 1, report
    assert proc.returncode == 0, report


def test_ground_truth_and_offset_checks_catch_losses() -> None:
    """Negative control (no services): the harness's own checks must flag a loss."""
    from tools.chaos.invariants import Durable, Invariants
    from tools.chaos.truth import build
    from tools.chaos.workload import Rec

    recs = [
        Rec("good", b"a", b'{"seq":0}', None, 0, 0),
        Rec("good", b"a", b'{"seq":1}', None, 0, 1),
        Rec("mapping-long", b"a", b'{"n":"x"}', "index", 0, 2),
        Rec("tombstone", b"a", None, None, 0, 3),
        Rec("good-null-key", None, b'{"seq":4}', None, 1, 0),
    ]
    truth = build("t", recs, deletes=False)
    # The last good write wins: neither the bad record nor the ignored tombstone changes "a".
    assert truth.ops == {"a": [0, 1], "t-1-0": [4]}
    assert truth.bad == {(0, 2): 2} and truth.first_bad == {0: 2}
    assert truth.good == {(0, 0), (0, 1), (0, 3), (1, 0)}
    final = truth.allowed("a", 4, 4)
    assert final.recs == {1} and not final.absent
    inv = Invariants(
        es=None, bootstrap="127.0.0.1:1", truth=truth, index="t", dlq_topic="d", group="g"
    )
    try:
        durable = Durable({"a": 1, "t-1-0": 4}, {(0, 2)}, {})
        assert inv.check(durable, {0: 4, 1: 1}, "ok") == 0
        # "a" only at its first write, the bad record not dead-lettered, the null-key doc missing.
        assert inv.check(Durable({"a": 0}, set(), {}), {0: 4, 1: 1}, "lossy") == 3
        # Offsets below the lost writes claim nothing about them.
        assert inv.check(Durable({"a": 0}, set(), {}), {0: 1, 1: 0}, "early") == 0
        # With ON_NULL_VALUE=delete the tombstone is the last op: "a" must be gone.
        inv.truth = build("t", recs, deletes=True)
        assert inv.truth.allowed("a", 4, 4).recs == set()
        assert inv.check(Durable({"t-1-0": 4}, {(0, 2)}, {}), {0: 4, 1: 1}, "deleted") == 0
        assert inv.check(Durable({"a": 1, "t-1-0": 4}, {(0, 2)}, {}), {0: 4}, "undeleted") == 1
    finally:
        inv.close()


def test_truth_script_counts_and_deleted_records() -> None:
    """Negative control (no services): every refused record is a bad one whose dead letter is
    due; a counting script's expected count restarts at a delete; records the broker deleted
    unread leave the truth."""
    from tools.chaos.truth import build
    from tools.chaos.workload import Rec

    recs = [
        Rec("good", b"a", b'{"seq":0}', None, 0, 0),
        Rec("mapping-long", b"a", b'{"n":"x"}', "index", 0, 1),
        Rec("good", b"a", b'{"seq":2}', None, 0, 2),
        Rec("tombstone", b"a", None, None, 0, 3),
        Rec("good", b"a", b'{"seq":4}', None, 0, 4),
        Rec("mapping-date", b"a", b'{"ts":"x"}', "index", 0, 5),
    ]
    updates = build("t", recs, deletes=True)
    assert updates.bad == {(0, 1): 1, (0, 5): 5}
    assert [updates.writes("a", i) for i in (0, 2, 4)] == [1, 2, 1]
    gone = build("t", recs, deletes=True, gone=lambda r: 1 <= r.offset < 4)
    assert gone.ops == {"a": [0, 4]} and gone.bad == {(0, 5): 5}


def test_strict_stop_parsing_and_workload() -> None:
    """The stop line the flow logs is parsed, and the strict workload has its bad records
    on one partition, the first 50-80% into it."""
    from tools.chaos.strict import named_record
    from tools.chaos.truth import build
    from tools.chaos.workload import generate_strict

    line = b"ERROR x: record chaos-1-strict/3@1031 failed at stage index: elasticsearch..."
    assert named_record(line + b"\n" + line.replace(b"@1031", b"@7"), "chaos-1-strict") == (3, 7)
    assert named_record(line, "other") is None
    recs = generate_strict(4000, 5)
    for i, rec in enumerate(recs):
        rec.offset = sum(r.partition == rec.partition for r in recs[:i])
    truth = build("t", recs, deletes=False)
    [(p, first)] = truth.first_bad.items()
    size = sum(r.partition == p for r in recs)
    assert 0.4 * size < first < 0.9 * size
    assert len(truth.bad) >= 2


def test_proxy_relays_refuses_and_blackholes() -> None:
    """The outage proxy forwards bytes, resets connections when refusing, holds them
    without an answer when blackholing, and relays again once restored."""
    from tools.chaos.proxy import Proxy

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def echo() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=echo, daemon=True).start()
    proxy = Proxy(f"http://127.0.0.1:{port}")
    try:
        payload = random.randbytes(300_000)
        assert _roundtrip(proxy.port, payload) == payload
        held = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
        proxy.cut("blackhole")
        held.sendall(b"ping")
        with pytest.raises(TimeoutError):
            held.recv(10)
        proxy.restore()
        proxy.cut("refuse")
        with pytest.raises((ConnectionError, OSError)):
            _roundtrip(proxy.port, b"x")
        proxy.restore()
        assert _roundtrip(proxy.port, b"after") == b"after"
        held.close()
    finally:
        proxy.close()
        server.close()


def _echo(conn: socket.socket) -> None:
    with conn, contextlib.suppress(OSError):  # the proxy resets it when cut
        while data := conn.recv(65536):
            conn.sendall(data)


def _roundtrip(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            data = s.recv(65536)
            if not data:
                raise ConnectionResetError("closed by the proxy")
            got += data
        return got
