"""`scripts/hosts`: the flow as a three-host cluster (network namespaces), one fault each.

    scripts/hosts [--scenarios cut,kill,term,int,gone] [--records 8000] [--rate 200]
                  [--stall 15] [--keep] [--workdir DIR]
    scripts/hosts --cleanup        remove every esk-* namespace and link, leftover flow
                                   processes in them, and the harness's stack

Builds three hosts (`tools.chaos.hosts_net`: namespaces esk-a/b/c, 10.77.0.11-13 on the bridge
esk-br0, 10.77.0.1 on this machine), starts a Kafka broker and an Elasticsearch node for
them with `scripts/stack` (STACK_HOST=10.77.0.1, ports 49092/49093 and 49200/49300,
STACK_DIR=/var/tmp/es-sink-hosts; never the test stack), then per scenario: a fresh topic
(6 partitions), dead-letter topic, index and group; three recovery directories, one per
host, holding partitions 0, 1, 2; the cluster (`tools.chaos.hosts_cluster`) with API_PORT on
each host's own address (API_TOKEN set), CLUSTER_STALL_S=--stall and
KAFKA_STOP_AT_END=false; a producer writing the keyed chaos workload (`tools.chaos.workload`,
~2% bad records) at `--rate` records/s from this machine. Once every process reads and a
few epochs went by, the fault:

  cut   host b's link down; restored once every process exited, or after CUT_S
  kill  SIGKILL to process 2 (host c)
  term  SIGTERM to process 1 (host b)
  int   SIGINT to process 1 (host b)
  gone  host c's link down and its process SIGKILLed for good; the cluster restarts on
        hosts a and b (`-a` of two), host c's recovery partition moved to host a
  blip  host b's link down for BLIP_S only: no process may exit (TCP retransmits carry
        the cluster over), and the same processes finish the run

The harness then acts as the supervisor: it waits until every process exited (at most
HANG_S, then SIGKILLs the rest and counts them `hung`), restarts the whole cluster, waits
until the producer finished and the group's committed offsets reached the end offsets,
stops the cluster with SIGTERM to every process and audits (`tools.chaos.audit`: every document
at its latest version, none lost, wrong or extra, every bad record in the dead-letter
topic, committed == end offsets). One line per scenario; exit 1 if any failed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.chaos import hosts_net as net
from tools.chaos import truth as truths
from tools.chaos.audit import AuditResult, Expect, audit, committed_offsets, end_offsets
from tools.chaos.flow import ROOT, flow_env
from tools.chaos.hosts_cluster import API_PORT, Cluster, make_recovery, move_partitions
from tools.chaos.modes import base_settings
from tools.chaos.produce import PRODUCER_CONF, Sender
from tools.chaos.workload import Rec, generate, index_body
from tools.devkit.kafka import create_topic

SCENARIOS = ("cut", "kill", "term", "int", "gone", "blip")
PARTITIONS = 6
RECOVERY_PARTS = 3
HANG_S = 90.0
"""A fault after which some process still runs this long counts as a hang."""
BLIP_S = 5.0
"""How long the `blip` scenario cuts a link: well below CLUSTER_STALL_S."""
BLIP_WATCH_S = 40.0
"""After a blip, every process must still run this long (no restart needed)."""
CUT_S = 60.0
"""How long a cut link stays down at most (restored earlier once every process exited)."""
RUN_BEFORE_FAULT_S = 10.0
DRAIN_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 40.0
SHUTDOWN_TIMEOUT_S = 10

STACK_ENV = {
    "STACK_HOST": net.MACHINE,
    "KAFKA_PORT": "49092",
    "KAFKA_CONTROLLER_PORT": "49093",
    "ES_PORT": "49200",
    "ES_TRANSPORT_PORT": "49300",
    "STACK_DIR": "/var/tmp/es-sink-hosts",  # noqa: S108 (root-owned, fixed by the brief)
}
BOOTSTRAP = f"{net.MACHINE}:49092"
ES_URL = f"http://{net.MACHINE}:49200"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def stack(cmd: str) -> None:
    """`scripts/stack <cmd>` for the harness's own servers."""
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "stack"), cmd],
        env={**os.environ, **STACK_ENV},
        check=cmd == "up",
    )


