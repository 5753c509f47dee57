"""The soak: the flow as a long-running service at half its capacity, disturbed on a schedule.

One run, end to end (`scripts/soak`; `tests/integration/test_soak.py` runs a 3-minute form):

1. A node of its own (`scripts/stack`, own STACK_DIR and ports), so restarting it troubles
   nothing else; a fresh 8-partition topic, dead-letter topic, index (2 shards, strict
   mapping) and recovery store; the flow as `--layout` (default 2 processes) with
   `-r <store> -s 5 -b 30` as docs/guarantees.md (Recovery) runs it,
   KAFKA_STOP_AT_END=false, the chaos workload's transform and its ~2% bad records of ~20 kinds.
2. Calibration: a backlog of `--calibrate` records drained by the first run; the index
   operations' rate between 10% and 90% of it is the flow's capacity here, and the soak
   then produces at `--load` (0.5) of it, live, for `--minutes`.
3. On the schedule (`Plan.events`; an event comes late rather than never when the one
   before took longer to settle): a flow restart every `--restart-every` seconds (SIGTERM
   to every process, each must exit 0, then start again); Elasticsearch disturbed every
   `--slow-every` seconds, alternately a write queue of 1 (one write thread, queue 1:
   concurrent bulks get 429s) for `--slow-s` seconds, and a plain node restart.
4. Sampling every `--sample-s` seconds (15): RSS, open descriptors and threads per process and
   the recovery store's size (`tools.chaos.soak_watch.Resources`); latency of ~20 sampled
   records per second (`tools.chaos.soak_watch.Latency`).
5. The end: production stops; once the group committed every offset, a SIGTERM (exit 0
   demanded), then the chaos audit (`tools.chaos.audit`): nothing lost, wrong or extra, every bad
   record and no good one dead-lettered, offsets at the end. `tools.chaos.soak_report` says
   whether memory, descriptors and threads stayed flat, and prints p99 per window.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.chaos import truth as truths
from tools.chaos.audit import AuditResult, Expect, audit, end_offsets
from tools.chaos.flow import ROOT, Flow, flow_env
from tools.chaos.modes import RECOVERY_PARTITIONS, base_settings
from tools.chaos.monitor import Monitor
from tools.chaos.produce import PRODUCER_CONF, Sender
from tools.chaos.session import cleanup
from tools.chaos.soak_watch import Latency, Resources
from tools.chaos.workload import PARTITIONS, Rec, chunk, index_body
from tools.devkit.kafka import create_topic

RUN_ARGS = ["-s", "5", "-b", "30"]
"""Bytewax's epoch and backup intervals, as the example of docs/guarantees.md (Recovery) runs it."""
QUEUE_OF_ONE = "thread_pool.write.size: 1\\nthread_pool.write.queue_size: 1"
LATENCY_SAMPLES_PER_S = 20
START_TIMEOUT_S = 240
"""A node start on busy cores (the default 180 s is for one start, not one per event)."""
SETTLE_LIMIT_S = 300.0
STOP_LIMIT_S = 90.0
"""A SIGTERMed flow must have exited by then (SHUTDOWN_TIMEOUT_S is 30 by default)."""


@dataclass(frozen=True)
class Plan:
    """What the run does and when (seconds from the start of the live phase)."""

    minutes: float
    restart_every_s: float
    slow_every_s: float
    slow_s: float
    sample_s: float
    window_s: float
    load: float
    calibrate: int
    keys: int
    layout: str
    warmup_s: float = 120.0
    """Resources are judged from this long after each start (buffers fill, imports load)."""

    def events(self) -> list[tuple[float, str]]:
        """(when, what), by time: `restart` the flow every `restart_every_s`;
        Elasticsearch from `slow_every_s / 2` on, every `slow_every_s`, alternately
        `slow` then `fast` (a write queue of 1 on, then off `slow_s` later) and
        `es-restart`. With equal periods, those sit halfway between flow restarts."""
        end = self.minutes * 60
        out = [(t, "restart") for t in _steps(self.restart_every_s, self.restart_every_s, end)]
        for n, t in enumerate(_steps(self.slow_every_s / 2, self.slow_every_s, end)):
            if n % 2 == 0:
                out += [(t, "slow"), (min(t + self.slow_s, end), "fast")]
            else:
                out.append((t, "es-restart"))
        return sorted(out)


def _steps(first: float, step: float, end: float) -> list[float]:
    out, t = [], first
    while step > 0 and t < end:
        out.append(t)
        t += step
    return out


