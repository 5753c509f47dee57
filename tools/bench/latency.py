"""The latency runs: each system indexes live records arriving at one fixed rate.

After the throughput runs, at a fixed rate (by default a share of the slowest Kafka system's
docs/s, `--latency-share`), a paced producer writes live records to a fresh topic per system;
a systematic sample (~200 documents/s) is looked for every `--lat-poll-ms` (50: `_refresh`,
then an `ids` search); latency = refresh return time - `lat_ts` in the document, the time
the record was due on the schedule (`tools.bench.data.due_time_ms`).

That is the latency a user's search sees, but on a busy node the `_refresh` call itself
takes from 0.2 s to seconds, whichever system writes. So a thread also watches the index's
completed index operations (`index_total`, no refresh needed) every 20 ms: a document's
`_seq_no` (one shard) tells which operation wrote it, so the first look at which
`index_total` passed it is when it was indexed. `ix_p50_ms` / `ix_p99_ms` = that time -
`lat_ts`: the system's own part, which no refresh inflates; `refresh_p99_ms` is the
harness's `_refresh` call. Up to 20 refreshes a second load Elasticsearch themselves, so
`--lat-poll-ms 0` looks for the samples only once the schedule has ended (refreshing and
searching every 50 ms from then until all are found): only the indexed latency is
measured, and `--keep-work`'s per-sample file holds indexed latencies instead of searchable
ones.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import sys
import threading
import time
from typing import Any

from tools.bench.data import LatencyDocs, due_time_ms, lat_key_for
from tools.bench.procs import Proc
from tools.bench.report import Row
from tools.bench.services import POLL_S, Services, new_producer
from tools.bench.systems import Ctx, child_env, launch, log, stop_all
from tools.bench.throughput import server_cpu
from tools.devkit.stats import percentile

__all__ = ["PacedProducer", "percentile", "run_all", "run_latency"]

LAT_POLL_S = 0.05
LAT_SAMPLES_PER_S = 200
INDEXED_POLL_S = 0.02
SEARCH_CHUNK = 5000  # sampled ids per search (Elasticsearch's max_result_window is 10,000)


class IndexedWatch(threading.Thread):
    """(time, index_total) of one index every INDEXED_POLL_S; see the module docstring."""

    def __init__(self, svc: Services, index: str) -> None:
        super().__init__(daemon=True)
        self.svc, self.index = svc, index
        self.times: list[float] = []
        self.totals: list[int] = []
        self.stop = threading.Event()
        self.failed = 0

    def run(self) -> None:
        while not self.stop.wait(INDEXED_POLL_S):
            try:
                total = self.svc.index_total(self.index)
            except Exception:  # a slow or refused look: the next one tells
                self.failed += 1
                continue
            self.times.append(time.time() * 1000)
            self.totals.append(max(total, self.totals[-1] if self.totals else 0))  # 0: failed

    def indexed_ms(self, seq_no: int) -> float | None:
        """When the operation `seq_no` (0-based) was first seen completed."""
        i = bisect.bisect_right(self.totals, seq_no)
        return self.times[i] if i < len(self.times) else None


class PacedProducer(threading.Thread):
    """Probes (5/s) until `go()`, then records on the schedule seq -> t0 + seq / rate."""

    def __init__(
        self, bootstrap: str, partitioner: str, topic: str, variant: str, rate: float
    ) -> None:
        super().__init__(daemon=True)
        self.topic, self.variant, self.rate = topic, variant, rate
        self.producer = new_producer(
            bootstrap, partitioner, **{"linger.ms": 5, "batch.size": 1_000_000}
        )
        self.t0: float | None = None
        self.total: int | None = None
        self.seq = 0
        self.probes = 0
        self.last_ts = 0.0
        self.late_ms = 0  # the most a record was produced after it was due
        self.done = threading.Event()
        self.error: Exception | None = None
        self._go = threading.Event()

    def go(self, total: int) -> float:
        self.total = total
        self.t0 = time.time()
        self._go.set()
        return self.t0

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:
            self.error = e
        finally:
            self.producer.flush(30)
            self.producer = None  # type: ignore[assignment]
            self.done.set()

    def _run(self) -> None:
        p = self.producer
        while not self._go.wait(0.2):
            probe = self.probes
            p.produce(self.topic, b'{"probe": %d}' % probe, b"probe-%d" % probe)
            p.poll(0)
            self.probes += 1
        assert self.t0 is not None and self.total is not None
        t0, rate, total = self.t0, self.rate, self.total
        docs = LatencyDocs(self.variant)
        while self.seq < total:
            due = min(total, int((time.time() - t0) * rate) + 1)
            while self.seq < due:
                seq = self.seq
                now_ms = int(time.time() * 1000)
                due_ms = due_time_ms(t0, rate, seq)
                self.late_ms = max(self.late_ms, now_ms - due_ms)
                while True:
                    try:
                        p.produce(
                            self.topic,
                            docs.value(seq, due_ms),
                            lat_key_for(seq).encode(),
                            timestamp=now_ms,
                        )
                        break
                    except BufferError:
                        p.poll(0.01)
                self.seq += 1
                self.last_ts = now_ms / 1000
            p.poll(0)
            time.sleep(0.002)


def live_cpu(procs: list[Proc]) -> float:
    """User+sys CPU seconds so far of the running processes (psutil)."""
    import psutil

    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(p.pid).cpu_times()
            total += t.user + t.system
    return total


def run_latency(ctx: Ctx, system: str, rate: float, row: Row) -> None:
    svc, args = ctx.svc, ctx.args
    warm, measure, drain = args.lat_warmup_s, args.lat_seconds, args.lat_drain_s
    tail = args.lat_tail_s  # produced after the window, unmeasured: the window is steady
    index = svc.name(f"{ctx.variant}-lat-{system}")
    svc.create_index(index)
    topic = svc.name(f"{ctx.variant}-lat-{system}")
    procs: list[Proc] = []
    producer: PacedProducer | None = None
    watch: IndexedWatch | None = None
    total = int((warm + measure + tail) * rate)
    window_end = int((warm + measure) * rate)
    try:
        if system == "ceiling":
            cmd = [sys.executable, "-m", "tools.bench.ceiling", "paced", "--es", svc.es_url]
            cmd += ["--index", index, "--variant", ctx.doc_size, "--rate", str(rate)]
            cmd += ["--seconds", str(warm + measure + tail)]
            proc = Proc(
                system,
                cmd,
                child_env(),
                ctx.work,
                ctx.work / f"{ctx.variant}-lat-ceiling.log",
                stdout_pipe=True,
            )
            procs = [proc]
            line = proc.stdout.readline().decode()
            if not line.startswith("T0 "):
                raise RuntimeError(f"ceiling paced sender did not start:\n{proc.tail()}")
            t0 = float(line.split()[1])
        else:
            svc.create_topic(topic)
            group = svc.group(f"lat-{system}")
            procs = launch(ctx, system, topic, index, group, live=True, tag="lat")
            producer = PacedProducer(svc.bootstrap, svc.partitioner, topic, ctx.doc_size, rate)
            producer.start()
            ready_by = time.monotonic() + 120
            while svc.index_total(index) == 0:  # the first probe is indexed: the system runs
                if time.monotonic() > ready_by or any(p.poll() for p in procs):
                    raise RuntimeError(f"no probe indexed within 120s:\n{procs[0].tail()}")
                time.sleep(POLL_S)
            t0 = producer.go(total)
        first_seq = int(warm * rate)
        step = max(1, round(rate / LAT_SAMPLES_PER_S))
        unseen = {lat_key_for(s): s for s in range(first_seq, window_end, step)}
        latencies: list[float] = []
        found: list[tuple[int, int, float]] = []  # (record, _seq_no, lat_ts) of each sample
        refreshes: list[float] = []
        by_seq: list[tuple[int, float]] = []
        watch = IndexedWatch(svc, index)
        watch.start()
        # Stragglers: wait `drain` s after the last record was due, and longer while
        # sampled documents keep arriving (a system slower than `rate` falls behind; its
        # latency is then measured, not cut off), up to 300 s.
        deadline = t0 + warm + measure + tail + drain
        hard_deadline = deadline + 300
        window = (t0 + warm, t0 + warm + measure)
        cpu_marks: list[float] = []
        server_marks: list[dict[str, float | None]] = []  # Kafka's and ES's, same times
        poll_s = args.lat_poll_ms / 1000
        quiet_until = 0.0 if poll_s else t0 + warm + measure + tail  # no refresh before
        while unseen and time.time() < min(deadline, hard_deadline):
            tick = time.monotonic()
            before = len(unseen)
            upto = (time.time() - t0) * rate + 1
            quiet = time.time() < quiet_until
            cand = [] if quiet else [k for k, s in unseen.items() if s <= upto]
            if cand:
                asked_ms = time.time() * 1000
                svc.es.indices.refresh(index=index)
                t_vis_ms = time.time() * 1000
                refreshes.append(t_vis_ms - asked_ms)
                hits: list[dict[str, Any]] = []
                for i in range(0, len(cand), SEARCH_CHUNK):  # under max_result_window
                    res = svc.es.search(
                        index=index,
                        query={"ids": {"values": cand[i : i + SEARCH_CHUNK]}},
                        size=SEARCH_CHUNK,
                        source=False,
                        docvalue_fields=["lat_ts"],
                        seq_no_primary_term=True,
                        filter_path="hits.hits._id,hits.hits._seq_no,hits.hits.fields",
                    )
                    hits += res.get("hits", {}).get("hits", [])
                for hit in hits:
                    seq = unseen.pop(hit["_id"], None)
                    if seq is not None:
                        ts = hit["fields"]["lat_ts"][0]
                        latencies.append(t_vis_ms - ts)
                        found.append((seq, hit["_seq_no"], ts))
                        by_seq.append((seq, latencies[-1]))
            if len(cpu_marks) < 2 and time.time() >= window[len(cpu_marks)]:
                cpu_marks.append(live_cpu(procs))
                server_marks.append(server_cpu(ctx))
            if len(unseen) < before:
                deadline = max(deadline, time.time() + 10)
            if producer is not None and producer.error:
                raise RuntimeError(f"paced producer failed: {producer.error}")
            time.sleep(max(0.0, (poll_s or LAT_POLL_S) - (time.monotonic() - tick)))
        row.lat_samples = len(latencies)
        row.lat_missing = len(unseen)
        if not latencies:
            raise RuntimeError("no sampled document became searchable")
        watch.stop.set()
        watch.join()
        ix_by_seq = [(q, t - ts) for q, n, ts in found if (t := watch.indexed_ms(n)) is not None]
        indexed = [v for _, v in ix_by_seq]
        if poll_s:
            row.p50_ms = percentile(latencies, 0.50)
            row.p99_ms = percentile(latencies, 0.99)
            row.extra["refresh_p99_ms"] = percentile(refreshes, 0.99)
        else:  # looked for only once the records stopped: no searchable latency
            by_seq = ix_by_seq
        row.extra["ix_unmapped"] = len(found) - len(indexed)
        if watch.failed:
            log(f"latency: {system}: {watch.failed} index_total looks failed (ix_ figures)")
        if indexed:
            row.extra["ix_p50_ms"] = percentile(indexed, 0.50)
            row.extra["ix_p99_ms"] = percentile(indexed, 0.99)
        row.extra["lat_poll_ms"] = args.lat_poll_ms
        row.extra["latency_rate"] = rate
        # Saturated: the median latency of the window's second half is more than twice
        # (and 1 s above) that of its first half: the system fell behind the rate.
        by_seq.sort()
        if args.keep_work:
            samples = [[q, round(v, 1)] for q, v in by_seq]
            (ctx.work / f"{ctx.variant}-lat-{system}.json").write_text(json.dumps(samples))
        half = len(by_seq) // 2
        m1 = percentile([v for _, v in by_seq[:half]] or [0.0], 0.5)
        m2 = percentile([v for _, v in by_seq[half:]] or [0.0], 0.5)
        row.extra["saturated"] = m2 > 2 * m1 and m2 - m1 > 1000
        if len(cpu_marks) == 2:
            row.extra["live_cpu_us"] = (cpu_marks[1] - cpu_marks[0]) / (measure * rate) * 1e6
            for name in ("kafka", "es"):
                b, a = (m.get(name) for m in server_marks)
                if a is not None and b is not None:
                    row.extra[f"live_{name}_us"] = (a - b) / (measure * rate) * 1e6
        # Lull: once the input stops, how long until the last record is indexed?
        if producer is not None:
            producer.done.wait(120)
            last, expected = producer.last_ts, total + producer.probes
            row.extra["producer_late_ms"] = producer.late_ms
        else:
            last, expected = t0 + total / rate, total
        while svc.index_total(index) < expected and time.time() < last + 120:
            time.sleep(POLL_S)
        row.extra["flush_s"] = time.time() - last
        stop_all(procs, natural=system == "ceiling", grace=60)
        bad = [p for p in procs if p.returncode != 0]
        if bad:
            raise RuntimeError(
                f"{bad[0].name} exited with {bad[0].returncode} when stopped:\n{bad[0].tail()}"
            )
    finally:
        if watch is not None:
            watch.stop.set()
        stop_all(procs, natural=False, grace=0)
        svc.delete_index(index)
        if system != "ceiling":
            svc.delete_topic(topic)


def pick_rate(args: argparse.Namespace, rows: list[Row]) -> float:
    """`--latency-rate`, or below saturation for every system: a share (`--latency-share`, by
    default a quarter) of the slowest Kafka consumer's backlog rate (live records cost more than a
    backlog, and 50% of flow-1w saturates loop and quix on a shared 2-core machine)."""
    if args.latency_rate:
        return args.latency_rate
    by = {r.system: r for r in rows if r.docs_per_s}
    kafka = [r.docs_per_s or 0 for r in by.values() if r.system != "ceiling"]
    return args.latency_share * min(kafka or [r.docs_per_s or 0 for r in by.values()])


def run_all(ctx: Ctx, rows: list[Row]) -> tuple[float, bool]:
    """The latency run of every row whose throughput run passed: (rate, whether one failed)."""
    rate = pick_rate(ctx.args, rows)
    failed = False
    for row in rows:
        if row.error or not rate or row.system == "floor":  # it sends only full bulks
            continue
        log(f"latency: {row.system} at {rate:,.0f} records/s ...")
        try:
            run_latency(ctx, row.system, rate, row)
            shown = [("p50", row.p50_ms), ("p99", row.p99_ms)]
            shown += [(k, row.extra.get(f"{k}_ms")) for k in ("ix_p50", "ix_p99")]
            log(
                f"latency: {row.system}: "
                + ", ".join(f"{k} {v:,.0f} ms" for k, v in shown if v is not None)
                + f" ({row.lat_samples} samples, {row.lat_missing} missing)"
            )
            if row.lat_missing:
                raise RuntimeError(f"{row.lat_missing} sampled documents never became searchable")
        except Exception as e:
            row.error = f"latency: {e}"
            failed = True
            log(f"latency: {row.system} FAILED: {e}")
        time.sleep(0.5 if ctx.args.quick else 1)
    return rate, failed
