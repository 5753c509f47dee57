"""`scripts/chaos`: produce a keyed workload, interrupt the flow until it finishes, audit.

    scripts/chaos [--records 200000] [--kills 20]
                  [--modes recovery,offsets,grow,late,update,script,reset,strict]
                  [--layouts 1w,3w,2p,1w,9w] [--outages 2] [--txn-share 0.3]
                  [--shutdown-timeout 5] [--seed N] [--bootstrap 127.0.0.1:9092]
                  [--es http://127.0.0.1:9200] [--keep] [--timeout 5400]

Per mode (`tools.chaos.modes`: fresh topic, dead-letter topic, index and group; the index is
created first with a strict mapping so mapping conflicts are real):

1. produce `--records` keyed records (~2% bad of ~20 kinds, `tools.chaos.workload`), part of
   them in transactions, committed and aborted (`tools.chaos.produce`), and derive the ground
   truth from the delivery reports (`tools.chaos.truth`);
2. run `python -m bytewax.run flows.es_sink` with KAFKA_STOP_AT_END=true, DOC_ID=key, a
   DLQ_TOPIC, a transform that fails on a trigger field and ES_HOSTS through a proxy the
   harness can cut (`tools.chaos.proxy`), in the mode's layouts, interrupting each attempt but
   the last (`tools.chaos.runner`: SIGKILLs at random moments, SIGTERMs during Elasticsearch
   outages) until an attempt exits 0 with nothing left;
3. audit (`tools.chaos.audit`) and print one line:
   `mode=recovery kills=23 records=200000 lost=0 wrong=0 extra=0 ... seconds=312`.

Exit status: 0 when every mode completed with nothing lost, wrong, extra, undeleted or
from an aborted transaction, every bad record (and no good one) in the dead-letter topic,
committed offsets at the end offsets, no committed or resume offset ahead of durable
writes at any kill (`tools.chaos.invariants`), every SIGTERM in an outage answered in time and
non-zero, new partitions read by the running flow and a moved key with an older write
unread when they were added (`grow`), every stop on the earliest
bad record (`strict`), and no crash of the flow on its own; 1 otherwise; 2 when the
harness itself could not run.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from tools.chaos.flow import LAYOUT
from tools.chaos.modes import MODES
from tools.chaos.session import ModeResult, NeedsOpenSearch, node_url, run_mode

SECONDS_PER_KILL = 3.0


def _modes(text: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in items if s not in MODES]
    if bad or not items:
        msg = f"expected a comma-separated subset of {','.join(MODES)}, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return items


def _layouts(text: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in items if not LAYOUT.match(s)]
    if bad or not items:
        msg = f"expected comma-separated layouts like 1w,3w,2p (N in 1..9), got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return items


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
        description="Interrupt the Kafka -> Elasticsearch flow at random moments, then audit.",
    )
    p.add_argument("--records", type=int, default=200_000, help="records per mode")
    p.add_argument("--kills", type=int, default=20, help="interruptions per mode (at least)")
    p.add_argument(
        "--modes",
        type=_modes,
        default=None,
        help=f"{','.join(MODES)} (default: all; without --opensearch all but those that "
        "need Painless)",
    )
    p.add_argument(
        "--layouts",
        type=_layouts,
        default=None,
        help="layouts the attempts cycle through, for every mode (<N>w: one process, N "
        "workers; <N>p: N processes); default per mode, e.g. recovery 1w,3w,2p,1w,9w",
    )
    p.add_argument(
        "--outages",
        type=int,
        default=2,
        help="interruptions per mode that are a SIGTERM while Elasticsearch is cut off "
        "(alternately one SIGTERM and two); not in strict mode",
    )
    p.add_argument(
        "--txn-share",
        type=float,
        default=0.3,
        help="share of the workload's segments written in committed transactions, with "
        "aborted ones between (0: no transactional producer)",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=5.0,
        help="SHUTDOWN_TIMEOUT_S for the flow; an outage's SIGTERM must end within it + 3 s",
    )
    p.add_argument("--seed", type=int, default=None, help="workload and kill timing seed")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    p.add_argument("--es", default="http://127.0.0.1:9200", help="Elasticsearch URL")
    p.add_argument(
        "--opensearch",
        default=None,
        help="OpenSearch URL (with Painless) for the modes that run scripts (script)",
    )
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
    if args.kills < 0 or args.outages < 0:
        p.error("--kills and --outages must be >= 0")
    if not 0 <= args.txn_share <= 1:
        p.error("--txn-share must be between 0 and 1")
    for item in args.settings:
        name, sep, _ = item.partition("=")
        if not sep or not name:
            p.error(f"--set expects NAME=VALUE, got {item!r}")
    if args.modes is None:
        args.modes = [m for m in MODES if args.opensearch or not MODES[m].opensearch]
    if args.rate is None:
        args.rate = max(args.records / ((args.kills + 1) * SECONDS_PER_KILL), 200.0)
    return args


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def summary(mode: str, r: ModeResult, seed: int, rate: float, seconds: float) -> str:
    stats, result, o = r.stats, r.audit, r.stats.outage
    plans = ",".join(f"{k}:{v}" for k, v in stats.plans.items())
    layouts = ",".join(f"{k}:{v}" for k, v in stats.layouts.items())
    line = (
        f"mode={mode} kills={stats.kills} records={r.records} lost={result.lost} "
        f"wrong={result.wrong} extra={result.extra} undeleted={result.undeleted} "
        f"aborted_seen={result.aborted_seen} dlq_expected={result.dlq_expected} "
        f"dlq_found={result.dlq_found} "
        f"dlq_duplicates={result.dlq_duplicates} "
        f"dlq_good={result.dlq_good} dlq_unknown={result.dlq_unknown} "
        f"dlq_mismatch={result.dlq_mismatch} commit_mismatch={result.commit_mismatch} "
        f"commit_ahead={stats.commit_ahead} resume_ahead={stats.resume_ahead} "
        f"offset_checks={stats.offset_checks} "
        f"crashes={stats.crashes} completed={str(stats.completed).lower()} "
        f"runs={stats.runs} layouts={layouts} plans={plans} "
        f"kills_in_bulk={stats.kills_in_bulk} survivors_hung={stats.survivors_hung} "
        f"outages={o.outages} outage_hung={o.hung} outage_exit0={o.exit0} "
        f"outage_max_s={o.max_s:.1f} term2_max_s={o.term2_max_s:.1f} "
        f"txn_records={r.produced.txn_records} "
        f"txn_aborted={len(r.produced.aborted)} "
    )
    if r.growth is not None:
        g, m = r.growth, r.growth.moves
        line += (
            f"partitions_added={g.add if g.done else 0} grow_live={int(g.live)} "
            f"grow_seen_s={g.seen_s:.1f} early_exits={stats.early_exits} "
            f"grow_backlog={m.backlog} keys_moved={m.keys_moved} moved_unread={m.moved_unread} "
            f"newest_new={m.newest_new} grow_held={g.held} "
        )
    if r.faults is not None:
        f = r.faults
        line += f"bulks_held={f.held} late_kills={stats.late_held} items_429={f.rejected} "
    if r.reset is not None:
        z = r.reset
        line += (
            f"deleted_unread={z.unread} deleted_metric={z.metric} deleted_warned={int(z.warned)} "
        )
    if r.strict is not None:
        s = r.strict.stats
        line += (
            f"stops={s.stops} stop_wrong={s.stop_wrong} stop_lost={s.stop_lost} "
            f"past_bad={s.past_bad} stopped_on={s.stopped_on} "
        )
    return line + f"rate={rate:.0f} seed={seed} seconds={seconds:.0f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from sinks.elasticsearch.client import connect

    seed = args.seed if args.seed is not None else random.randrange(2**31)
    run = uuid.uuid4().hex[:8]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"chaos-{run}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.timeout
    say(f"chaos run {run}: seed={seed} logs in {workdir}")
    skipped = [m for m in MODES if m not in args.modes and MODES[m].opensearch]
    if skipped and not args.opensearch:
        say(
            f"chaos: not running {','.join(skipped)}: "
            "Painless needs an OpenSearch node (--opensearch)"
        )
    try:
        urls = {name: node_url(args, MODES[name]) for name in args.modes}
    except NeedsOpenSearch as e:
        say(f"chaos: {e}")
        return 2
    clients: dict[str, Any] = {url: connect(url, request_timeout=120) for url in set(urls.values())}
    passed = True
    try:
        for name in args.modes:
            t0 = time.monotonic()
            es = clients[urls[name]]
            result = run_mode(args, MODES[name], run, es, workdir, seed, deadline, say)
            print(summary(name, result, seed, args.rate, time.monotonic() - t0), flush=True)
            passed = result.passed and passed
    except Exception as e:  # the harness itself failed: say so, never report a pass
        traceback.print_exc()
        say(f"chaos: harness error: {type(e).__name__}: {e}; logs kept in {workdir}")
        return 2
    finally:
        for client in clients.values():
            client.close()
    if passed and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        say(f"chaos: logs kept in {workdir}")
    return 0 if passed else 1
