"""`python -m tools.chaos.compare`: the same faults through this flow, Bento and Quix Streams.

    .venv/bin/python -m tools.chaos.compare [--systems ours,bento,quix] [--records 100000]
        [--kills 4] [--outages 2] [--seed N] [--bootstrap 127.0.0.1:9092]
        [--es http://127.0.0.1:9200] [--json FILE] [--tools-venv DIR] [--keep]

One keyed workload (`tools.chaos.workload.generate`: records/4 keys, skewed so hot keys are
written many times; no bad records, tombstones, null keys or transactions, which only
this flow handles) is produced once to a fresh topic of 8 partitions. Each system then
drains it, in turn, into a fresh index (the strict mapping of `tools.chaos.workload`) with a
fresh consumer group, its Elasticsearch traffic through `tools.chaos.proxy`, as one process:

- ours: `python -m bytewax.run flows.es_sink`, every setting at its default but DOC_ID=key
  (one worker, group offsets, VERSION=none, KAFKA_STOP_AT_END=false like the others);
- bento: Bento v1.20.0 with the bench's config (`tools.bench.bento`: id = record key);
- quix: Quix Streams' ElasticsearchSink with its defaults (`tools/bench/quix_app.py`: id =
  record key), in the bench tools virtualenv.

The faults are the same for each, in the same order, every draw made once from the seed
(`fault_plan`): a fault fires
when the index has taken its share of the workload (fault i of F once the node counted
(i + 1) / (F + 1) x records indexing operations), 0-300 ms later:

- kill: SIGKILL (kill -9), then a restart;
- outage: the proxy cuts Elasticsearch off (refuse or blackhole, `tools.chaos.proxy`) for 2-5 s
  while the system runs, then SIGTERM while still cut off; the process is SIGKILLed if it
  has not exited STOP_WAIT_S later; the proxy is restored and the system restarted.

A process that exits by itself is restarted (counted as a crash), as a supervisor would.
After the last fault the system runs until its group's committed offsets reach the end
offsets and the index stays still for SETTLE_S, then it is stopped by SIGTERM. The index
is audited against the ground truth (`tools.chaos.truth`, `tools.chaos.audit`), each document by id
and `_source`:

- lost: a key of the workload with no document;
- stale: a document that is not its key's newest write (an older one, or altered);
- duplicate: a document that should not exist (no key of the workload has its id);
- rewrites: index operations beyond one per write, from `_version` (the node's count of
  writes of a document, under internal versioning): records written again after a
  replay. Not a fault, the cost of at-least-once.

Exit status 0 when every system ran to the end (whatever it lost: this measures, it does
not judge), 2 when the harness could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tools.chaos.flow import ROOT, flow_env, spawn

__all__ = [
    "OUTCOME_KEYS",
    "SYSTEMS",
    "Fault",
    "Outcome",
    "describe",
    "fault_plan",
    "format_table",
    "main",
    "ours_settings",
    "rewrites",
    "thresholds",
]

SYSTEMS = ("ours", "bento", "quix")
OUTAGE_S = (2.0, 5.0)
"""How long Elasticsearch is cut off before the SIGTERM (uniform)."""
STOP_WAIT_S = 35.0
"""How long a process may take to exit after a SIGTERM before it is SIGKILLed: the flow's
default SHUTDOWN_TIMEOUT_S (30 s, how long a stop waits for bulks in flight) plus 5 s."""
SETTLE_S = 3.0
"""The index must stay still this long, offsets committed to the end, before the stop."""
OUTCOME_KEYS = ("lost", "stale", "duplicate", "rewrites")


@dataclass
class Outcome:
    """One system's run: what the audit found and what happened on the way."""

    system: str
    records: int = 0
    documents: int = 0
    """Keys of the workload: the documents the index must hold."""
    lost: int = 0
    stale: int = 0
    duplicate: int = 0
    rewrites: int = 0
    kills: int = 0
    outages: int = 0
    hung: int = 0
    """Processes still running STOP_WAIT_S after a SIGTERM in an outage (SIGKILLed)."""
    crashes: int = 0
    """Exits nobody asked for (restarted)."""
    completed: bool = False
    seconds: float = 0.0
    details: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass(frozen=True)