@dataclass
class Node:
    """The soak's own Elasticsearch node, through `scripts/stack`."""

    port: int
    stack_dir: Path
    say: Callable[[str], None]
    restarts: list[tuple[str, float]] = field(default_factory=list)
    """(why, seconds from stop requested to answering again)"""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stack(self, cmd: str, settings: str = "") -> None:
        env = {
            **os.environ,
            "ES_PORT": str(self.port),
            "ES_TRANSPORT_PORT": str(self.port + 100),
            "STACK_DIR": str(self.stack_dir),
            "STACK_ES_SETTINGS": settings,
            "STACK_START_TIMEOUT": str(START_TIMEOUT_S),
        }
        which = [] if cmd == "clean" else ["es"]
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "stack"), cmd, *which],
            env=env,
            check=cmd == "up",
            stdout=subprocess.DEVNULL,
        )

    def restart(self, why: str, settings: str = "") -> None:
        t0 = time.monotonic()
        self.stack("down")
        self.stack("up", settings)
        self.restarts.append((why, round(time.monotonic() - t0, 1)))
        self.say(f"soak: Elasticsearch restarted ({why}) in {self.restarts[-1][1]:.0f}s")


class Paced(threading.Thread):
    """Produces the live workload at `rate` records/s until `stop()`, keeping every record
    (offsets from delivery reports) and handing a sample to the latency probe."""

    def __init__(
        self, bootstrap: str, topic: str, recs: list[Rec], keys: int, latency: Latency
    ) -> None:
        super().__init__(daemon=True, name="soak-producer")
        from confluent_kafka import Producer

        self.sender = Sender(Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF}), topic)
        self.recs, self.keys, self.latency = recs, keys, latency
        self.rate = 0.0
        self.rng = random.Random(7)
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def backlog(self, n: int) -> None:
        """`n` records at once, before the flow starts (the calibration's backlog)."""
        self._send(n)
        self.sender.flush()

    def stop(self) -> None:
        """Stop producing; raise unless every record sent was confirmed (a lost produce
        would pass for a loss of the flow's, or hide one)."""
        self._halt.set()
        if self.is_alive():
            self.join()
        self.sender.flush()
        unconfirmed = sum(r.offset < 0 for r in self.recs)
        if self.sender.errors or unconfirmed:
            msg = f"producing failed: {unconfirmed} unconfirmed; {self.sender.errors[:3]}"
            raise RuntimeError(msg)

    def run(self) -> None:
        try:
            t0, sent = time.monotonic(), 0
            while not self._halt.wait(0.02):
                due = int((time.monotonic() - t0) * self.rate)
                if due > sent:
                    self._send(due - sent)
                    sent = due
                self.sender.producer.poll(0)
        except BaseException as e:
            self.error = e

    def _send(self, n: int) -> None:
        first = len(self.recs)
        recs = chunk(self.rng, self.keys, first, n)
        self.sender.send(recs, list(range(first, first + n)))
        self.recs.extend(recs)
        if not self.rate:
            return  # the backlog: latency is measured on live records only
        now = time.time()
        step = max(1, int(self.rate / LATENCY_SAMPLES_PER_S))
        for seq in range(first + (-first) % step, first + n, step):
            rec = recs[seq - first]
            if rec.kind == "good" and rec.key is not None:
                self.latency.expect(rec.key.decode(), seq, now)


@dataclass
class Outcome:
    """What the summary and the report need."""

    capacity: float = 0.0
    rate: float = 0.0
    records: int = 0
    stops_s: list[float] = field(default_factory=list)
    """Seconds each SIGTERMed flow took to exit (the restarts', then the final stop)."""
    rejected: list[int] = field(default_factory=list)
    """Write requests the node rejected (429) during each write-queue-of-1 phase."""
    bad_exits: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    stalls: list[tuple[str, float]] = field(default_factory=list)
    """(event, seconds from its end until the group committed again; -1: never)"""
    busy: list[tuple[float, float]] = field(default_factory=list)
    """(from, to) seconds since t0: each event, from its start until the flow committed
    again (resource samples then are not quiet)"""
    drain_s: float = 0.0
    audit: AuditResult | None = None
    es_restarts: list[tuple[str, float]] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    """(seconds since the live phase began, what) as they happened"""
    live_t0: float = 0.0
    """When the live phase began, seconds since the run's t0."""


