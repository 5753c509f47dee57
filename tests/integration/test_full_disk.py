"""A full disk under the recovery directory, on a 4 MiB tmpfs.

The flow stops with one line naming the directory and the error, the group's committed
offsets never pass what the recovery store holds, and once space is freed the next run
resumes from the store and indexes every record. Mounting needs root (CAP_SYS_ADMIN),
which CI's test machine has; without it the test fails saying so.
"""

from __future__ import annotations

import errno
import pickle
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.flows import (
    Services,
    committed_offsets,
    count_docs,
    create_topic,
    numbered,
    produce,
    run_flow,
    start_flow,
    wait_for,
)

pytestmark = pytest.mark.system


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"mount -t tmpfs needs root (CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> Path:
    """Write a file until the file system is full."""
    filler = directory / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb") as out:
        try:
            while True:
                out.write(chunk)
                out.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return filler


def stored_offsets(recovery: Path) -> dict[int, int]:
    """The source offsets the recovery store would resume from: each Kafka partition's
    snapshot of the latest epoch the store committed."""
    conn = sqlite3.connect(f"{(recovery / 'part-0.sqlite3').as_uri()}?mode=ro", uri=True)
    try:
        (epoch,) = conn.execute("SELECT max(commit_epoch) FROM commits").fetchone()
        rows = conn.execute(
            "SELECT state_key, ser_change FROM snaps s WHERE step_id LIKE '%.kafka' AND "
            "snap_epoch = (SELECT max(snap_epoch) FROM snaps t WHERE t.step_id = s.step_id "
            "AND t.state_key = s.state_key AND t.snap_epoch <= ?)",
            (epoch,),
        ).fetchall()
    finally:
        conn.close()
    return {int(key.rpartition("/")[2]): pickle.loads(blob) for key, blob in rows}


def test_a_full_recovery_disk_stops_the_flow_and_a_restart_loses_nothing(
    services: Services, names: Callable[[str], str], tmp_path: Path, es: Any, small_disk: Path
) -> None:
    topic = names("disk")
    create_topic(services.kafka, topic, partitions=2)
    recovery = small_disk / "recovery"
    recovery.mkdir()
    subprocess.run([sys.executable, "-m", "bytewax.recovery", str(recovery), "1"], check=True)
    produce(services.kafka, topic, numbered(0, 3000))
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic}
    args = ("-r", str(recovery), "-b", "0")
    log = tmp_path / "flow.log"
    flow = start_flow(services, {**env, "KAFKA_STOP_AT_END": "false"}, *args, log=log)
    try:
        wait_for(
            lambda: sum(committed_offsets(services.kafka, topic, topic).values()) == 3000,
            60,
            "the backlog to be indexed and committed (so the store holds an epoch)",
        )
        filler = fill(small_disk)
        for start in range(3000, 4000, 100):  # keep the flow reading and snapshotting
            produce(services.kafka, topic, numbered(start, 100))
            if flow.poll() is not None:
                break
        assert flow.wait(60) == 1
    finally:
        if flow.poll() is None:
            flow.kill()
            flow.wait(30)
    output = log.read_text(errors="replace")
    line = [ln for ln in output.splitlines() if f"recovery directory {recovery}:" in ln]
    assert len(line) == 1, output[-3000:]
    assert re.search(
        rf"ERROR flows.runtime.recovery_failure: recovery directory {re.escape(str(recovery))}: "
        r"database or disk is full \(SQLite DiskFull, 0\.\d MiB free of 4\.0 MiB\); the flow "
        r"stopped at the snapshot it could not write and committed nothing past the last one "
        r"the store holds: free space there and start it again, it resumes from there$",
        line[0],
    ), line[0]
    assert output.rstrip().endswith(line[0])  # the last line, after Bytewax's panic

    # Nothing committed that the recovery store does not hold.
    committed = committed_offsets(services.kafka, topic, topic)
    stored = stored_offsets(recovery)
    assert set(stored) == {0, 1}
    assert all(committed[p] <= stored[p] for p in stored), (committed, stored)
    assert sum(committed.values()) >= 3000

    # Space freed: the next run resumes from the store and indexes everything.
    filler.unlink()
    again = run_flow(services, env, *args)
    assert again.returncode == 0, again.output
    assert again.output.count("(recovery snapshot)") == 2
    assert count_docs(es, topic) == 4000