class Fault:
    """One fault, the same for every system: what, and its draws."""

    kind: str
    """"kill" or "outage"."""
    delay_s: float
    """After the index took its share of operations."""
    cut: str = ""
    """The outage's `tools.chaos.proxy` cut mode."""
    outage_s: float = 0.0
    """How long Elasticsearch is cut off before the SIGTERM."""


def fault_plan(kills: int, outages: int, rng: random.Random) -> list[Fault]:
    """The faults in the order they fire: `kills` kills and `outages` outages, shuffled,
    with every random draw made here so that each system gets the very same faults."""
    from tools.chaos.proxy import CUT_MODES

    kinds = ["kill"] * kills + ["outage"] * outages
    rng.shuffle(kinds)
    plan = []
    for kind in kinds:
        delay = rng.uniform(0, 0.3)
        if kind == "kill":
            plan.append(Fault(kind, delay))
        else:
            plan.append(Fault(kind, delay, rng.choice(CUT_MODES), rng.uniform(*OUTAGE_S)))
    return plan


def describe(plan: list[Fault]) -> str:
    """The faults in order, e.g. `kill,outage(refuse 3.1s),kill`."""
    return ",".join(
        f.kind if f.kind == "kill" else f"{f.kind}({f.cut} {f.outage_s:.1f}s)" for f in plan
    )


