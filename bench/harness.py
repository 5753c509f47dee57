"""The benchmark harness behind `scripts/bench`; docs/benchmarks.md describes the method.

One dataset (keyed JSON over 8 partitions) is produced once; then each system runs on its
own, one after another, as its own process(es), into its own fresh index:

- ceiling: pre-serialized NDJSON `_bulk` bodies (~5 MB, the same ids), 3 requests in flight,
  no Kafka (`bench.ceiling`);
- loop: confluent-kafka consumer + `helpers.streaming_bulk`, commit after each bulk
  (`bench.loop`);
- quix: Quix Streams' ElasticsearchSink (`bench/quix_app.py`, in the tools virtualenv);
- flow-1w, flow-2w, flow-2p: `python -m bytewax.run flows.es_sink` with 1 worker, 2 workers,
  2 processes; KAFKA_STOP_AT_END=true, fresh group ids.

Throughput: docs_per_s = N / (end - start); start = when the first process of the system is
spawned (start-up, imports, group join included); end = the first 100 ms poll of the
index's primary `indexing.index_total` that is >= N (every document acknowledged by the
shard). The index must then hold exactly N documents. CPU and peak RSS come from the
kernel (`wait4` rusage) over the processes' whole lives. Between the same two moments (spawn,
reap) the CPU time of the Elasticsearch and Kafka server processes is read (psutil), and the
whole stack's CPU per record gives the rate at which it would saturate every core.

Latency: afterwards, at a fixed rate (50% of flow-1w's docs_per_s), a paced producer writes
live records to a fresh topic per system; a systematic sample (~200 documents/s) is looked
for every 50 ms (`_refresh`, then an `ids` search); latency = refresh return time - record
timestamp (`lat_ts` in the document, set to the produce time).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from elasticsearch import Elasticsearch

from bench.data import SEED, dataset, lat_key_for, make_doc
from bench.procs import Proc, ServerCpu, kill_all
from devkit.es import count_docs
from devkit.kafka import create_topic

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ("ceiling", "loop", "quix", "flow-1w", "flow-2w", "flow-2p")
JSON_KEYS = (
    "system",
    "variant",
    "docs_per_s",
    "cpu_s_per_million",
    "peak_rss_mb",
    "p50_ms",
    "p99_ms",
    "ratio_to_ceiling",
)
PARTITIONS = 8
BODY_BYTES = 5 * 1024 * 1024
TOOLS_PINS = ("quixstreams[elasticsearch]==3.28.1", "py-spy==0.4.3")
POLL_S = 0.1
LAT_POLL_S = 0.05
LAT_SAMPLES_PER_S = 200
INDEX_SETTINGS = {"number_of_shards": 1, "number_of_replicas": 0}


def log(msg: str) -> None:
    print(f"bench {datetime.datetime.now():%H:%M:%S} {msg}", file=sys.stderr, flush=True)


@dataclass
class Row:
    """One system's figures; `as_json` has exactly JSON_KEYS."""

    system: str
    variant: str
    docs_per_s: float | None = None
    cpu_s_per_million: float | None = None
    peak_rss_mb: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    ratio_to_ceiling: float | None = None
    # not in the JSON: printed and documented
    wall_s: float | None = None
    first_doc_s: float | None = None
    lat_samples: int = 0
    lat_missing: int = 0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in JSON_KEYS:
            v = getattr(self, k)
            out[k] = round(v, 3) if isinstance(v, float) else v
        return out


# ----------------------------------------------------------------- Kafka and ES plumbing