class Soak:
    """One soak; `run()` returns its outcome, `resources` and `latency` hold the samples."""

    def __init__(
        self, plan: Plan, *, bootstrap: str, es_port: int, stack_dir: Path, workdir: Path,
        run: str, say: Callable[[str], None],
    ) -> None:  # fmt: skip
        from sinks.elasticsearch.client import connect

        self.plan, self.bootstrap, self.workdir, self.say = plan, bootstrap, workdir, say
        self.node = Node(es_port, stack_dir, say)
        self.topic = self.index = self.group = f"soak-{run}"
        self.dlq = f"{self.topic}-dlq"
        self.recovery = workdir / "recovery"
        self.t0 = time.monotonic()
        self.es: Any = connect(self.node.url, request_timeout=30)  # speaks 8 too (ES_VERSION)
        self.resources = Resources(self.t0, plan.sample_s, self.recovery)
        self.latency = Latency(self.es, self.index, self.t0)
        self.recs: list[Rec] = []
        self.out = Outcome()
        self.runs = 0
        self.flow: Flow | None = None

    def run(self) -> Outcome:
        self.node.stack("clean")
        self.node.stack("up")
        producer: Paced | None = None
        try:
            self._setup()
            producer = Paced(self.bootstrap, self.topic, self.recs, self.plan.keys, self.latency)
            self._calibrate(producer)
            self._live(producer)
            self._finish()
        finally:
            if producer is not None and producer.is_alive():  # the harness failed: stop it
                with contextlib.suppress(Exception):
                    producer.stop()
            self.resources.stop()
            self.latency.stop()
            if self.flow is not None and not self.flow.exited():
                self.flow.kill_all()
            self.out.es_restarts = self.node.restarts
            with contextlib.suppress(Exception):  # best effort: the audit is done
                cleanup(
                    self.bootstrap,
                    self.es,
                    [self.topic, self.dlq],
                    self.index,
                    self.group,
                    self.say,
                )
            self.node.stack("down")
            self.es.close()
        return self.out

    def _setup(self) -> None:
        create_topic(self.bootstrap, self.topic, PARTITIONS)
        create_topic(self.bootstrap, self.dlq, 1)
        self.es.indices.create(index=self.index, **index_body(2))
        self.recovery.mkdir(parents=True)
        cmd = [sys.executable, "-m", "bytewax.recovery", str(self.recovery)]
        subprocess.run([*cmd, str(RECOVERY_PARTITIONS)], check=True, cwd=ROOT)
        settings = base_settings(
            bootstrap=self.bootstrap, es_url=self.node.url, topic=self.topic, group=self.group,
            index=self.index, dlq=self.dlq,
        )  # fmt: skip
        settings["KAFKA_STOP_AT_END"] = "false"
        for name in ("KAFKA_CONSUME_BATCH_SIZE", "BULK_MAX_ACTIONS"):  # the defaults, here
            settings.pop(name)
        self.env = flow_env(settings)

    def _start(self) -> None:
        self.runs += 1
        args = ["-r", str(self.recovery), *RUN_ARGS]
        logs = self.workdir / f"flow-{self.runs}"
        self.flow = Flow(self.plan.layout, args, self.env, logs, rate=0)
        self.resources.follow(self.runs, [p.pid for p in self.flow.procs])

    def _stop_flow(self) -> None:
        """SIGTERM, and demand exit 0 from every process within STOP_LIMIT_S."""
        assert self.flow is not None
        t0 = time.monotonic()
        self.resources.follow(self.runs, [])  # a stopping process is not the run's steady state
        self.flow.terminate()
        if not self.flow.wait(STOP_LIMIT_S):
            self.out.bad_exits.append(f"run {self.runs}: still running {STOP_LIMIT_S:.0f}s on")
            self.flow.kill_all()
        codes = self.flow.codes()
        if any(codes):
            self.out.bad_exits.append(f"run {self.runs}: exit codes {codes}\n{self.flow.tail()}")
        self.out.stops_s.append(round(time.monotonic() - t0, 1))

    def _calibrate(self, producer: Paced) -> None:
        n = self.plan.calibrate
        producer.backlog(n)
        monitor = Monitor(self.es, self.bootstrap, self.group, self.topic, self.index)
        self._start()
        marks: dict[float, float] = {}
        limit = time.monotonic() + 600
        while 0.9 not in marks:
            self._check_alive()
            if time.monotonic() > limit:
                raise RuntimeError(f"the backlog of {n} was not indexed in 600s")
            ops = monitor.index_ops()
            for share in (0.1, 0.9):
                if share not in marks and ops >= share * n:
                    marks[share] = time.monotonic()
            time.sleep(0.2)
        monitor.close()
        self.out.capacity = 0.8 * n / max(marks[0.9] - marks[0.1], 0.1)
        producer.rate = self.out.rate = self.plan.load * self.out.capacity
        self.say(
            f"soak: capacity {self.out.capacity:,.0f} records/s (backlog of {n:,}); producing "
            f"{producer.rate:,.0f}/s for {self.plan.minutes:g} min"
        )

    def _live(self, producer: Paced) -> None:
        """The schedule, each event at its time or, if the one before took longer, once
        that one settled: none is skipped. Production lasts `minutes`, or until the last
        event settled."""
        self.resources.start()
        self.latency.start()
        live0 = time.monotonic()
        self.out.live_t0 = round(live0 - self.t0, 1)
        producer.start()
        monitor = Monitor(self.es, self.bootstrap, self.group, self.topic, self.index)
        slow_until = 0.0
        try:
            for at, what in [*self.plan.events(), (self.plan.minutes * 60, "end")]:
                not_before = live0 + at
                if what == "fast":  # the queue of 1 lasts slow_s from when the node answers
                    not_before = max(not_before, slow_until)
                while time.monotonic() < not_before:
                    self._check_alive()
                    if producer.error is not None:
                        raise RuntimeError(f"the producer failed: {producer.error}")
                    time.sleep(0.5)
                if what == "end":
                    break
                self.out.events.append((round(time.monotonic() - live0, 1), what))
                self.say(f"soak: {time.monotonic() - live0:.0f}s: {what}")
                started = time.monotonic()
                if what == "restart":
                    self._stop_flow()
                    self._start()
                elif what == "slow":
                    self.node.restart("write queue of 1", QUEUE_OF_ONE)
                    slow_until = time.monotonic() + self.plan.slow_s
                elif what == "fast":
                    self.out.rejected.append(self._write_rejections())
                    self.node.restart("write queue back")
                else:
                    self.node.restart("node restart")
                self._settle(monitor, what, started)
        finally:
            monitor.close()
        producer.stop()
        self.out.records = len(self.recs)

    def _write_rejections(self) -> int:
        """Write requests the node rejected since it started (-1: it did not say)."""
        try:
            stats = self.es.nodes.stats(metric="thread_pool")
            return sum(n["thread_pool"]["write"]["rejected"] for n in stats["nodes"].values())
        except Exception:
            return -1

    def _settle(self, monitor: Monitor, what: str, started: float) -> None:
        """Wait until the group commits again after the event (a stop's own final commit
        is in already), so the next event meets a flow that works: a SIGTERM while
        Elasticsearch is still away ends by SHUTDOWN_TIMEOUT_S with exit 1, by design.
        The wait is the event's stall; the event lasts from `started` to the commit."""
        t0 = time.monotonic()
        before = monitor.committed()
        while before < 0 and time.monotonic() - t0 < SETTLE_LIMIT_S:  # Kafka did not answer
            time.sleep(0.5)
            before = monitor.committed()
        while monitor.committed() <= before:
            self._check_alive()
            if time.monotonic() - t0 > SETTLE_LIMIT_S:
                self.say(f"soak: no commit within {SETTLE_LIMIT_S:.0f}s after {what}")
                self.out.stalls.append((what, -1.0))
                break
            time.sleep(0.5)
        else:
            self.out.stalls.append((what, round(time.monotonic() - t0, 1)))
        self.out.busy.append((round(started - self.t0, 1), round(time.monotonic() - self.t0, 1)))

    def _check_alive(self) -> None:
        """A process that exits by itself is a crash: noted, and the flow started again."""
        assert self.flow is not None
        if self.flow.any_exited():
            self.out.crashes.append(f"run {self.runs}: {self.flow.codes()}\n{self.flow.tail()}")
            self.say(f"soak: the flow exited by itself: {self.flow.codes()}")
            self.flow.kill_all()
            self._start()

    def _finish(self) -> None:
        ends = end_offsets(self.bootstrap, self.topic)
        monitor = Monitor(self.es, self.bootstrap, self.group, self.topic, self.index)
        t0 = time.monotonic()
        try:
            while True:
                got = monitor.committed_by_partition()
                if all(got.get(p, 0) >= end for p, end in ends.items()):
                    break
                if time.monotonic() - t0 > 600:
                    self.say("soak: the group did not commit everything within 600s")
                    break
                self._check_alive()
                time.sleep(1)
        finally:
            monitor.close()
        self.out.drain_s = round(time.monotonic() - t0, 1)
        self.resources.take()
        self._stop_flow()
        truth = truths.build(self.topic, self.recs, deletes=False)
        self.out.audit = audit(
            es=self.es, bootstrap=self.bootstrap, truth=truth, index=self.index,
            dlq_topic=self.dlq, group=self.group, expect=Expect(versioned=True, ends=ends),
        )  # fmt: skip