class Producer:
    """Writes `recs` at a steady rate from this machine, on its own thread; offsets come
    from the delivery reports (`tools.chaos.produce.Sender`)."""

    def __init__(self, topic: str, recs: list[Rec], rate: float) -> None:
        from confluent_kafka import Producer as KafkaProducer

        conf = {"bootstrap.servers": BOOTSTRAP, **PRODUCER_CONF}
        self.sender = Sender(KafkaProducer(conf), topic)
        self.recs, self.rate = recs, rate
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="hosts-producer", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        try:
            t0, sent, step = time.monotonic(), 0, max(1, int(self.rate / 10))
            while sent < len(self.recs):
                upto = min(sent + step, len(self.recs))
                self.sender.send(self.recs[sent:upto], list(range(sent, upto)))
                self.sender.producer.poll(0)
                sent = upto
                pause = t0 + sent / self.rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            self.sender.flush()
            if self.sender.errors or any(r.offset < 0 for r in self.recs):
                self.error = RuntimeError(f"produce failed: {self.sender.errors[:3]}")
        except BaseException as e:
            self.error = e
        finally:
            self.done.set()


@dataclass
class Outcome:
    scenario: str
    fault_at: float = 0.0
    exits: list[str] = field(default_factory=list)
    all_exited_s: float = -1.0
    hung: int = 0
    restored_s: float = -1.0
    restart_reading_s: float = -1.0
    final_exits: list[str] = field(default_factory=list)
    final_codes: list[int | None] = field(default_factory=list)
    drained: bool = False
    audit: AuditResult | None = None
    notes: list[str] = field(default_factory=list)
    survived: bool | None = None
    """blip: every process outlived the blip (no restart)."""

    @property
    def passed(self) -> bool:
        return (
            self.audit is not None
            and self.audit.ok
            and self.drained
            and self.hung == 0
            and all(c == 0 for c in self.final_codes)
            and self.survived is not False
        )

    def line(self, records: int, seconds: float) -> str:
        a = self.audit or AuditResult()
        blip = f"survived={str(self.survived).lower()} " if self.survived is not None else ""
        return (
            f"scenario={self.scenario} records={records} lost={a.lost} wrong={a.wrong} "
            f"extra={a.extra} dlq_expected={a.dlq_expected} dlq_found={a.dlq_found} "
            f"dlq_good={a.dlq_good} dlq_unknown={a.dlq_unknown} "
            f"commit_mismatch={a.commit_mismatch} all_exited_s={self.all_exited_s:.1f} "
            f"hung={self.hung} restart_reading_s={self.restart_reading_s:.1f} "
            f"drained={str(self.drained).lower()} {blip}"
            f"final_rc={','.join(str(c) for c in self.final_codes)} "
            f"passed={str(self.passed).lower()} seconds={seconds:.0f}"
        )


