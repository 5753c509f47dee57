"""`scripts/bench`: its flags and the order of a run (docs/benchmarks.md describes the method).

For each variant of `--variants` (tools.bench.variants; default `small`, or `--doc-size`), one
dataset is produced once; then each of the variant's systems drains it on its own
(`tools.bench.throughput`), then, for `small` and `large`, each runs again on live records at one
rate (`tools.bench.latency`); `tools.bench.report` prints and writes the figures of every variant
together. `--memory` and `--profile` run flow-1w alone on one variant (`tools.bench.memory`,
`tools.bench.profiling`).
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

from tools.bench import bento, latency, throughput
from tools.bench.memory import memory_mode
from tools.bench.procs import ServerCpu, kill_all
from tools.bench.profiling import profile_mode
from tools.bench.report import (
    Row,
    add_cpu_vs_flow_1w,
    head_commit,
    plot,
    print_summary,
    print_table,
    write_json,
)
from tools.bench.services import PARTITIONER, PARTITIONERS, Services
from tools.bench.systems import SYSTEMS, Ctx, log, snapshot_sources, tools_python
from tools.bench.variants import VARIANTS, Variant, prepare

__all__ = ["main", "parse"]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/bench",
        description="Kafka -> Elasticsearch benchmark: ceiling, loop, floor, quix, bento and this "
        "flow "
        "(docs/benchmarks.md).",
    )
    p.add_argument(
        "--partitioner",
        default=PARTITIONER,
        choices=PARTITIONERS,
        help=f"librdkafka partitioner of the produced records (default {PARTITIONER}, the "
        "Java client's; consistent_random is librdkafka's, whose keys land where the flow's "
        "sink partitions are: nothing crosses between processes)",
    )
    p.add_argument("--records", type=int, help="dataset size (default 1,000,000; --quick 20,000)")
    p.add_argument("--doc-size", choices=["small", "large"], default="small",
                   help="~200 bytes or ~2 KB of JSON per record (the variant when "
                   "--variants is not given)")  # fmt: skip
    p.add_argument(
        "--variants",
        help="comma-separated, run one after another, each with its own ceiling: "
        f"{', '.join(VARIANTS)} (default: --doc-size)",
    )
    p.add_argument(
        "--large-records",
        type=int,
        help="records of the large variant (default: --records / 5 beside other variants, "
        "else --records)",
    )
    p.add_argument("--quick", action="store_true", help="a short smoke run (< 2 minutes)")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    p.add_argument("--es", default="http://127.0.0.1:9200", help="Elasticsearch URL")
    p.add_argument(
        "--systems",
        help="comma-separated subset (default: every system but bento for small and large, "
        "the ceiling and flow-1w for the other variants; each variant runs those it can)",
    )
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
    p.add_argument(
        "--gil",
        action="store_true",
        help="py-spy --gil (with --profile): sample only the thread holding the GIL, so "
        "waits for it do not count as time spent",
    )
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
    p.add_argument(
        "--lat-poll-ms",
        type=float,
        default=50.0,
        help="refresh and look for the sampled documents this often while records come "
        "(default 50: latency to searchable); 0: only once the schedule ends, so that the "
        "harness's refreshes do not load Elasticsearch; then only the indexed latency (ix_) "
        "is measured",
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
    p.add_argument("--tools-only", action="store_true",
                   help="create the --tools-venv virtualenv and exit, talking to no server "
                   "(scripts/provision)")  # fmt: skip
    args = p.parse_args(argv)
    if args.lat_poll_ms < 0:
        p.error(f"--lat-poll-ms must be 0 or more, not {args.lat_poll_ms:g}")
    q = args.quick
    if args.records is None:
        args.records = 20_000 if q else (5_000_000 if args.memory else 1_000_000)
    args.lat_seconds = args.lat_seconds or (3.0 if q else 20.0)
    args.lat_warmup_s = args.lat_warmup_s if args.lat_warmup_s is not None else (0.5 if q else 3.0)
    args.lat_drain_s = args.lat_drain_s or (15.0 if q else 30.0)
    args.lat_tail_s = args.lat_tail_s if args.lat_tail_s is not None else (1.0 if q else 5.0)
    if args.epoch_s is None and q:
        args.epoch_s = 1
    names = [v.strip() for v in (args.variants or args.doc_size).split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown or not names:
        p.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    args.variants = [VARIANTS[v] for v in dict.fromkeys(names)]
    if args.large_records is None:
        args.large_records = args.records // 5 if len(args.variants) > 1 else args.records
    args.explicit_systems = args.systems is not None
    systems = [s.strip() for s in (args.systems or ",".join(SYSTEMS)).split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    args.systems = [s for s in SYSTEMS if s in systems]
    if args.memory or args.profile:
        if len(args.variants) > 1:
            p.error("--memory and --profile run one variant")
        args.systems = ["flow-1w"]
        args.explicit_systems = True
    return args


def variant_systems(args: argparse.Namespace, v: Variant) -> tuple[str, ...]:
    """The systems `v` runs: --systems (if given) among those it can, else its default."""
    chosen = args.systems if args.explicit_systems else v.default_systems
    return tuple(s for s in SYSTEMS if s in chosen and s in v.systems)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.tools_only:
        tools_python(args)
        return 0
    run_id = f"{datetime.datetime.now():%m%d%H%M}-{uuid.uuid4().hex[:4]}"
    svc = Services(args.bootstrap, args.es, run_id, args.partitioner)
    svc.check()
    servers: ServerCpu | None = None
    try:
        servers = ServerCpu(args.es, args.bootstrap)
        log(f"server processes: {servers.describe()}")
    except Exception as e:  # never fail a run for a figure that is only explanatory
        log(f"server processes: not measured ({e})")
    work = Path(tempfile.mkdtemp(prefix="es-sink-bench-"))
    started = time.monotonic()
    plan = [(v, variant_systems(args, v)) for v in args.variants]
    try:
        need_tools = args.profile or any("quix" in systems for _, systems in plan)
        tools = tools_python(args) if need_tools else None
        bento_bin = bento.binary() if any("bento" in s for _, s in plan) else None
        commit = head_commit()
        snapshot_sources(work)
        log(f"run {run_id}: flows/, sinks/, tools/bench/ copied at commit {commit}")
        rows: list[Row] = []
        rates: dict[str, float | None] = {}
        failed = False
        for v, systems in plan:
            n = args.large_records if v.name == "large" else args.records
            if not systems:
                log(f"{v.name}: none of --systems can run it; skipped")
                continue
            topic = svc.name(f"{v.name}-data")
            log(f"{v.name}: producing {n:,} records to {topic} ({v.partitions} partitions) ...")
            bodies = work / f"ceiling-{v.name}.ndjson"
            prep = prepare(v, svc, work, topic, n, args.threads, "ceiling" in systems)
            try:
                mib = bodies.stat().st_size / 2**20 if bodies.exists() else 0
                log(
                    f"{v.name}: produced in {prep.seconds:.1f}s ({n / prep.seconds:,.0f}/s); "
                    f"{prep.docs:,} documents to index, {prep.dead_letters:,} to dead-letter; "
                    f"ceiling bodies {mib:,.0f} MiB; systems {', '.join(systems)}"
                )
                ctx = Ctx(
                    svc, args, work, v.name, n, topic, bodies, tools, servers,
                    doc_size=v.doc_size, docs=prep.docs, systems=systems,
                    flow_env=prep.flow_env, mappings=prep.mappings,
                    dead_letters=prep.dead_letters, bento=bento_bin,
                )  # fmt: skip
                if args.memory:
                    return memory_mode(ctx)
                if args.profile:
                    return profile_mode(ctx)
                vrows, vfailed = throughput.run_all(ctx)
                svc.delete_topic(topic)
                rates[v.name] = None
                if v.latency and not args.no_latency:
                    rate, lat_failed = latency.run_all(ctx, vrows)
                    rates[v.name] = rate
                    vfailed = vfailed or lat_failed
                throughput.add_ratios(vrows)
            finally:
                prep.close()
                bodies.unlink(missing_ok=True)
                Path(f"{bodies}.json").unlink(missing_ok=True)
            rows += vrows
            failed = failed or vfailed
        add_cpu_vs_flow_1w(rows)
        print()
        ran = [(v, args.large_records if v.name == "large" else args.records) for v, s in plan if s]
        what = "; ".join(f"{n:,} {v.name} records, {v.partitions} partitions" for v, n in ran)
        print(f"{what}; run {run_id}; code of commit {commit}; "
              f"{time.monotonic() - started:.0f}s in total")  # fmt: skip
        print_table(rows, rates)
        print_summary(rows)
        good: list[Row] = [r for r in rows if not r.error]
        if args.json:
            write_json(good, args.json)
        if args.png and good:
            args.png.parent.mkdir(parents=True, exist_ok=True)
            title = "; ".join(f"{n:,} {v.name} records" for v, n in ran)
            plot(good, args.png, f"{title} ({datetime.date.today()})")
        return 1 if failed else 0
    finally:
        kill_all()
        svc.cleanup()
        if args.keep_work:
            log(f"logs and files kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
