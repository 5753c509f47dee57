"""The throughput runs: each system drains the same backlog into a fresh index.

docs_per_s = N / (end - start); start = when the first process of the system is spawned
(start-up, imports, group join included); end = the first 100 ms poll of the index's
primary `indexing.index_total` that is >= N (every document acknowledged by the shard) at
which a count after a refresh finds the N documents too (a system that writes a document
twice gets to N operations first). The index must then hold exactly N documents. CPU and
peak RSS come from the kernel (`wait4` rusage) over the processes' whole lives. Between the
same two moments (spawn, reap) the CPU time of the Elasticsearch and Kafka server processes
is read (psutil), and the whole stack's CPU per record gives the rate at which it would
saturate every core. Each process's thread count is sampled every 200 ms (the peak is
reported), and the first moment a search without a refresh finds a document
(`searchable_s`, from spawn) is noted.

steady_us is the CPU per record once the system runs: its CPU (psutil) between the first
polls that find 10% and 90% of the documents indexed, over the records those 80% stand for.
Start-up (imports, connections, group join, the first batches) and the end (last bulks,
commit, exit) are outside it; what was read but not yet indexed at each mark roughly cancels
out; with less than STEADY_MIN_CPU_S between them (a short run) there is no figure. A
backlog of a few hundred thousand records cannot amortize ~1.5 CPU seconds of start-up per
process, which is what separates it from cpu_s_per_million.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from tools.bench.procs import PeakThreads, Proc, cpu_now
from tools.bench.report import Row
from tools.bench.services import POLL_S
from tools.bench.systems import UNTIL_STOPPED, Ctx, launch, launch_ceiling_bulk, log, stop_all

__all__ = ["add_ratios", "run_all", "run_throughput", "warm_up_es"]

STEADY_MARKS = (0.1, 0.9)
"""The shares of the documents indexed between which `steady_us` is measured."""
STEADY_MIN_CPU_S = 0.1
"""Less CPU than this between the marks gives no `steady_us`: the kernel counts a running
process's CPU in 10 ms ticks (psutil reads /proc), so a short run's figure would be noise
(0 or 2x)."""


def warm_up_es(ctx: Ctx) -> None:
    """Untimed: up to 30 bulk bodies into a throwaway index, so that Elasticsearch's JIT
    and caches are warm before the first measured run (the ceiling)."""
    index = ctx.svc.name(f"{ctx.variant}-warmup")
    ctx.svc.create_index(index, ctx.mappings)
    try:
        log("warm-up: 30 ceiling bodies into a throwaway index (not measured) ...")
        procs = launch_ceiling_bulk(ctx, index, limit=30)
        stop_all(procs, natural=True, grace=300)
    finally:
        ctx.svc.delete_index(index)


def wait_indexed(
    ctx: Ctx,
    index: str,
    n: int,
    procs: list[Proc],
    timeout: float,
    on_poll: Callable[[int], Any] | None = None,
) -> tuple[float | None, float | None, float]:
    """Poll the primary's index_total every 100 ms until >= n: (first document indexed,
    first document searchable, end), monotonic. Searchable: a `_count` without a refresh
    sees it, polled only from the first indexed document until then. `on_poll(total)` is
    called after each poll of index_total."""
    svc = ctx.svc
    first: float | None = None
    searchable: float | None = None
    deadline = time.monotonic() + timeout
    exited_at: float | None = None
    while True:
        total = svc.index_total(index)
        now = time.monotonic()
        if on_poll is not None:
            on_poll(total)
        if total > 0 and first is None:
            first = now
        if first is not None and searchable is None and svc.searchable(index) > 0:
            searchable = time.monotonic()
        # A system that sends a document twice (Bento re-sends a batch) reaches n
        # operations before n documents: the end is when the index holds them all.
        if total >= n and (n == 0 or svc.count(index) >= n):
            # a small dataset can be in before the first refresh: wait for it (<= 1 s)
            while searchable is None and time.monotonic() < now + 30:
                time.sleep(POLL_S)
                if svc.searchable(index) > 0:
                    searchable = time.monotonic()
            return first, searchable, now
        if all(p.poll() for p in procs):
            exited_at = exited_at or now
            if now - exited_at > 3:  # stats are per shard and near-immediate; 3 s is plenty
                codes = ", ".join(f"{p.name}={p.returncode}" for p in procs)
                tail = procs[0].tail()
                raise RuntimeError(f"exited ({codes}) with {total}/{n} indexed:\n{tail}")
        if now > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s with {total}/{n} indexed")
        time.sleep(POLL_S)


def run_throughput(
    ctx: Ctx,
    system: str,
    on_start: Callable[[list[Proc]], Any] | None = None,
) -> Row:
    """Backlog run of one system; see the module docstring for the definitions.

    docs_per_s counts documents (what the index must hold); cpu_s_per_million is per
    record read from Kafka, and per document sent for the ceiling (which reads none)."""
    svc, docs = ctx.svc, ctx.expected_docs
    per = docs if system == "ceiling" else ctx.n
    row = Row(system, ctx.variant)
    index = svc.name(f"{ctx.variant}-{system}")
    svc.create_index(index, ctx.mappings)
    dlq: str | None = None
    try:
        group = svc.group(f"{system}") if system != "ceiling" else ""
        env: dict[str, str] = {}
        if ctx.dead_letters and system != "ceiling":
            dlq = svc.name(f"{ctx.variant}-{system}-dlq")
            svc.create_topic(dlq)
            env["DLQ_TOPIC"] = dlq
        # Elasticsearch's and Kafka's CPU so far, just before the first spawn and just
        # after the last reap: the interval the system's own CPU (rusage) covers.
        servers_before = server_cpu(ctx)
        if system == "ceiling":
            procs = launch_ceiling_bulk(ctx, index)
        else:
            procs = launch(
                ctx, system, ctx.data_topic, index, group, live=False, tag="tput", env=env
            )
        threads = PeakThreads(procs)
        threads.start()
        hook = on_start(procs) if on_start else None
        marks: list[tuple[int, float | None]] = []  # (documents indexed, CPU s so far)

        def mark(total: int) -> None:
            if len(marks) < len(STEADY_MARKS) and total >= STEADY_MARKS[len(marks)] * docs:
                marks.append((total, cpu_now(procs)))

        try:
            first, searchable, end = wait_indexed(
                ctx, index, docs, procs, timeout=180 + ctx.n / 500, on_poll=mark
            )
        finally:
            stop_all(procs, natural=system not in UNTIL_STOPPED, grace=90)
            servers_after = server_cpu(ctx)
            row.extra["peak_threads"] = threads.stop()
            if hook is not None and hasattr(hook, "join"):
                hook.join(60)
        start = min(p.started for p in procs)
        bad = [p for p in procs if p.returncode not in (0, None)]
        if bad:
            raise RuntimeError(f"{bad[0].name} exited with {bad[0].returncode}:\n{bad[0].tail()}")
        row.wall_s = end - start
        row.first_doc_s = (first - start) if first else None
        row.extra["searchable_s"] = (searchable - start) if searchable else None
        row.docs_per_s = docs / row.wall_s
        cpu_s = sum(p.cpu_s for p in procs)
        row.cpu_s_per_million = cpu_s / per * 1e6
        if len(marks) == 2 and marks[0][1] is not None and marks[1][1] is not None:
            between = per * (marks[1][0] - marks[0][0]) / docs
            used = marks[1][1] - marks[0][1]
            if between > 0 and used >= STEADY_MIN_CPU_S:
                row.extra["steady_us"] = used / between * 1e6
        row.peak_rss_mb = sum(p.maxrss_mb for p in procs)
        row.extra["processes"] = len(procs)
        row.extra["records"] = ctx.n
        row.extra["docs"] = docs
        add_stack_cpu(row, servers_before, servers_after, per)
        got = svc.count(index)
        if got != docs:
            raise RuntimeError(f"the index holds {got} documents, expected {docs}")
        if dlq is not None:
            dead = svc.end_offsets(dlq)
            row.extra["dead_letters"] = dead
            if dead < ctx.dead_letters:
                raise RuntimeError(f"{dead} dead letters, expected {ctx.dead_letters}")
    finally:
        svc.delete_index(index)
        if dlq is not None:
            svc.delete_topic(dlq)
    return row


def server_cpu(ctx: Ctx) -> dict[str, float | None]:
    """CPU seconds so far of the Elasticsearch and Kafka server processes (None: unknown)."""
    if ctx.servers is None:
        return {}
    out = ctx.servers.sample()
    for name in sorted(ctx.servers.lost()):
        log(f"{name}: the server process is gone; its CPU is no longer measured")
    return out


def add_stack_cpu(
    row: Row, before: dict[str, float | None], after: dict[str, float | None], n: int
) -> None:
    """`es_cpu_us`, `kafka_cpu_us` (server CPU µs per record over the run), `total_cpu_us`
    (+ the system's own, `cpu_s_per_million`) and `bound_docs_per_s`: the rate at which
    that CPU per record would use every core of the machine."""
    for name in ("es", "kafka"):
        b, a = before.get(name), after.get(name)
        row.extra[f"{name}_cpu_us"] = (a - b) / n * 1e6 if a is not None and b is not None else None
    es, kafka = row.extra["es_cpu_us"], row.extra["kafka_cpu_us"]
    if es is None or kafka is None or row.cpu_s_per_million is None:
        return
    total = row.cpu_s_per_million + es + kafka
    row.extra["total_cpu_us"] = total
    if total > 0:
        row.extra["bound_docs_per_s"] = (os.cpu_count() or 1) * 1e6 / total


def _log_row(system: str, row: Row) -> None:
    es_us, kafka_us = row.extra.get("es_cpu_us"), row.extra.get("kafka_cpu_us")
    log(
        f"throughput: {system}: {row.docs_per_s:,.0f} docs/s, "
        f"{row.cpu_s_per_million:,.1f} cpu_s/M, {row.peak_rss_mb:,.0f} MB; "
        f"es {'-' if es_us is None else f'{es_us:.1f}'} µs/rec, "
        f"kafka {'-' if kafka_us is None else f'{kafka_us:.1f}'} µs/rec"
    )


def run_all(ctx: Ctx) -> tuple[list[Row], bool]:
    """Every system of `--systems` in turn: (rows in that order, whether one failed).

    The ceiling runs first and again last; the faster run is reported (both are logged): it
    brackets the others against drift in the machine's load."""
    args, variant, systems = ctx.args, ctx.variant, ctx.run_systems
    rows: list[Row] = []
    failed = False
    if "ceiling" in systems:
        warm_up_es(ctx)
    order = list(systems) + (["ceiling"] if "ceiling" in systems else [])
    ceilings: list[Row] = []
    for system in order:
        log(f"throughput: {system} ...")
        try:
            row = run_throughput(ctx, system)
            _log_row(system, row)
        except Exception as e:
            row = Row(system, variant, error=str(e))
            failed = True
            log(f"throughput: {system} FAILED: {e}")
        time.sleep(0.5 if args.quick else 1)
        if system == "ceiling":
            ceilings.append(row)
            if len(ceilings) == 1:
                rows.append(row)
            elif row.docs_per_s and (row.docs_per_s > (ceilings[0].docs_per_s or 0)):
                rows[rows.index(ceilings[0])] = row
            continue
        rows.append(row)
    if len(ceilings) == 2:
        best = next(r for r in rows if r.system == "ceiling")
        best.extra["ceiling_runs"] = [r.docs_per_s for r in ceilings]
        log(
            "ceiling: first {} docs/s, last {} docs/s; reporting the faster".format(
                *(f"{r.docs_per_s or 0:,.0f}" for r in ceilings)
            )
        )
        failed = failed and any(r.error for r in rows)
    return rows, failed


def add_ratios(rows: list[Row]) -> None:
    """Each row's docs/s (and CPU bound) as a share of the reported ceiling's docs/s."""
    ceiling = next((r for r in rows if r.system == "ceiling" and r.docs_per_s), None)
    for r in rows:
        if ceiling and r.docs_per_s and ceiling.docs_per_s:
            r.ratio_to_ceiling = r.docs_per_s / ceiling.docs_per_s
            if r.extra.get("bound_docs_per_s"):
                r.extra["bound_ratio"] = r.extra["bound_docs_per_s"] / ceiling.docs_per_s