class Scenario:
    """One scenario end to end on a fresh topic, index and group."""

    def __init__(self, name: str, args: argparse.Namespace, es: Any, workdir: Path) -> None:
        self.name, self.args, self.es = name, args, es
        run = uuid.uuid4().hex[:6]
        self.topic = self.index = self.group = f"hosts-{run}-{name}"
        self.dlq = f"{self.topic}-dlq"
        self.dir = workdir / name
        self.dir.mkdir(parents=True)
        self.out = Outcome(name)
        self.recs = generate(args.records, args.seed, PARTITIONS)
        self.settings = base_settings(
            bootstrap=BOOTSTRAP, es_url=ES_URL, topic=self.topic, group=self.group,
            index=self.index, dlq=self.dlq,
        )  # fmt: skip
        self.settings.update(
            KAFKA_STOP_AT_END="false",
            API_PORT=str(API_PORT),
            API_TOKEN=secrets.token_hex(16),
            CLUSTER_STALL_S=f"{args.stall:g}",
            SHUTDOWN_TIMEOUT_S=str(SHUTDOWN_TIMEOUT_S),
        )
        self.settings.update(dict(item.split("=", 1) for item in args.settings))

    def cluster(self, hosts: list[net.Host], recovery: dict[str, Path], n: int) -> Cluster:
        return Cluster(hosts, recovery, flow_env(self.settings), self.dir, f"run{n}")

    def run(self) -> Outcome:
        create_topic(BOOTSTRAP, self.topic, PARTITIONS)
        create_topic(BOOTSTRAP, self.dlq, 1)
        self.es.indices.create(index=self.index, **index_body(1))
        hosts = list(net.ALL)
        recovery = make_recovery(self.dir / "recovery", hosts, RECOVERY_PARTS)
        producer = Producer(self.topic, self.recs, self.args.rate)
        first = self.cluster(hosts, recovery, 1)
        first.start()
        producer.start()
        try:
            self._wait_reading(first, 120)
            time.sleep(RUN_BEFORE_FAULT_S)
            if self.name == "blip":
                self.out.survived = self._blip(first)
            if self.out.survived:
                second = first
            else:
                survivors = self._fault(first, hosts, recovery)
                second = self.cluster(survivors, recovery, 2)
                t_restart = time.monotonic()
                second.start()
                if self._wait_reading(second, 180):
                    self.out.restart_reading_s = time.monotonic() - t_restart
            self.out.drained = self._drain(second, producer)
            self._stop(second)
        finally:
            for c in (first, locals().get("second")):
                if isinstance(c, Cluster):
                    c.kill_all()
            for h in net.ALL:
                with contextlib.suppress(RuntimeError):
                    net.restore(h)
            producer.done.wait(60)
        if producer.error is not None:
            raise RuntimeError(f"producer: {producer.error}")
        truth = truths.build(self.topic, self.recs, deletes=False)
        ends = end_offsets(BOOTSTRAP, self.topic)
        self.out.audit = audit(
            es=self.es, bootstrap=BOOTSTRAP, truth=truth, index=self.index, dlq_topic=self.dlq,
            group=self.group, expect=Expect(ends=ends),
        )  # fmt: skip
        return self.out

    def _wait_reading(self, cluster: Cluster, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if cluster.reading():
                return True
            if cluster.any_exited():
                return False
            time.sleep(0.2)
        return False

    def _blip(self, cluster: Cluster) -> bool:
        """Cut host b for BLIP_S and restore it; True if every process still runs
        BLIP_WATCH_S later."""
        self.out.fault_at = t0 = time.monotonic()
        net.cut(net.ALL[1])
        time.sleep(BLIP_S)
        net.restore(net.ALL[1])
        self.out.restored_s = time.monotonic() - t0
        say(f"[blip] link of host b down for {self.out.restored_s:.1f}s, restored")
        while time.monotonic() - t0 < BLIP_S + BLIP_WATCH_S:
            if cluster.any_exited():
                for line in cluster.exits(t0):
                    say(f"[blip]   {line}")
                return False
            time.sleep(0.1)
        say(f"[blip] every process still runs {BLIP_WATCH_S:.0f}s after the link came back")
        return True

    def _fault(
        self, cluster: Cluster, hosts: list[net.Host], recovery: dict[str, Path]
    ) -> list[net.Host]:
        """Inject the fault, wait (as a supervisor) until every process exited; returns
        the hosts the cluster restarts on."""
        name, out = self.name, self.out
        if name != "blip":  # a blip's cut is over already: only supervise
            out.fault_at = time.monotonic()
        t0 = out.fault_at
        restore: Callable[[], None] | None = None
        if name == "cut":
            net.cut(net.ALL[1])
            restore = lambda: net.restore(net.ALL[1])  # noqa: E731
        elif name == "kill":
            cluster.signal(2, signal.SIGKILL)
        elif name == "term":
            cluster.signal(1, signal.SIGTERM)
        elif name == "int":
            cluster.signal(1, signal.SIGINT)
        elif name == "gone":
            net.cut(net.ALL[2])
            cluster.signal(2, signal.SIGKILL)
        say(f"[{name}] fault injected at {t0 - cluster.started:.1f}s after start")
        while time.monotonic() - t0 < HANG_S:
            if cluster.all_exited():
                break
            if restore is not None and time.monotonic() - t0 >= CUT_S:
                restore()
                restore = None
                out.restored_s = time.monotonic() - t0
                say(f"[{name}] link restored at {out.restored_s:.1f}s (processes still up)")
            time.sleep(0.05)
        if cluster.all_exited():
            out.all_exited_s = max(p.exited_at or 0 for p in cluster.procs) - t0
        else:
            left = cluster.kill_all()
            out.hung = len(left)
            out.notes.append(f"still running {HANG_S:.0f}s after the fault: {left}; SIGKILLed")
        if restore is not None:
            restore()
            out.restored_s = time.monotonic() - t0
        out.exits = cluster.exits(t0)
        for line in out.exits:
            say(f"[{name}]   {line}")
        if name != "gone":
            return hosts
        moved = move_partitions(recovery["c"], recovery["a"])
        out.notes.append(f"host c gone: moved {moved} to host a")
        return hosts[:2]

    def _drain(self, cluster: Cluster, producer: Producer) -> bool:
        """Until everything produced is committed (True), or a process exits or time's up."""
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while time.monotonic() < deadline:
            if cluster.any_exited():
                self.out.notes.append("a restarted process exited by itself")
                return False
            if producer.done.is_set():
                ends = end_offsets(BOOTSTRAP, self.topic)
                got = committed_offsets(BOOTSTRAP, self.group, self.topic)
                if all(got.get(p, -1) >= e for p, e in ends.items()):
                    return True
            time.sleep(1.0)
        return False

    def _stop(self, cluster: Cluster) -> None:
        t0 = time.monotonic()
        for p in cluster.procs:
            cluster.signal(p.index, signal.SIGTERM)
        cluster.wait_all(STOP_TIMEOUT_S)
        cluster.kill_all()
        self.out.final_exits = cluster.exits(t0)
        self.out.final_codes = [p.code for p in cluster.procs]

    def cleanup(self) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
        for fut in admin.delete_topics([self.topic, self.dlq]).values():
            with contextlib.suppress(Exception):
                fut.result(30)
        with contextlib.suppress(Exception):
            admin.delete_consumer_groups([self.group])[self.group].result(30)
        self.es.options(ignore_status=404).indices.delete(index=self.index)


def kill_leftovers() -> list[int]:
    """SIGKILL every process still inside an esk-* namespace (by pid, from `ip netns
    pids`): only the harness starts processes there."""
    spaces, _ = net.leftovers()
    pids: list[int] = []
    for ns in spaces:
        res = subprocess.run([net.IP, "netns", "pids", ns], capture_output=True, text=True)
        pids += [int(p) for p in res.stdout.split() if p.isdigit()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def cleanup_all() -> None:
    """Flow processes, then the stack (while its address still exists: Kafka's clean
    stop needs it), then namespaces and links."""
    killed = kill_leftovers()
    stack("down")
    removed = net.teardown()
    say(f"hosts: cleanup: killed {killed or 'no processes'}, removed {removed or 'nothing'}")


def _scenarios(text: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items or any(s not in SCENARIOS for s in items):
        msg = f"expected a comma-separated subset of {','.join(SCENARIOS)}, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return items


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/hosts", description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", type=_scenarios, default=list(SCENARIOS))
    p.add_argument("--records", type=int, default=8000, help="records per scenario")
    p.add_argument("--rate", type=float, default=200.0, help="records/s the producer writes")
    p.add_argument("--stall", type=float, default=15.0, help="CLUSTER_STALL_S for the flow")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--keep", action="store_true", help="keep hosts, stack, topics, logs")
    p.add_argument("--cleanup", action="store_true", help="remove what a run left; no run")
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**31)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if os.geteuid() != 0:
        say("hosts: needs root (network namespaces)")
        return 2
    if args.cleanup:
        cleanup_all()
        return 0
    from elasticsearch import Elasticsearch

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="hosts-", dir="/var/tmp"))
    workdir.mkdir(parents=True, exist_ok=True)
    say(f"hosts: seed={args.seed} logs in {workdir}")
    passed, es = True, None
    try:
        kill_leftovers()
        net.setup()
        stack("up")
        for h in net.ALL:
            for port in (49092, 49200):
                if not net.reachable(h, net.MACHINE, port):
                    msg = f"host {h.name} cannot reach {net.MACHINE}:{port}"
                    raise RuntimeError(msg)
        es = Elasticsearch(ES_URL, request_timeout=60)
        for name in args.scenarios:
            t0 = time.monotonic()
            sc = Scenario(name, args, es, workdir)
            try:
                out = sc.run()
            finally:
                if not args.keep:
                    sc.cleanup()
            for line in out.notes + (out.audit.details if out.audit else []):
                say(f"[{name}] {line}")
            for line in out.final_exits:
                say(f"[{name}] final stop: {line}")
            print(out.line(len(sc.recs), time.monotonic() - t0), flush=True)
            passed = passed and out.passed
    except Exception as e:
        traceback.print_exc()
        say(f"hosts: harness error: {type(e).__name__}: {e}; logs kept in {workdir}")
        return 2
    finally:
        if es is not None:
            es.close()
        if not args.keep:
            cleanup_all()
    if passed and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        say(f"hosts: logs kept in {workdir}")
    return 0 if passed else 1
