"""`scripts/chaos`: produce a keyed workload, SIGKILL the flow until it finishes, audit.

    scripts/chaos [--records 200000] [--kills 20] [--modes recovery,offsets]
                  [--layouts 2w,2p] [--seed N] [--bootstrap 127.0.0.1:9092]
                  [--es http://127.0.0.1:9200] [--keep] [--timeout 5400]

Per mode (fresh topic, dead-letter topic, index and group; the index is created first with
a strict mapping so mapping conflicts are real):

1. produce `--records` keyed records over 8 partitions (~2% bad of ~20 kinds, see
   `chaos.workload`) and derive the expected final state from the delivery reports;
2. run `python -m bytewax.run flows.es_sink` with KAFKA_STOP_AT_END=true, DOC_ID=key,
   VERSION=offset, ERRORS_TOLERANCE=all, a DLQ_TOPIC and a transform that fails on a
   trigger field; `recovery`: `python -m bytewax.recovery DIR 2` once, then
   `-r DIR -s 1 -b 0`; `offsets`: `-s 1`, resuming from the committed group offsets. The
   layouts alternate between attempts, and each attempt but the last is SIGKILLed (see
   `chaos.runner` for how kills are timed), until an attempt exits 0;
3. audit (`chaos.audit`) and print one line:
   `mode=recovery kills=23 records=200000 lost=0 wrong=0 extra=0 dlq_expected=4000
   dlq_found=4000 dlq_duplicates=12 ...`.

Exit status: 0 when every mode completed with nothing lost, wrong or extra, every bad
record (and no good one) in the dead-letter topic, committed offsets at the end offsets, no
committed or resume offset ahead of durable writes at any kill (`chaos.invariants`) and no
crash of the flow on its own; 1 otherwise; 2 when the harness itself could not run.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from chaos.audit import AuditResult, audit
from chaos.invariants import Invariants
from chaos.runner import (
    ROOT,
    Chaos,
    HarnessTimeout,
    ModeStats,
    Monitor,
    TooManyCrashes,
    flow_env,
)
from chaos.workload import INDEX_BODY, PARTITIONS, Rec, expected_state, generate, produce

MODES = ("recovery", "offsets")
LAYOUTS = ("2w", "2p")
EPOCH_S = 1
RECOVERY_PARTITIONS = 2
SECONDS_PER_KILL = 3.0


def _csv(choices: tuple[str, ...]) -> Any:
    def parse(text: str) -> list[str]:
        items = [s.strip() for s in text.split(",") if s.strip()]
        bad = [s for s in items if s not in choices]
        if bad or not items:
            msg = f"expected a comma-separated subset of {','.join(choices)}, got {text!r}"
            raise argparse.ArgumentTypeError(msg)
        return items

    return parse


def _rate(text: str) -> float | None:
    if text == "auto":
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        msg = f"expected `auto` or records per second >= 0, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/chaos",
        description="Kill the Kafka -> Elasticsearch flow at random moments, then audit it.",
    )
    p.add_argument("--records", type=int, default=200_000, help="records per mode")
    p.add_argument("--kills", type=int, default=20, help="SIGKILLs per mode (at least)")
    p.add_argument("--modes", type=_csv(MODES), default=list(MODES))
    p.add_argument("--layouts", type=_csv(LAYOUTS), default=list(LAYOUTS))
    p.add_argument("--seed", type=int, default=None, help="workload and kill timing seed")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    p.add_argument("--es", default="http://127.0.0.1:9200", help="Elasticsearch URL")
    p.add_argument("--keep", action="store_true", help="keep topics, index, group, logs")
    p.add_argument("--timeout", type=float, default=5400.0, help="total seconds, all modes")
    p.add_argument(
        "--rate",
        type=_rate,
        default=None,
        help="cap the flow at this many records/s; default `auto`: about 3 s of work per "
        "kill, so kills land several epochs apart; 0: the flow's own speed",
    )
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a flow setting (environment variable), e.g. BULK_MAX_ACTIONS=5000",
    )
    p.add_argument("--workdir", type=Path, default=None, help="logs and recovery directories")
    args = p.parse_args(argv)
    if args.records < 100:
        p.error("--records must be at least 100")
    if args.kills < 0:
        p.error("--kills must be >= 0")
    for item in args.settings:
        name, sep, _ = item.partition("=")
        if not sep or not name:
            p.error(f"--set expects NAME=VALUE, got {item!r}")
    if args.rate is None:
        args.rate = max(args.records / ((args.kills + 1) * SECONDS_PER_KILL), 200.0)
    return args


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create `topic` and wait until every partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return
        time.sleep(0.2)
    msg = f"topic {topic} has no leaders after 30s"
    raise TimeoutError(msg)


def cleanup(bootstrap: str, es: Any, topics: list[str], index: str, group: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics(topics).values():
        try:
            fut.result(30)
        except Exception as e:
            say(f"cleanup: {e}")
    try:
        admin.delete_consumer_groups([group])[group].result(30)
    except Exception as e:
        if "GROUP_ID_NOT_FOUND" not in str(e):
            say(f"cleanup: group {group}: {e}")
    es.options(ignore_status=404).indices.delete(index=index)


def summary(
    mode: str,
    records: int,
    stats: ModeStats,
    result: AuditResult,
    seed: int,
    rate: float,
    seconds: float,
) -> str:
    plans = ",".join(f"{k}:{v}" for k, v in stats.plans.items())
    layouts = ",".join(f"{k}:{v}" for k, v in stats.layouts.items())
    return (
        f"mode={mode} kills={stats.kills} records={records} lost={result.lost} "
        f"wrong={result.wrong} extra={result.extra} dlq_expected={result.dlq_expected} "
        f"dlq_found={result.dlq_found} dlq_duplicates={result.dlq_duplicates} "
        f"dlq_good={result.dlq_good} dlq_unknown={result.dlq_unknown} "
        f"dlq_mismatch={result.dlq_mismatch} commit_mismatch={result.commit_mismatch} "
        f"commit_ahead={stats.commit_ahead} resume_ahead={stats.resume_ahead} "
        f"offset_checks={stats.offset_checks} "
        f"crashes={stats.crashes} completed={str(stats.completed).lower()} "
        f"runs={stats.runs} layouts={layouts} plans={plans} "
        f"kills_in_bulk={stats.kills_in_bulk} survivors_hung={stats.survivors_hung} "
        f"rate={rate:.0f} seed={seed} seconds={seconds:.0f}"
    )


def run_mode(
    args: argparse.Namespace,
    mode: str,
    run: str,
    recs: list[Rec],
    es: Any,
    workdir: Path,
    seed: int,
    deadline: float,
) -> bool:
    """One mode end to end; prints its summary line and returns whether it passed."""
    t0 = time.monotonic()
    topic = index = group = f"chaos-{run}-{mode}"
    dlq = f"{topic}-dlq"
    logdir = workdir / mode
    logdir.mkdir(parents=True, exist_ok=True)
    try:
        create_topic(args.bootstrap, topic, PARTITIONS)
        create_topic(args.bootstrap, dlq, 1)
        es.indices.create(index=index, **INDEX_BODY)
        produce(args.bootstrap, topic, recs)
        exp = expected_state(topic, recs)
        say(
            f"[{mode}] produced {len(recs)} records to {topic}: {len(exp.docs)} documents "
            f"expected, {len(exp.bad)} bad records ({time.monotonic() - t0:.0f}s)"
        )
        run_args = ["-s", str(EPOCH_S)]
        if mode == "recovery":
            recovery = logdir / "recovery"
            recovery.mkdir()
            subprocess.run(
                [sys.executable, "-m", "bytewax.recovery", str(recovery), str(RECOVERY_PARTITIONS)],
                check=True,
                cwd=ROOT,
            )
            run_args = ["-r", str(recovery), "-s", str(EPOCH_S), "-b", "0"]
        env = flow_env(
            {
                "KAFKA_BOOTSTRAP_SERVERS": args.bootstrap,
                "KAFKA_TOPICS": topic,
                "KAFKA_GROUP_ID": group,
                "KAFKA_STOP_AT_END": "true",
                "ES_HOSTS": args.es,
                "ES_INDEX": index,
                "DOC_ID": "key",
                "VERSION": "offset",
                "ERRORS_TOLERANCE": "all",
                "DLQ_TOPIC": dlq,
                "TRANSFORMS": "chaos.transforms:explode",
                # Smaller than the defaults (1000, 5000): more epochs and more bulk
                # requests per second, so more distinct moments for a kill to land on.
                "KAFKA_CONSUME_BATCH_SIZE": "200",
                "BULK_MAX_ACTIONS": "500",
                **dict(item.split("=", 1) for item in args.settings),
            }
        )
        monitor = Monitor(es, args.bootstrap, group, topic, index)
        invariants = Invariants(
            es=es,
            bootstrap=args.bootstrap,
            topic=topic,
            index=index,
            dlq_topic=dlq,
            group=group,
            recs=recs,
        )
        chaos = Chaos(
            mode=mode,
            layouts=args.layouts,
            kills=args.kills,
            records=len(recs),
            run_args=run_args,
            env=env,
            logdir=logdir,
            monitor=monitor,
            invariants=invariants,
            epoch_s=EPOCH_S,
            rng=random.Random(f"{seed}-{mode}"),
            deadline=deadline,
            say=say,
            rate=args.rate,
        )
        try:
            chaos.run()
        except (HarnessTimeout, TooManyCrashes) as e:
            say(f"[{mode}] stopped: {e}")
        finally:
            monitor.close()
            invariants.close()
        result = audit(
            es=es,
            bootstrap=args.bootstrap,
            topic=topic,
            index=index,
            dlq_topic=dlq,
            group=group,
            recs=recs,
            exp=exp,
        )
        stats = chaos.stats
        line = summary(mode, len(recs), stats, result, seed, args.rate, time.monotonic() - t0)
        print(line, flush=True)
        for line in result.details + invariants.found.examples:
            say(f"[{mode}] {line}")
        if stats.kills < args.kills:
            say(f"[{mode}] note: the backfill finished after {stats.kills} of {args.kills} kills")
        return (
            result.ok
            and stats.completed
            and stats.crashes == 0
            and stats.commit_ahead == stats.resume_ahead == 0
        )
    finally:
        if not args.keep:
            cleanup(args.bootstrap, es, [topic, dlq], index, group)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from elasticsearch import Elasticsearch

    seed = args.seed if args.seed is not None else random.randrange(2**31)
    run = uuid.uuid4().hex[:8]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"chaos-{run}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.timeout
    say(f"chaos run {run}: seed={seed} logs in {workdir}")
    es = Elasticsearch(args.es, request_timeout=120)
    passed = True
    try:
        recs = generate(args.records, seed)
        for mode in args.modes:
            passed = run_mode(args, mode, run, recs, es, workdir, seed, deadline) and passed
    except Exception as e:  # the harness itself failed: say so, never report a pass
        traceback.print_exc()
        say(f"chaos: harness error: {type(e).__name__}: {e}; logs kept in {workdir}")
        return 2
    finally:
        es.close()
    if passed and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        say(f"chaos: logs kept in {workdir}")
    return 0 if passed else 1