class Services:
    def __init__(self, bootstrap: str, es_url: str, run_id: str) -> None:
        self.bootstrap = bootstrap
        self.es_url = es_url
        self.run_id = run_id
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.es = Elasticsearch(es_url, request_timeout=120)
        self.topics: list[str] = []
        self.indices: list[str] = []
        self.groups: list[str] = []

    def name(self, what: str) -> str:
        return f"bench-{self.run_id}-{what}"

    def check(self) -> None:
        try:
            self.admin.list_topics(timeout=20)
        except Exception as e:
            raise SystemExit(f"bench: Kafka at {self.bootstrap} does not answer: {e}") from None
        try:
            self.es.cluster.health(wait_for_status="yellow", timeout="30s")
        except Exception as e:
            raise SystemExit(
                f"bench: Elasticsearch at {self.es_url} does not answer: {e}"
            ) from None

    def create_topic(self, topic: str) -> None:
        try:
            create_topic(self.bootstrap, topic, PARTITIONS)
        finally:
            self.topics.append(topic)  # deleted at the end even if the leader wait failed

    def delete_topic(self, topic: str) -> None:
        with contextlib.suppress(Exception):
            for fut in self.admin.delete_topics([topic]).values():
                fut.result(30)
        if topic in self.topics:
            self.topics.remove(topic)

    def end_offsets(self, topic: str) -> int:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.name("probe")})
        try:
            return sum(
                c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(PARTITIONS)
            )
        finally:
            c.close()

    def create_index(self, index: str) -> None:
        self.es.options(ignore_status=404).indices.delete(index=index)
        self.es.indices.create(index=index, settings=INDEX_SETTINGS)
        self.indices.append(index)

    def delete_index(self, index: str) -> None:
        self.es.options(ignore_status=404).indices.delete(index=index)
        if index in self.indices:
            self.indices.remove(index)

    def index_total(self, index: str) -> int:
        """Index operations the primary shard has completed (acknowledged documents)."""
        r = self.es.options(ignore_status=404).indices.stats(
            index=index, metric="indexing", filter_path="_all.primaries.indexing.index_total"
        )
        try:
            return int(r["_all"]["primaries"]["indexing"]["index_total"])
        except (KeyError, TypeError):
            return 0

    def count(self, index: str) -> int:
        return count_docs(self.es, index)

    def group(self, what: str) -> str:
        g = self.name(f"{what}-{uuid.uuid4().hex[:6]}")
        self.groups.append(g)
        return g

    def cleanup(self) -> None:
        for index in list(self.indices):
            with contextlib.suppress(Exception):
                self.delete_index(index)
        for topic in list(self.topics):
            self.delete_topic(topic)
        # and anything of this run that is left (topics re-created by a client, say)
        with contextlib.suppress(Exception):
            prefix = self.name("")
            left = [t for t in self.admin.list_topics(timeout=10).topics if t.startswith(prefix)]
            for t in left:
                self.delete_topic(t)
        if self.groups:
            with contextlib.suppress(Exception):
                for fut in self.admin.delete_consumer_groups(self.groups).values():
                    with contextlib.suppress(Exception):
                        fut.result(30)
            self.groups = []


def new_producer(bootstrap: str, **extra: Any) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "message.max.bytes": 16_777_216,
            # A live producer asks for metadata of topics this harness deletes; the broker
            # must not create them again (auto.create.topics.enable defaults to true).
            "allow.auto.create.topics": False,
            "log_level": 4,
            **extra,
        }
    )