def thresholds(records: int, faults: int) -> list[int]:
    """Indexing operations at which each fault fires: evenly through the workload."""
    return [records * (i + 1) // (faults + 1) for i in range(faults)]


def ours_settings(
    *, bootstrap: str, es_url: str, topic: str, group: str, index: str
) -> dict[str, str]:
    """The flow's settings: its defaults, except the document id from the record key and a
    service's run (no stop at the end of the backlog), like the other two systems."""
    return {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": group,
        "KAFKA_AUTO_OFFSET_RESET": "earliest",
        "KAFKA_STOP_AT_END": "false",
        "ES_HOSTS": es_url,
        "ES_INDEX": index,
        "DOC_ID": "key",
    }


def rewrites(hits: dict[str, dict[str, Any]], writes: Callable[[str], int | None]) -> int:
    """Index operations beyond one per write: each document's `_version` over the number
    of writes its key has in the workload (`writes(id)`: None when it has none)."""
    extra = 0
    for doc_id, hit in hits.items():
        n = writes(doc_id)
        version = hit.get("_version")
        if n is not None and isinstance(version, int):
            extra += max(0, version - n)
    return extra


def format_table(outcomes: list[Outcome]) -> str:
    """The printed comparison: one row per system."""
    head = (
        f"{'system':<7} {'records':>8} {'docs':>7} {'lost':>6} {'stale':>6} {'dup':>5} "
        f"{'rewrites':>8} {'kills':>5} {'outages':>7} {'hung':>4} {'crashes':>7} "
        f"{'done':>5} {'seconds':>7}"
    )
    lines = [head, "-" * len(head)]
    for o in outcomes:
        if o.error:
            lines.append(f"{o.system:<7} FAILED: {o.error.splitlines()[0][:90]}")
            continue
        lines.append(
            f"{o.system:<7} {o.records:>8,} {o.documents:>7,} {o.lost:>6,} {o.stale:>6,} "
            f"{o.duplicate:>5,} {o.rewrites:>8,} {o.kills:>5} {o.outages:>7} {o.hung:>4} "
            f"{o.crashes:>7} {str(o.completed).lower():>5} {o.seconds:>7.0f}"
        )
    return "\n".join(lines)


def say(text: str) -> None:
    print(f"compare {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


class Child:
    """One process of the system under test, in its own session (a kill takes it whole)."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.proc = spawn(cmd, env, log)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self, wait_s: float) -> bool:
        """SIGTERM, wait up to `wait_s`, SIGKILL if still running: whether it exited."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(wait_s)
            return True
        except subprocess.TimeoutExpired:
            self.kill()
            return False


class System:
    """How to start one system against a topic, an index (through the proxy) and a group."""

    def __init__(self, name: str, args: argparse.Namespace, work: Path) -> None:
        self.name, self.args, self.work = name, args, work
        self.bento: Path | None = None
        self.quix_python: Path | None = None
        if name == "bento":
            from tools.bench import bento

            self.bento = bento.binary()
        elif name == "quix":
            from tools.bench.systems import tools_python

            self.quix_python = tools_python(args)

    def start(self, *, topic: str, group: str, es_url: str, index: str, n: int) -> Child:
        log = self.work / f"{self.name}.log"
        bootstrap = self.args.bootstrap
        env = flow_env({})
        if self.name == "ours":
            settings = ours_settings(
                bootstrap=bootstrap, es_url=es_url, topic=topic, group=group, index=index
            )
            cmd = [sys.executable, "-m", "bytewax.run", "flows.es_sink"]
            return Child(cmd, flow_env(settings), log)
        if self.name == "bento":
            from tools.bench import bento

            assert self.bento is not None
            cfg = bento.config(
                bootstrap=bootstrap, topic=topic, group=group, es_url=es_url, index=index
            )
            path = bento.write_config(self.work / f"bento-{n}.yaml", cfg)
            return Child([str(self.bento), "-c", str(path)], env, log)
        assert self.quix_python is not None
        cmd = [str(self.quix_python), str(ROOT / "tools" / "bench" / "quix_app.py")]
        cmd += ["--bootstrap", bootstrap, "--es", es_url, "--topic", topic, "--group", group]
        cmd += ["--index", index, "--state-dir", str(self.work / f"quix-state-{n}")]
        return Child(cmd, env, log)


def index_total(es: Any, index: str) -> int:
    """Indexing operations the node counted for `index` (primaries), replays included."""
    stats = es.indices.stats(index=index, metric="indexing")
    return int(stats["indices"][index]["primaries"]["indexing"]["index_total"])


def run_system(
    system: System,
    *,
    es: Any,
    topic: str,
    recs: int,
    truth: Any,
    plan: list[Fault],
    deadline_s: float,
) -> Outcome:
    from tools.chaos import audit as audits
    from tools.chaos.proxy import Proxy
    from tools.chaos.workload import index_body

    args = system.args
    out = Outcome(system.name, records=recs, documents=len(truth.ops))
    tag = f"{topic}-{system.name}"
    index, group = tag, f"{tag}-group"
    es.indices.create(index=index, **index_body(1))
    proxy = Proxy(args.es)
    marks = thresholds(recs, len(plan))
    started = time.monotonic()
    deadline = started + deadline_s
    runs = 0

    def start() -> Child:
        nonlocal runs
        runs += 1
        return system.start(topic=topic, group=group, es_url=proxy.url, index=index, n=runs)

    def caught_up() -> bool:
        ends = audits.end_offsets(args.bootstrap, topic)
        done = audits.committed_offsets(args.bootstrap, group, topic)
        return all(done.get(p, -1) >= end for p, end in ends.items())

    child = start()
    try:
        for fault, mark in zip(plan, marks, strict=True):
            while index_total(es, index) < mark:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{index_total(es, index)} of {mark} operations by now")
                if not child.alive():
                    out.crashes += 1
                    out.details.append(f"exited by itself ({child.proc.returncode}); restarted")
                    time.sleep(1)
                    child = start()
                time.sleep(0.05)
            time.sleep(fault.delay_s)
            if fault.kind == "kill":
                child.kill()
                out.kills += 1
                say(f"{system.name}: kill -9 at {mark:,} operations")
            else:
                cut = fault.cut
                proxy.cut(cut)
                try:
                    time.sleep(fault.outage_s)
                    exited = child.stop(STOP_WAIT_S)
                finally:
                    proxy.restore()
                out.outages += 1
                out.hung += not exited
                say(
                    f"{system.name}: {cut} outage at {mark:,} operations, SIGTERM: "
                    f"{'exit ' + str(child.proc.returncode) if exited else 'hung, SIGKILLed'}"
                )
            child = start()
        still: tuple[int, float] = (-1, time.monotonic())
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError("not caught up with the topic in time")
            if not child.alive():
                out.crashes += 1
                out.details.append(f"exited by itself ({child.proc.returncode}); restarted")
                time.sleep(1)
                child = start()
            total = index_total(es, index)
            if total != still[0]:
                still = (total, time.monotonic())
            elif time.monotonic() - still[1] >= SETTLE_S and caught_up():
                break
            time.sleep(0.2)
        child.stop(STOP_WAIT_S)
        out.completed = True
    finally:
        child.kill()
        proxy.close()
    out.seconds = time.monotonic() - started
    es.indices.refresh(index=index)
    ends = audits.end_offsets(args.bootstrap, topic)
    result = audits.audit_documents(
        es=es, truth=truth, index=index, expect=audits.Expect(versioned=False, ends=ends)
    )
    out.lost, out.stale, out.duplicate = result.lost, result.wrong, result.extra
    out.details += result.details[:10]
    hits = audits.scan_index(es, index, source=False)
    out.rewrites = rewrites(hits, lambda d: len(truth.ops[d]) if d in truth.ops else None)
    if not args.keep:
        drop(args.bootstrap, es, index=index, group=group)
    return out


def drop(bootstrap: str, es: Any, *, topic: str = "", index: str = "", group: str = "") -> None:
    """Delete what a run made (best effort: a leftover is only clutter)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    with contextlib.suppress(Exception):
        if topic:
            admin.delete_topics([topic])[topic].result(30)
    with contextlib.suppress(Exception):
        if group:
            admin.delete_consumer_groups([group])[group].result(30)
    if index:
        es.options(ignore_status=404).indices.delete(index=index)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tools.chaos.compare",
        description="The same kill -9 and Elasticsearch outages through this flow, Bento and "
        "Quix Streams; lost, stale and duplicate documents of each.",
    )
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset")
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--kills", type=int, default=4)
    p.add_argument("--outages", type=int, default=2)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--es", default="http://127.0.0.1:9200")
    p.add_argument("--json", type=Path, help="write the outcomes here")
    p.add_argument(
        "--tools-venv",
        default=os.path.join(os.environ.get("STACK_CACHE_DIR", "~/.cache/es-sink"), "bench-venv"),
        help="the bench tools virtualenv with Quix Streams (scripts/bench makes it)",
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per system")
    p.add_argument("--keep", action="store_true", help="keep the topic, indices and logs")
    args = p.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    bad = [s for s in args.systems if s not in SYSTEMS]
    if bad or not args.systems:
        p.error(f"unknown systems {bad}; choose from {', '.join(SYSTEMS)}")
    if args.records < 100 or args.kills < 0 or args.outages < 0:
        p.error("--records must be >= 100, --kills and --outages >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from sinks.elasticsearch.client import connect
    from tools.chaos import truth as truths
    from tools.chaos.produce import produce
    from tools.chaos.workload import generate
    from tools.devkit import kafka

    seed = args.seed if args.seed is not None else random.randrange(2**31)
    run = uuid.uuid4().hex[:8]
    work = Path(tempfile.mkdtemp(prefix=f"chaos-compare-{run}-"))
    topic = f"compare-{run}"
    plan = fault_plan(args.kills, args.outages, random.Random(seed))
    say(f"run {run}: seed={seed}, faults {describe(plan)}; logs in {work}")
    es = connect(args.es, request_timeout=120)
    outcomes: list[Outcome] = []
    try:
        systems = [System(name, args, work) for name in args.systems]
        kafka.create_topic(args.bootstrap, topic, partitions=8)
        recs = generate(args.records, seed, bad_share=0, tombstone_share=0, null_key_share=0)
        produce(args.bootstrap, topic, recs)
        truth = truths.build(topic, recs, deletes=False)
        say(f"produced {len(recs):,} records over {len(truth.ops):,} keys to {topic}")
        for system in systems:
            say(f"{system.name} ...")
            try:
                outcome = run_system(
                    system, es=es, topic=topic, recs=len(recs), truth=truth, plan=plan,
                    deadline_s=args.timeout,
                )  # fmt: skip
            except Exception as e:  # one system failing must not hide the others
                outcome = Outcome(system.name, records=len(recs), error=f"{type(e).__name__}: {e}")
            say(f"{system.name}: {asdict(outcome)}")
            outcomes.append(outcome)
    except Exception as e:
        say(f"harness error: {type(e).__name__}: {e}; logs kept in {work}")
        return 2
    finally:
        if not args.keep:
            drop(args.bootstrap, es, topic=topic)
        es.close()
    print(f"{args.records:,} records, faults {describe(plan)}, seed {seed}")
    print(format_table(outcomes))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        rows = [{k: v for k, v in asdict(o).items() if k != "details"} for o in outcomes]
        faults = [asdict(f) for f in plan]
        args.json.write_text(json.dumps({"seed": seed, "faults": faults, "rows": rows}, indent=2))
    say(f"logs in {work}")
    return 2 if any(o.error for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
