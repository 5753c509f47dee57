"""Bytewax 0.21.1 alone: what a second process costs in CPU per item when none of this
project's code runs (docs/benchmarks.md, "Where the CPU goes").

A synthetic dataflow shaped like `flows.es_sink`: a FixedPartitionedSource of 8
partitions that hands out ready-made items in batches (the Kafka consumer's part), a
`flat_map_batch` that spends a fixed CPU time per item and groups the batch by partition
(the processor's part), and a FixedPartitionedSink of 8 partitions, each on the worker that
reads the source partition of the same number, so nothing crosses between processes. The
sink stands in for Elasticsearch as `sinks.elasticsearch` uses it: a partition buffers
items, hands a full buffer to one thread per process that "indexes" it by sleeping at a
fixed rate (the node is shared, so each of N processes gets 1/N of it), waits in
`write_batch` while its previous buffer is in flight, and sends the rest and waits for all
of it in `snapshot()`, at the end of each epoch. Sleeping costs no CPU, so what a second
process adds to the CPU per item is Bytewax's own.

    .venv/bin/python -m tools.bench.bytewax_alone [--items 1000000] [--rate 50000] [--epoch-s 10]

prints, per round, the CPU µs per item of one process of one worker (1p), two processes
of one worker (2p) and one process of two workers (2w).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

PARTITIONS = 8
BATCH = 500  # items per next_batch(): a consume() of the real source returns up to 1,000
BUFFER = 5000  # items per "bulk": BULK_MAX_ACTIONS' default
RUN_LIMIT_S = 3600.0
ENV = "BENCH_BYTEWAX_ALONE"  # items,rate per process,work µs per item

LAYOUTS = (("1p", 1, 1), ("2p", 2, 1), ("2w", 1, 2))
"""Printed name, processes, workers per process: flow-1w, flow-2p, flow-2w."""

Item = tuple[int, bytes]
PAYLOAD = b"x" * 300


def _settings() -> tuple[int, float, float]:
    items, rate, work_us = os.environ[ENV].split(",")
    return int(items), float(rate), float(work_us)


def build_flow() -> Any:
    """The dataflow `python -m bytewax.run tools.bench.bytewax_alone:build_flow()` runs."""
    from bytewax import operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition

    items, rate, work_us = _settings()
    per_part = items // PARTITIONS
    indexer = ThreadPoolExecutor(1)  # the stand-in node: one bulk at a time, at `rate`

    class Part(StatefulSourcePartition[Item, int]):
        def __init__(self, index: int, pos: int) -> None:
            self.index, self.pos = index, pos

        def next_batch(self) -> list[Item]:
            n = min(BATCH, per_part - self.pos)
            if n <= 0:
                raise StopIteration
            self.pos += n
            return [(self.index, PAYLOAD)] * n

        def snapshot(self) -> int:
            return self.pos

    class Source(FixedPartitionedSource[Item, int]):
        def list_parts(self) -> list[str]:
            return [f"p{i}" for i in range(PARTITIONS)]

        def build_part(self, step_id: str, for_part: str, resume: int | None) -> Part:
            return Part(int(for_part[1:]), resume or 0)

    def index(n: int) -> None:
        if rate:
            time.sleep(n / rate)

    class SinkPart(StatefulSinkPartition[list[bytes], None]):
        def __init__(self) -> None:
            self.buf: list[bytes] = []
            self.in_flight: Future[None] | None = None

        def write_batch(self, items: list[list[bytes]]) -> None:
            for chunk in items:
                self.buf.extend(chunk)
            if len(self.buf) >= BUFFER:
                self._send()

        def _send(self) -> None:
            if self.in_flight is not None:
                self.in_flight.result()  # one buffer in flight per partition
            self.in_flight = indexer.submit(index, len(self.buf)) if self.buf else None
            self.buf = []

        def snapshot(self) -> None:
            self._send()
            if self.in_flight is not None:
                self.in_flight.result()
                self.in_flight = None

    class Sink(FixedPartitionedSink[list[bytes], None]):
        def list_parts(self) -> list[str]:
            return [f"s{i}" for i in range(PARTITIONS)]

        def part_fn(self, item_key: str) -> int:
            return int(item_key)

        def build_part(self, step_id: str, for_part: str, resume: None) -> SinkPart:
            return SinkPart()

    def process(batch: list[Item]) -> Iterable[tuple[str, list[bytes]]]:
        end = time.thread_time() + len(batch) * work_us / 1e6
        while time.thread_time() < end:  # the processor's CPU, holding the GIL
            pass
        chunks: dict[int, list[bytes]] = {}
        for part, payload in batch:
            chunks.setdefault(part, []).append(payload)
        return [(str(p), c) for p, c in chunks.items()]

    flow = Dataflow("bytewax_alone")
    records = op.input("in", flow, Source())
    routed = op.flat_map_batch("process", records, process)
    op.output("out", routed, Sink())
    return flow


def _listening(port: int) -> bool:
    """Whether something listens on `port` (read from /proc/net/tcp: a probing connection
    would reach Bytewax's handshake)."""
    with open("/proc/net/tcp") as f:
        next(f)
        return any(
            int(local.rsplit(":", 1)[1], 16) == port and state == "0A"
            for local, _, state in (line.split()[1:4] for line in f)
        )


def run(procs: int, items: int, rate: float, work_us: float, epoch_s: int, workers: int = 1) -> Run:
    """Run the dataflow as `procs` processes of `workers` workers. Process 0 starts first
    and the others once it listens, so none waits out a connection retry."""
    from tools.bench.procs import Proc, kill_all
    from tools.bench.systems import free_port

    env = {**os.environ, ENV: f"{items},{rate / procs},{work_us}"}
    cmd = [sys.executable, "-m", "bytewax.run", "tools.bench.bytewax_alone:build_flow()"]
    cmd += ["-s", str(epoch_s), "-w", str(workers)]
    ports = [free_port() for _ in range(procs)]
    addrs = ";".join(f"127.0.0.1:{port}" for port in ports)
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as tmp:

        def start(i: int) -> Proc:
            cluster = [] if procs == 1 else ["-i", str(i), "-a", addrs]
            return Proc(f"process {i}", cmd + cluster, env, root, Path(tmp) / f"{i}.log")

        try:
            started = [start(0)]
            deadline = time.monotonic() + 30
            while procs > 1 and not _listening(ports[0]) and time.monotonic() < deadline:
                time.sleep(0.01)
            t0 = time.monotonic()
            started += [start(i) for i in range(1, procs)]
            deadline = t0 + RUN_LIMIT_S
            while not all([p.poll() for p in started]):  # reap each: a failed one ends it
                failed = [p for p in started if p.returncode not in (None, 0)]
                if failed or time.monotonic() > deadline:
                    why = [f"{p.name} exited {p.returncode}:\n{p.tail()}" for p in failed]
                    raise RuntimeError("\n".join(why) or f"not done in {RUN_LIMIT_S:.0f} s")
                time.sleep(0.05)
            for p in started:
                if p.returncode != 0:
                    raise RuntimeError(f"{p.name} exited {p.returncode}:\n{p.tail()}")
        finally:
            kill_all()  # what still runs after a failure
    return Run([p.cpu_s for p in started], max(p.ended or t0 for p in started) - t0)


class Run(NamedTuple):
    cpu: list[float]
    """Each process's user+sys CPU seconds, all its threads."""
    wall: float
    """Seconds from the last process's start to the end of all."""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=1_000_000)
    p.add_argument("--rate", type=float, default=50_000, help="the node's items/s (0: no wait)")
    p.add_argument("--work-us", type=float, default=3.0, help="the processor's CPU per item")
    p.add_argument("--epoch-s", type=int, default=10, help="bytewax.run -s")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    print(
        f"{args.items:,} items, a node at {args.rate:,.0f} items/s, {args.work_us} µs of "
        f"processing per item, -s {args.epoch_s}; CPU µs per item (each process's s)"
    )
    for r in range(args.rounds):
        line = []
        for name, procs, workers in LAYOUTS:
            done = run(procs, args.items, args.rate, args.work_us, args.epoch_s, workers)
            per = sum(done.cpu) / args.items * 1e6
            each = " + ".join(f"{c:.2f}" for c in done.cpu)
            line.append(f"{name} {per:.2f} ({each}; {done.wall:.1f} s)")
        print(f"round {r + 1}: " + ", ".join(line), flush=True)


if __name__ == "__main__":
    main()