def produce_dataset(
    svc: Services,
    topic: str,
    variant: str,
    n: int,
    bodies: Path,
    body_bytes: int,
    write_bodies: bool = True,
) -> float:
    """Produce records 0..n-1 to `topic` and write the ceiling's `_bulk` bodies; seconds."""
    t0 = time.monotonic()
    errors: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    producer = new_producer(svc.bootstrap)
    chunks: list[list[int]] = []
    parts: list[bytes] = []
    size = 0
    offset = 0
    with open(bodies, "wb") if write_bodies else contextlib.nullcontext() as out:

        def write_body() -> None:
            nonlocal parts, size, offset
            body = b"".join(parts)
            out.write(body)  # type: ignore[union-attr]
            chunks.append([offset, len(body)])
            offset += len(body)
            parts, size = [], 0

        for i, (key, value) in enumerate(dataset(variant, n)):
            while True:
                try:
                    producer.produce(topic, value, key, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 5000 == 0:
                producer.poll(0)
            if not write_bodies:
                continue
            line = b'{"index":{"_id":"%s"}}\n%s\n' % (key, value)
            parts.append(line)
            size += len(line)
            if size >= body_bytes:
                write_body()
        if parts:
            write_body()
    if write_bodies:
        Path(str(bodies) + ".json").write_text(json.dumps(chunks))
    if producer.flush(120) != 0 or errors:
        raise RuntimeError(f"producing the dataset failed: {errors[:3]}")
    del producer
    got = svc.end_offsets(topic)
    if got != n:
        raise RuntimeError(f"topic {topic} holds {got} records, expected {n}")
    return time.monotonic() - t0


# ----------------------------------------------------------------- the systems


@dataclass
class Ctx:
    svc: Services
    args: argparse.Namespace
    work: Path
    variant: str
    n: int
    data_topic: str
    bodies: Path
    tools_python: Path | None
    servers: ServerCpu | None = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_SRC: list[Path] = [ROOT]


def snapshot_sources(work: Path) -> Path:
    """Copy flows/, sinks/ and bench/ into the work directory and run every child from
    there: other people may edit the working tree during a run, and each figure must come
    from the same code."""
    src = work / "src"
    for pkg in ("flows", "sinks", "bench"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    _SRC[0] = src
    return src


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KAFKA_", "ES_", "DLQ_", "BYTEWAX_", "PYTHON"))
    }
    env["PYTHONPATH"] = str(_SRC[0])
    env.update(extra or {})
    return env


def launch(
    ctx: Ctx, system: str, topic: str, index: str, group: str, live: bool, tag: str
) -> list[Proc]:
    """Start `system` reading `topic` into `index`; `live`: run until stopped (latency)."""
    svc, py = ctx.svc, sys.executable
    logf = ctx.work / f"{tag}-{system}.log"
    if system == "loop":
        cmd = [py, "-m", "bench.loop", "--bootstrap", svc.bootstrap, "--es", svc.es_url]
        cmd += ["--topic", topic, "--group", group, "--index", index]
        if not live:
            cmd.append("--stop-at-end")
        return [Proc(system, cmd, child_env(), ctx.work, logf)]
    if system == "quix":
        assert ctx.tools_python is not None
        state = ctx.work / f"quix-state-{tag}"
        cmd = [str(ctx.tools_python), str(_SRC[0] / "bench" / "quix_app.py")]
        cmd += ["--bootstrap", svc.bootstrap, "--es", svc.es_url, "--topic", topic]
        cmd += ["--group", group, "--index", index, "--state-dir", str(state)]
        return [Proc(system, cmd, child_env(), ctx.work, logf)]
    if system.startswith("flow-"):
        env = child_env(
            {
                "KAFKA_BOOTSTRAP_SERVERS": svc.bootstrap,
                "KAFKA_TOPICS": topic,
                "KAFKA_GROUP_ID": group,
                "KAFKA_AUTO_OFFSET_RESET": "earliest",
                "KAFKA_STOP_AT_END": "false" if live else "true",
                "ES_HOSTS": svc.es_url,
                "ES_INDEX": index,
                **dict(kv.split("=", 1) for kv in ctx.args.flow_env),
            }
        )
        base = [py, "-m", "bytewax.run", "flows.es_sink"]
        if ctx.args.epoch_s:
            base += ["-s", str(ctx.args.epoch_s)]
        if system == "flow-1w":
            return [Proc(system, base, env, ctx.work, logf)]
        if system == "flow-2w":
            return [Proc(system, [*base, "-w", "2"], env, ctx.work, logf)]
        addrs = f"127.0.0.1:{free_port()};127.0.0.1:{free_port()}"
        return [
            Proc(
                f"{system}/{i}",
                [*base, "-i", str(i), "-a", addrs],
                env,
                ctx.work,
                ctx.work / f"{tag}-{system}-{i}.log",
            )
            for i in range(2)
        ]
    raise ValueError(system)


def launch_ceiling_bulk(ctx: Ctx, index: str, limit: int = 0) -> list[Proc]:
    cmd = [sys.executable, "-m", "bench.ceiling", "bulk", "--es", ctx.svc.es_url]
    cmd += ["--index", index, "--bodies", str(ctx.bodies), "--threads", str(ctx.args.threads)]
    cmd += ["--limit", str(limit)]
    return [Proc("ceiling", cmd, child_env(), ctx.work, ctx.work / "tput-ceiling.log")]


def warm_up_es(ctx: Ctx) -> None:
    """Untimed: up to 30 bulk bodies into a throwaway index, so that Elasticsearch's JIT
    and caches are warm before the first measured run (the ceiling)."""
    index = ctx.svc.name(f"{ctx.variant}-warmup")
    ctx.svc.create_index(index)
    try:
        log("warm-up: 30 ceiling bodies into a throwaway index (not measured) ...")
        procs = launch_ceiling_bulk(ctx, index, limit=30)
        stop_all(procs, natural=True, grace=300)
    finally:
        ctx.svc.delete_index(index)


def stop_all(procs: list[Proc], natural: bool, grace: float, term_grace: float = 60) -> None:
    """Let processes end by themselves (`natural`) for up to `grace` s; then SIGTERM all of
    them at once (a multi-process flow only stops when every process was told), and SIGKILL
    what is still running `term_grace` s later."""
    if natural:
        deadline = time.monotonic() + grace
        for p in procs:
            p.wait(max(0.0, deadline - time.monotonic()))
    alive = [p for p in procs if not p.poll()]
    for p in alive:
        p.signal(signal.SIGTERM)
    deadline = time.monotonic() + term_grace
    for p in alive:
        if not p.wait(max(0.0, deadline - time.monotonic())):
            p.stop(0)


def wait_indexed(
    ctx: Ctx, index: str, n: int, procs: list[Proc], timeout: float
) -> tuple[float | None, float]:
    """Poll the primary's index_total every 100 ms until >= n; (first doc, end) monotonic."""
    svc = ctx.svc
    first: float | None = None
    deadline = time.monotonic() + timeout
    exited_at: float | None = None
    while True:
        total = svc.index_total(index)
        now = time.monotonic()
        if total > 0 and first is None:
            first = now
        if total >= n:
            return first, now
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
    """Backlog run of one system; see the module docstring for the definitions."""
    svc, n = ctx.svc, ctx.n
    row = Row(system, ctx.variant)
    index = svc.name(f"{ctx.variant}-{system}")
    svc.create_index(index)
    try:
        group = svc.group(f"{system}") if system != "ceiling" else ""
        # Elasticsearch's and Kafka's CPU so far, just before the first spawn and just
        # after the last reap: the interval the system's own CPU (rusage) covers.
        servers_before = server_cpu(ctx)
        if system == "ceiling":
            procs = launch_ceiling_bulk(ctx, index)
        else:
            procs = launch(ctx, system, ctx.data_topic, index, group, live=False, tag="tput")
        hook = on_start(procs) if on_start else None
        try:
            first, end = wait_indexed(ctx, index, n, procs, timeout=180 + n / 500)
        finally:
            # quix has no stop-at-end: it is stopped (SIGTERM: flush, commit) once all is in
            stop_all(procs, natural=system != "quix", grace=90)
            servers_after = server_cpu(ctx)
            if hook is not None and hasattr(hook, "join"):
                hook.join(60)
        start = min(p.started for p in procs)
        bad = [p for p in procs if p.returncode not in (0, None)]
        if bad:
            raise RuntimeError(f"{bad[0].name} exited with {bad[0].returncode}:\n{bad[0].tail()}")
        row.wall_s = end - start
        row.first_doc_s = (first - start) if first else None
        row.docs_per_s = n / row.wall_s
        row.cpu_s_per_million = sum(p.cpu_s for p in procs) / n * 1e6
        row.peak_rss_mb = sum(p.maxrss_mb for p in procs)
        row.extra["processes"] = len(procs)
        add_stack_cpu(row, servers_before, servers_after, n)
        got = svc.count(index)
        if got != n:
            raise RuntimeError(f"the index holds {got} documents, expected {n}")
    finally:
        svc.delete_index(index)
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


# ----------------------------------------------------------------- latency


class PacedProducer(threading.Thread):
    """Probes (5/s) until `go()`, then records on the schedule seq -> t0 + seq / rate."""

    def __init__(self, bootstrap: str, topic: str, variant: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.topic, self.variant, self.rate = topic, variant, rate
        self.producer = new_producer(bootstrap, **{"linger.ms": 5, "batch.size": 1_000_000})
        self.t0: float | None = None
        self.total: int | None = None
        self.seq = 0
        self.probes = 0
        self.last_ts = 0.0
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
        rng = random.Random(SEED + 1)
        p, dumps = self.producer, orjson.dumps
        while not self._go.wait(0.2):
            probe = self.probes
            p.produce(self.topic, b'{"probe": %d}' % probe, b"probe-%d" % probe)
            p.poll(0)
            self.probes += 1
        assert self.t0 is not None and self.total is not None
        t0, rate, total = self.t0, self.rate, self.total
        while self.seq < total:
            due = min(total, int((time.time() - t0) * rate) + 1)
            while self.seq < due:
                seq = self.seq
                doc = make_doc(self.variant, rng, seq)
                now_ms = int(time.time() * 1000)
                doc["lat_seq"] = seq
                doc["lat_ts"] = now_ms
                while True:
                    try:
                        p.produce(
                            self.topic, dumps(doc), lat_key_for(seq).encode(), timestamp=now_ms
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


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def run_latency(ctx: Ctx, system: str, rate: float, row: Row) -> None:
    svc, args = ctx.svc, ctx.args
    warm, measure, drain = args.lat_warmup_s, args.lat_seconds, args.lat_drain_s
    tail = args.lat_tail_s  # produced after the window, unmeasured: the window is steady
    index = svc.name(f"{ctx.variant}-lat-{system}")
    svc.create_index(index)
    topic = svc.name(f"{ctx.variant}-lat-{system}")
    procs: list[Proc] = []
    producer: PacedProducer | None = None
    total = int((warm + measure + tail) * rate)
    window_end = int((warm + measure) * rate)
    try:
        if system == "ceiling":
            cmd = [sys.executable, "-m", "bench.ceiling", "paced", "--es", svc.es_url]
            cmd += ["--index", index, "--variant", ctx.variant, "--rate", str(rate)]
            cmd += ["--seconds", str(warm + measure + tail)]
            proc = Proc(
                system, cmd, child_env(), ctx.work, ctx.work / "lat-ceiling.log", stdout_pipe=True
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
            producer = PacedProducer(svc.bootstrap, topic, ctx.variant, rate)
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
        by_seq: list[tuple[int, float]] = []
        # Stragglers: wait `drain` s after the last record was due, and longer while
        # sampled documents keep arriving (a system slower than `rate` falls behind; its
        # latency is then measured, not cut off), up to 300 s.
        deadline = t0 + warm + measure + tail + drain
        hard_deadline = deadline + 300
        window = (t0 + warm, t0 + warm + measure)
        cpu_marks: list[float] = []
        while unseen and time.time() < min(deadline, hard_deadline):
            tick = time.monotonic()
            before = len(unseen)
            upto = (time.time() - t0) * rate + 1
            cand = [k for k, s in unseen.items() if s <= upto]
            if cand:
                svc.es.indices.refresh(index=index)
                t_vis_ms = time.time() * 1000
                res = svc.es.search(
                    index=index,
                    query={"ids": {"values": cand}},
                    size=len(cand),
                    source=False,
                    docvalue_fields=["lat_ts"],
                    filter_path="hits.hits._id,hits.hits.fields",
                )
                for hit in res.get("hits", {}).get("hits", []):
                    seq = unseen.pop(hit["_id"], None)
                    if seq is not None:
                        latencies.append(t_vis_ms - hit["fields"]["lat_ts"][0])
                        by_seq.append((seq, latencies[-1]))
            if len(cpu_marks) < 2 and time.time() >= window[len(cpu_marks)]:
                cpu_marks.append(live_cpu(procs))
            if len(unseen) < before:
                deadline = max(deadline, time.time() + 10)
            if producer is not None and producer.error:
                raise RuntimeError(f"paced producer failed: {producer.error}")
            time.sleep(max(0.0, LAT_POLL_S - (time.monotonic() - tick)))
        row.lat_samples = len(latencies)
        row.lat_missing = len(unseen)
        if not latencies:
            raise RuntimeError("no sampled document became searchable")
        row.p50_ms = percentile(latencies, 0.50)
        row.p99_ms = percentile(latencies, 0.99)
        row.extra["latency_rate"] = rate
        # Saturated: the median latency of the window's second half is more than twice
        # (and 1 s above) that of its first half: the system fell behind the rate.
        by_seq.sort()
        if args.keep_work:
            samples = [[q, round(v, 1)] for q, v in by_seq]
            (ctx.work / f"lat-{system}.json").write_text(json.dumps(samples))
        half = len(by_seq) // 2
        m1 = percentile([v for _, v in by_seq[:half]] or [0.0], 0.5)
        m2 = percentile([v for _, v in by_seq[half:]] or [0.0], 0.5)
        row.extra["saturated"] = m2 > 2 * m1 and m2 - m1 > 1000
        if len(cpu_marks) == 2:
            row.extra["live_cpu_us"] = (cpu_marks[1] - cpu_marks[0]) / (measure * rate) * 1e6
        # Lull: once the input stops, how long until the last record is indexed?
        if producer is not None:
            producer.done.wait(120)
            last, expected = producer.last_ts, total + producer.probes
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
        stop_all(procs, natural=False, grace=0)
        svc.delete_index(index)
        if system != "ceiling":
            svc.delete_topic(topic)


# ----------------------------------------------------------------- output


def head_commit() -> str:
    """The checked-out commit (read-only), '+dirty' when tracked files differ from it."""
    import subprocess

    def git(*a: str) -> str:
        r = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=False)
        return r.stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return (git("rev-parse", "--short", "HEAD") or "?") + ("+dirty" if dirty else "")


STACK_KEYS = ("es_cpu_us", "kafka_cpu_us", "total_cpu_us", "bound_docs_per_s", "bound_ratio")


def stack_cpu_json(r: Row) -> dict[str, Any]:
    """A row's pipeline + Elasticsearch + Kafka CPU per record and the CPU bound."""
    out: dict[str, Any] = {"system": r.system, "variant": r.variant, "cores": os.cpu_count()}
    out["cpu_us"] = None if r.cpu_s_per_million is None else round(r.cpu_s_per_million, 3)
    for k in STACK_KEYS:
        v = r.extra.get(k)
        out[k] = round(v, 3) if isinstance(v, float) else v
    return out


def print_table(rows: list[Row], rate: float | None) -> None:
    head = (
        f"{'system':<8} {'variant':<7} {'docs/s':>9} {'ratio':>6} {'cpu_s/M':>8} "
        f"{'rss_mb':>7} {'p50_ms':>7} {'p99_ms':>7} {'wall_s':>7} {'first_s':>7} "
        f"{'live_us':>7} {'lull_s':>6} {'es_us':>6} {'kafka_us':>8} {'total_us':>8} "
        f"{'bound/s':>9} {'bound_r':>7}"
    )
    print(head)
    print("-" * len(head))

    def f(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    for r in rows:
        if r.error:
            print(f"{r.system:<8} {r.variant:<7} FAILED: {r.error.splitlines()[0][:80]}")
            continue
        print(
            f"{r.system:<8} {r.variant:<7} {f(r.docs_per_s, ',.0f'):>9} "
            f"{f(r.ratio_to_ceiling, '.2f'):>6} {f(r.cpu_s_per_million, ',.1f'):>8} "
            f"{f(r.peak_rss_mb, ',.0f'):>7} {f(r.p50_ms, ',.0f'):>7} "
            f"{f(r.p99_ms, ',.0f'):>7} {f(r.wall_s, '.1f'):>7} {f(r.first_doc_s, '.1f'):>7} "
            f"{f(r.extra.get('live_cpu_us'), '.1f'):>7} {f(r.extra.get('flush_s'), '.1f'):>6} "
            f"{f(r.extra.get('es_cpu_us'), '.1f'):>6} {f(r.extra.get('kafka_cpu_us'), '.1f'):>8} "
            f"{f(r.extra.get('total_cpu_us'), '.1f'):>8} "
            f"{f(r.extra.get('bound_docs_per_s'), ',.0f'):>9} "
            f"{f(r.extra.get('bound_ratio'), '.2f'):>7}"
        )
    sat = [r.system for r in rows if r.extra.get("saturated")]
    if sat:
        print(f"saturated at the latency rate (latency grew during the window): {', '.join(sat)}")
    if rate:
        print(f"latency at {rate:,.0f} records/s; samples (missing): ", end="")
        print(", ".join(f"{r.system} {r.lat_samples} ({r.lat_missing})" for r in rows))


def plot(rows: list[Row], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.docs_per_s]
    names = [r.system for r in ok]
    colors = ["#888888" if r.system == "ceiling" else "#4c72b0" for r in ok]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    bars = a.bar(names, [r.docs_per_s or 0 for r in ok], color=colors)
    a.set_title("throughput (docs/s, higher is better)")
    for bar, r in zip(bars, ok, strict=True):
        label = f"{r.docs_per_s:,.0f}"
        if r.ratio_to_ceiling is not None:
            label += f"\n{r.ratio_to_ceiling:.2f}x"
        a.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                   ha="center", va="bottom", fontsize=8)  # fmt: skip
    a.margins(y=0.2)
    bars = b.bar(names, [r.cpu_s_per_million or 0 for r in ok], color=colors)
    b.set_title("CPU per record (µs, lower is better)")
    for bar, r in zip(bars, ok, strict=True):
        b.annotate(f"{r.cpu_s_per_million:,.1f}",
                   (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                   ha="center", va="bottom", fontsize=8)  # fmt: skip
    b.margins(y=0.2)
    for ax in (a, b):
        ax.tick_params(axis="x", labelrotation=20)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------- tools venv, memory, profile


def tools_python(args: argparse.Namespace) -> Path:
    """The bench tools virtualenv (quixstreams, py-spy), created on first use."""
    venv = Path(args.tools_venv).expanduser()
    py = venv / "bin" / "python"
    stamp = venv / (".bench-" + uuid.uuid5(uuid.NAMESPACE_URL, " ".join(TOOLS_PINS)).hex[:12])
    if not stamp.exists():
        import subprocess

        log(f"creating the tools virtualenv {venv} ({', '.join(TOOLS_PINS)})")
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *TOOLS_PINS],
            check=True,
        )
        stamp.touch()
    return py


class RssSampler(threading.Thread):
    """Samples the RSS of the given processes once per second (psutil)."""

    def __init__(self, procs: list[Proc], every: float = 1.0) -> None:
        super().__init__(daemon=True)
        import psutil

        self.handles = [psutil.Process(p.pid) for p in procs]
        self.procs, self.every = procs, every
        self.samples: list[tuple[float, float]] = []
        self.t0 = min(p.started for p in procs)

    def run(self) -> None:
        import psutil

        while not all(p.returncode is not None for p in self.procs):
            rss = 0
            try:
                rss = sum(h.memory_info().rss for h in self.handles)
            except psutil.Error:
                break
            self.samples.append((round(time.monotonic() - self.t0, 2), rss / 2**20))
            time.sleep(self.every)


def plot_memory(samples: list[tuple[float, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.8))
    ax.plot([t for t, _ in samples], [m for _, m in samples], lw=1.2)
    ax.set_xlabel("seconds since the flow started")
    ax.set_ylabel("RSS (MiB)")
    ax.set_ylim(0, max(m for _, m in samples) * 1.3)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def start_profiler(ctx: Ctx, out: Path, rate: int) -> Callable[[list[Proc]], Any]:
    """An `on_start` hook that attaches py-spy to the flow process."""
    assert ctx.tools_python is not None
    spy = ctx.tools_python.parent / "py-spy"

    def hook(procs: list[Proc]) -> Any:
        cmd = [str(spy), "record", "--pid", str(procs[0].pid), "--rate", str(rate)]
        cmd += ["--format", "raw", "--nonblocking", "-o", str(out)]
        if ctx.args.native:
            cmd.append("--native")
        return _Waiter(Proc("py-spy", cmd, child_env(), ctx.work, ctx.work / "py-spy.log"))

    return hook


class _Waiter:
    def __init__(self, proc: Proc) -> None:
        self.proc = proc

    def join(self, timeout: float) -> None:
        if not self.proc.wait(timeout):
            self.proc.stop(10)


def summarize_profile(raw: Path, n: int, rate: int, top: int = 25) -> dict[str, Any]:
    """Self and inclusive samples per function from py-spy's collapsed stacks."""
    import re

    frame_re = re.compile(r"^(.*) \((.*):\d+\)$")  # "func (file:line)"; others name threads
    self_c: dict[str, int] = {}
    incl_c: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        frames = []
        for fr in stack.split(";"):
            m = frame_re.match(fr)
            if m is None:  # a process or thread name, not a frame
                continue
            frames.append(f"{m.group(1)} ({_short(m.group(2))})")
        if not frames:
            continue
        total += count
        self_c[frames[-1]] = self_c.get(frames[-1], 0) + count
        for name in set(frames):
            incl_c[name] = incl_c.get(name, 0) + count

    def rows(c: dict[str, int]) -> list[dict[str, Any]]:
        return [
            {
                "function": k,
                "samples": v,
                "share": round(v / total, 4),
                "us_per_record": round(v / rate / n * 1e6, 3),
            }
            for k, v in sorted(c.items(), key=lambda kv: -kv[1])[:top]
        ]

    return {
        "records": n,
        "rate_hz": rate,
        "samples": total,
        "us_per_record_total": round(total / rate / n * 1e6, 3),
        "self": rows(self_c),
        "inclusive": rows(incl_c),
    }


def _short(path: str) -> str:
    for marker in ("site-packages/", "/src/", str(ROOT) + "/", "lib/python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


# ----------------------------------------------------------------- main


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
        help="records/s of the latency runs (default: 50%% of flow-1w's docs/s)",
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
    rows: list[Row] = []
    failed = False
    started = time.monotonic()
    try:
        tools = tools_python(args) if ("quix" in args.systems or args.profile) else None
        commit = head_commit()
        snapshot_sources(work)
        log(f"run {run_id}: flows/, sinks/, bench/ copied at commit {commit}")
        topic = svc.name(f"{variant}-data")
        svc.create_topic(topic)
        log(f"producing {n:,} {variant} records to {topic} (8 partitions) ...")
        bodies = work / "ceiling.ndjson"
        # ~5 MB bodies; smaller for small datasets so that --threads requests stay in flight
        per_doc = 2100 if variant == "large" else 240
        body_bytes = max(256 * 1024, min(BODY_BYTES, n * per_doc // (args.threads * 8)))
        with_bodies = "ceiling" in args.systems
        secs = produce_dataset(svc, topic, variant, n, bodies, body_bytes, with_bodies)
        mib = bodies.stat().st_size / 2**20 if with_bodies else 0
        log(f"produced in {secs:.1f}s ({n / secs:,.0f}/s); ceiling bodies {mib:,.0f} MiB")
        ctx = Ctx(svc, args, work, variant, n, topic, bodies, tools, servers)

        if args.memory:
            return memory_mode(ctx)
        if args.profile:
            return profile_mode(ctx)

        if "ceiling" in args.systems:
            warm_up_es(ctx)
        # The ceiling runs first and again last; the faster run is reported (both are
        # printed): it brackets the others against drift in the machine's load.
        order = list(args.systems) + (["ceiling"] if "ceiling" in args.systems else [])
        ceilings: list[Row] = []
        for system in order:
            log(f"throughput: {system} ...")
            try:
                row = run_throughput(ctx, system)
                es_us, kafka_us = row.extra.get("es_cpu_us"), row.extra.get("kafka_cpu_us")
                log(
                    f"throughput: {system}: {row.docs_per_s:,.0f} docs/s, "
                    f"{row.cpu_s_per_million:,.1f} cpu_s/M, {row.peak_rss_mb:,.0f} MB; "
                    f"es {'-' if es_us is None else f'{es_us:.1f}'} µs/rec, "
                    f"kafka {'-' if kafka_us is None else f'{kafka_us:.1f}'} µs/rec"
                )
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
        svc.delete_topic(topic)

        rate = None
        if not args.no_latency:
            by = {r.system: r for r in rows if r.docs_per_s}
            if args.latency_rate:
                rate = args.latency_rate
            else:
                # below saturation for every system: a quarter of the slowest Kafka
                # consumer's backlog rate (live records cost more than a backlog, and
                # 50% of flow-1w saturates loop and quix on a shared 2-core machine)
                kafka = [r.docs_per_s or 0 for r in by.values() if r.system != "ceiling"]
                rate = args.latency_share * min(kafka or [r.docs_per_s or 0 for r in by.values()])
            for row in rows:
                if row.error or not rate:
                    continue
                log(f"latency: {row.system} at {rate:,.0f} records/s ...")
                try:
                    run_latency(ctx, row.system, rate, row)
                    log(
                        f"latency: {row.system}: p50 {row.p50_ms:,.0f} ms, p99 {row.p99_ms:,.0f} ms"
                        f" ({row.lat_samples} samples, {row.lat_missing} missing)"
                    )
                    if row.lat_missing:
                        raise RuntimeError(
                            f"{row.lat_missing} sampled documents never became searchable"
                        )
                except Exception as e:
                    row.error = f"latency: {e}"
                    failed = True
                    log(f"latency: {row.system} FAILED: {e}")
                time.sleep(0.5 if args.quick else 1)

        ceiling = next((r for r in rows if r.system == "ceiling" and r.docs_per_s), None)
        for r in rows:
            if ceiling and r.docs_per_s and ceiling.docs_per_s:
                r.ratio_to_ceiling = r.docs_per_s / ceiling.docs_per_s
                if r.extra.get("bound_docs_per_s"):
                    r.extra["bound_ratio"] = r.extra["bound_docs_per_s"] / ceiling.docs_per_s
        print()
        print(f"{n:,} {variant} records, {PARTITIONS} partitions; run {run_id}; "
              f"code of commit {commit}; "
              f"{time.monotonic() - started:.0f}s in total")  # fmt: skip
        print_table(rows, rate)
        good = [r for r in rows if not r.error]
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps([r.as_json() for r in good], indent=2) + "\n")
            # the stack's CPU beside it: the JSON above keeps exactly JSON_KEYS
            stack_json = args.json.with_suffix(".stack-cpu.json")
            stack_json.write_text(json.dumps([stack_cpu_json(r) for r in good], indent=2) + "\n")
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


def memory_mode(ctx: Ctx) -> int:
    args = ctx.args
    sampler: list[RssSampler] = []

    def hook(procs: list[Proc]) -> RssSampler:
        s = RssSampler(procs)
        s.start()
        sampler.append(s)
        return s

    log(f"memory: flow-1w over {ctx.n:,} records, RSS once per second ...")
    row = run_throughput(ctx, "flow-1w", on_start=hook)
    samples = sampler[0].samples
    mems = [m for _, m in samples]
    steady = [m for t, m in samples if t >= 30] or mems
    result = {
        "mode": "memory",
        "system": "flow-1w",
        "variant": ctx.variant,
        "records": ctx.n,
        "docs_per_s": round(row.docs_per_s or 0, 1),
        "peak_rss_mb": round(row.peak_rss_mb or 0, 1),
        "rss_mb_after_30s": {"min": round(min(steady), 1), "max": round(max(steady), 1)},
        "samples": [[t, round(m, 1)] for t, m in samples],
    }
    print(
        f"memory: {ctx.n:,} records in {row.wall_s:.0f}s ({row.docs_per_s:,.0f} docs/s); "
        f"RSS peak {row.peak_rss_mb:,.0f} MB (kernel); sampled after 30s: "
        f"{min(steady):,.0f}..{max(steady):,.0f} MB over {len(samples)} samples"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result) + "\n")
    if args.png:
        args.png.parent.mkdir(parents=True, exist_ok=True)
        plot_memory(
            samples,
            args.png,
            f"flow-1w RSS over a {ctx.n:,}-record {ctx.variant} backlog (sampled every 1 s)",
        )
    return 0


def profile_mode(ctx: Ctx) -> int:
    args = ctx.args
    raw = ctx.work / "py-spy.txt"
    log(f"profile: flow-1w over {ctx.n:,} records under py-spy ({args.profile_rate} Hz) ...")
    row = run_throughput(ctx, "flow-1w", on_start=start_profiler(ctx, raw, args.profile_rate))
    if not raw.exists():
        raise RuntimeError(f"py-spy wrote nothing; see {ctx.work / 'py-spy.log'}")
    summary = summarize_profile(raw, ctx.n, args.profile_rate)
    summary.update(
        docs_per_s=round(row.docs_per_s or 0, 1),
        cpu_s_per_million=round(row.cpu_s_per_million or 0, 1),
        native=bool(args.native),
    )
    args.profile.parent.mkdir(parents=True, exist_ok=True)
    args.profile.write_text(json.dumps(summary, indent=2) + "\n")
    if args.profile_raw:
        shutil.copy(raw, args.profile_raw)
    print(
        f"profile: {ctx.n:,} records, {row.docs_per_s:,.0f} docs/s under py-spy, "
        f"{summary['samples']} samples = {summary['us_per_record_total']:.1f} us/record"
    )
    for kind in ("self", "inclusive"):
        print(f"top {kind}:")
        for r in summary[kind][:15]:
            print(f"  {r['us_per_record']:8.2f} us/rec {r['share'] * 100:5.1f}%  {r['function']}")
    return 0
