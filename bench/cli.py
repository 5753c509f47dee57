"""`scripts/bench`: its flags and the order of a run (docs/benchmarks.md describes the method).

One dataset (keyed JSON over 8 partitions) is produced once; then each system drains it on its
own (`bench.throughput`), then each runs again on live records at one rate (`bench.latency`);
`bench.report` prints and writes the figures. `--memory` and `--profile` run flow-1w alone
(`bench.memory`, `bench.profiling`).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from bench import latency, throughput
from bench.memory import memory_mode
from bench.procs import ServerCpu, kill_all
from bench.profiling import profile_mode
from bench.report import Row, head_commit, plot, print_table, write_json
from bench.services import PARTITIONS, Services, ceiling_body_bytes, produce_dataset
from bench.systems import SYSTEMS, Ctx, log, snapshot_sources, tools_python

__all__ = ["main", "parse"]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/bench",
        description="Kafka -> Elasticsearch benchmark: ceiling, loop, quix and this flow "
        "(docs/benchmarks.md).",
    )
    p.add_argument("--records", type=int, help="dataset size (default 1,000,000; --quick 20,000)")
    p.add_argument("--doc-size", choices=["small", "large"], default="small",
                   help="~200 bytes or ~2 KB of JSON per record")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="a short smoke run (< 2 minutes)")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    p.add_argument("--es", default="http://127.0.0.1:9200", help="Elasticsearch URL")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--png", type=Path, help="write a bar chart here")
    p.add_argument(
        "--memory",
        action="store_true",
        help="RSS of flow-1w once per second over a backlog (default 5,000,000)",
    )
    p.add_argument(
        "--profile", type=Path, help="profile flow-1w with py-spy; write the summary (JSON) here"
    )
    p.add_argument("--native", action="store_true", help="py-spy --native (with --profile)")
    p.add_argument("--profile-raw", type=Path, help="also keep py-spy's collapsed stacks here")
    p.add_argument("--profile-rate", type=int, default=100, help="py-spy samples per second")
    p.add_argument("--no-latency", action="store_true", help="skip the latency runs")
    p.add_argument(
        "--latency-rate",
        type=float,
        help="records/s of the latency runs (default: --latency-share of the throughput)",
    )
    p.add_argument(
        "--latency-share",
        type=float,
        default=0.25,
        help="latency rate as a share of the slowest Kafka system's docs/s (default 0.25)",
    )
    p.add_argument("--lat-seconds", type=float, help="measured seconds (default 20; quick 3)")
    p.add_argument("--lat-warmup-s", type=float, help="unmeasured seconds (default 3; quick 0.5)")
    p.add_argument(
        "--lat-tail-s",
        type=float,
        help="records/s keep coming this long after the window (default 5; quick 1)",
    )
    p.add_argument("--lat-drain-s", type=float, help="wait for stragglers (default 30; quick 15)")
    p.add_argument(
        "--flow-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the flow runs (repeatable), e.g. BULK_MAX_ACTIONS=10000",
    )
    p.add_argument("--keep-work", action="store_true", help="keep the logs and work files")
    p.add_argument("--threads", type=int, default=3, help="ceiling: bulk requests in flight")
    p.add_argument("--epoch-s", type=int,
                   help="flow: bytewax -s (default: Bytewax's 10 s; --quick: 1 s)")  # fmt: skip
    p.add_argument(
        "--tools-venv",
        default=os.path.join(os.environ.get("STACK_CACHE_DIR", "~/.cache/es-sink"), "bench-venv"),
        help="virtualenv for quixstreams and py-spy (created on first use)",
    )
    args = p.parse_args(argv)
    q = args.quick
    if args.records is None:
        args.records = 20_000 if q else (5_000_000 if args.memory else 1_000_000)
    args.lat_seconds = args.lat_seconds or (3.0 if q else 20.0)
    args.lat_warmup_s = args.lat_warmup_s if args.lat_warmup_s is not None else (0.5 if q else 3.0)
    args.lat_drain_s = args.lat_drain_s or (15.0 if q else 30.0)
    args.lat_tail_s = args.lat_tail_s if args.lat_tail_s is not None else (1.0 if q else 5.0)
    if args.epoch_s is None and q:
        args.epoch_s = 1
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    args.systems = [s for s in SYSTEMS if s in systems]
    if args.memory or args.profile:
        args.systems = ["flow-1w"]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    run_id = f"{datetime.datetime.now():%m%d%H%M}-{uuid.uuid4().hex[:4]}"
    svc = Services(args.bootstrap, args.es, run_id)
    svc.check()
    servers: ServerCpu | None = None
    try:
        servers = ServerCpu(args.es, args.bootstrap)
        log(f"server processes: {servers.describe()}")
    except Exception as e:  # never fail a run for a figure that is only explanatory
        log(f"server processes: not measured ({e})")
    work = Path(tempfile.mkdtemp(prefix="es-sink-bench-"))
    variant, n = args.doc_size, args.records
    started = time.monotonic()
    try:
        tools = tools_python(args) if ("quix" in args.systems or args.profile) else None
        commit = head_commit()
        snapshot_sources(work)
        log(f"run {run_id}: flows/, sinks/, bench/ copied at commit {commit}")
        topic = svc.name(f"{variant}-data")
        svc.create_topic(topic)
        log(f"producing {n:,} {variant} records to {topic} ({PARTITIONS} partitions) ...")
        bodies = work / "ceiling.ndjson"
        body_bytes = ceiling_body_bytes(variant, n, args.threads)
        with_bodies = "ceiling" in args.systems
        secs = produce_dataset(svc, topic, variant, n, bodies, body_bytes, with_bodies)
        mib = bodies.stat().st_size / 2**20 if with_bodies else 0
        log(f"produced in {secs:.1f}s ({n / secs:,.0f}/s); ceiling bodies {mib:,.0f} MiB")
        ctx = Ctx(svc, args, work, variant, n, topic, bodies, tools, servers)

        if args.memory:
            return memory_mode(ctx)
        if args.profile:
            return profile_mode(ctx)

        rows, failed = throughput.run_all(ctx)
        svc.delete_topic(topic)
        rate: float | None = None
        if not args.no_latency:
            rate, lat_failed = latency.run_all(ctx, rows)
            failed = failed or lat_failed
        throughput.add_ratios(rows)
        print()
        print(f"{n:,} {variant} records, {PARTITIONS} partitions; run {run_id}; "
              f"code of commit {commit}; "
              f"{time.monotonic() - started:.0f}s in total")  # fmt: skip
        print_table(rows, rate)
        good: list[Row] = [r for r in rows if not r.error]
        if args.json:
            write_json(good, args.json)
        if args.png and good:
            args.png.parent.mkdir(parents=True, exist_ok=True)
            plot(good, args.png, f"{n:,} {variant} records ({datetime.date.today()})")
        return 1 if failed else 0
    finally:
        kill_all()
        svc.cleanup()
        if args.keep_work:
            log(f"logs and files kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
