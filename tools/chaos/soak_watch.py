"""What the soak measures while it runs: each flow process's resources, and latency.

`Resources` samples RSS, open file descriptors and threads of every flow process (psutil),
plus the recovery directory's size, at a fixed interval. `Latency` follows a systematic
sample of the produced records (about 20 per second) until Elasticsearch shows them: a
realtime multi-get by document id every 200 ms (no refresh forced on the index), where a
document whose `seq` is at or past the sampled record's counts as showing it (a later
update of the same key can only be written after it). Latency = first seen - produced.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LATENCY_POLL_S = 0.2
MGET_MAX = 500


@dataclass(frozen=True)
class Sample:
    """One process at one moment; `run` numbers the flow's starts, `proc` its processes."""

    t: float
    run: int
    proc: int
    rss_mib: float
    fds: int
    threads: int


def dir_mib(path: Path) -> float:
    """Size of the files under `path` (the recovery store), in MiB."""
    total = 0
    for f in path.rglob("*"):
        with contextlib.suppress(OSError):
            if f.is_file():
                total += f.stat().st_size
    return total / 2**20


class Resources(threading.Thread):
    """Samples the current flow's processes every `every` seconds until `stop()`."""

    def __init__(self, t0: float, every: float, recovery: Path | None) -> None:
        super().__init__(daemon=True, name="soak-resources")
        self.t0, self.every, self.recovery = t0, every, recovery
        self.samples: list[Sample] = []
        self.disk: list[tuple[float, float]] = []
        self._pids: tuple[int, list[int]] = (0, [])
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def follow(self, run: int, pids: list[int]) -> None:
        """From now on, sample these processes (the flow was (re)started)."""
        with self._lock:
            self._pids = (run, list(pids))

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        while not self._halt.wait(self.every):
            self.take()

    def take(self) -> None:
        import psutil

        with self._lock:
            run, pids = self._pids
        t = round(time.monotonic() - self.t0, 1)
        for i, pid in enumerate(pids):
            try:
                p = psutil.Process(pid)
                with p.oneshot():
                    rss = p.memory_info().rss / 2**20
                    sample = Sample(t, run, i, round(rss, 1), p.num_fds(), p.num_threads())
            except psutil.Error:
                continue  # between a stop and the next start
            self.samples.append(sample)
        if self.recovery is not None:
            self.disk.append((t, round(dir_mib(self.recovery), 2)))


class Latency(threading.Thread):
    """Finds sampled records in the index; see the module docstring."""

    def __init__(self, es: Any, index: str, t0: float) -> None:
        super().__init__(daemon=True, name="soak-latency")
        self.es, self.index, self.t0 = es, index, t0
        self.seen: list[tuple[float, float]] = []
        """(produced at, seconds since t0; latency in ms)"""
        self._pending: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def expect(self, doc_id: str, seq: int, produced_at: float) -> None:
        """Follow this record (`produced_at`: time.time() when it was handed to Kafka).

        A newer sample of the same key replaces an older one still pending: the newer one
        showing proves both written, and the older one's latency is not measured."""
        with self._lock:
            self._pending[doc_id] = (seq, produced_at)

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        while not self._halt.wait(LATENCY_POLL_S):
            self.poll()

    def poll(self) -> None:
        with self._lock:
            ids = list(self._pending)[:MGET_MAX]
        if not ids:
            return
        try:
            resp = self.es.mget(index=self.index, ids=ids, source_includes=["seq"])
        except Exception:  # Elasticsearch restarting: try again at the next poll
            return
        now = time.time()
        wall0 = now - (time.monotonic() - self.t0)
        with self._lock:
            for doc in resp.get("docs", []):
                if not doc.get("found"):
                    continue
                want = self._pending.get(doc["_id"])
                if want is not None and doc["_source"].get("seq", -1) >= want[0]:
                    del self._pending[doc["_id"]]
                    self.seen.append((round(want[1] - wall0, 2), round((now - want[1]) * 1000, 1)))
