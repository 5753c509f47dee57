"""`scripts/soak`: the flow as a service for `--minutes`, disturbed on a schedule, audited.

    scripts/soak [--minutes 30] [--load 0.5] [--layout 2p] [--restart-every 600]
                 [--slow-every 600] [--slow-s 60] [--sample-s 15] [--window-s 300]
                 [--calibrate 100000] [--keys 50000] [--warmup-s 120] [--bootstrap 127.0.0.1:9092]
                 [--es-port 9250] [--stack-dir /var/tmp/es-sink-soak] [--out DIR] [--keep]

What it does is in tools/chaos/soak.py's docstring; what "flat" means in
tools/chaos/soak_report.py's.
Writes DIR/soak.json (every sample, the audit, p99 per window) and DIR/soak.png (needs
matplotlib: `pip install -e '.[bench]'`), and prints one line:
`soak=passed minutes=30 records=... lost=0 wrong=0 extra=0 dlq=N/N ... p99_ms_per_window=...`.
Exit status: 0 when it passed, 1 when something was lost, wrong, extra, not flat, a flow
stop was not clean, a process crashed or a sampled record never showed up; 2 when the
harness itself could not run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path

from tools.chaos.soak import Plan, Soak
from tools.chaos.soak_report import passed, plot, report, summary, write


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/soak", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--load", type=float, default=0.5, help="share of the measured capacity")
    p.add_argument("--layout", default="2p", help="1w, 2w, 2p, ... (tools/chaos/flow.py)")
    p.add_argument("--restart-every", type=float, default=600.0, help="flow restart, seconds")
    p.add_argument("--slow-every", type=float, default=600.0, help="ES disturbance, seconds")
    p.add_argument("--slow-s", type=float, default=60.0, help="how long the queue is 1")
    p.add_argument("--sample-s", type=float, default=15.0, help="resource sampling interval")
    p.add_argument("--window-s", type=float, default=300.0, help="latency window")
    p.add_argument("--calibrate", type=int, default=100_000, help="backlog records")
    p.add_argument("--keys", type=int, default=50_000)
    p.add_argument("--warmup-s", type=float, default=120.0, help="resources judged after it")
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--es-port", type=int, default=9250, help="the soak's own node's port")
    p.add_argument(
        "--stack-dir",
        type=Path,
        default=Path("/var/tmp/es-sink-soak"),  # noqa: S108 (as scripts/stack's STACK_DIR)
        help="the node's STACK_DIR (run as an unprivileged user when root: not under /tmp)",
    )
    p.add_argument(
        "--out", type=Path, help="where soak.json and soak.png go (default: the work dir, kept)"
    )
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    plan = Plan(
        minutes=args.minutes, restart_every_s=args.restart_every, slow_every_s=args.slow_every,
        slow_s=args.slow_s, sample_s=args.sample_s, window_s=args.window_s, load=args.load,
        calibrate=args.calibrate, keys=args.keys, layout=args.layout, warmup_s=args.warmup_s,
    )  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="es-sink-soak-"))
    out_dir = args.out or work
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - t0:6.0f}s] {text}", flush=True)

    run = uuid.uuid4().hex[:8]
    soak = Soak(
        plan,
        bootstrap=args.bootstrap,
        es_port=args.es_port,
        stack_dir=args.stack_dir,
        workdir=work,
        run=run,
        say=say,
    )
    try:
        out = soak.run()
    except Exception:
        traceback.print_exc()
        print(f"soak: the harness could not finish; logs kept in {work}", file=sys.stderr)
        return 2
    rep = report(soak, out, plan)
    ok = passed(rep, out)
    write(rep, out_dir / "soak.json")
    try:
        plot(rep, out_dir / "soak.png")
    except ImportError:
        say("soak: no matplotlib, no plot (pip install -e '.[bench]')")
    for line in [
        *rep["unflat"],
        *out.bad_exits,
        *out.crashes,
        *(out.audit.details if out.audit else []),
    ]:
        say(line)
    print(summary(rep, ok), flush=True)
    if ok and not args.keep:  # the flow logs and the store go; the results stay
        for log in work.glob("flow-*.log"):
            log.unlink()
        shutil.rmtree(work / "recovery", ignore_errors=True)
    else:
        say(f"soak: work directory (flow logs) kept in {work}")
    say(f"soak: results in {out_dir / 'soak.json'}")
    return 0 if ok else 1
