"""`--profile`: flow-1w under py-spy (from the tools virtualenv) over a backlog, summarized
as self and inclusive time per function in µs per record."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.bench.procs import Proc
from tools.bench.systems import ROOT, Ctx, child_env, log
from tools.bench.throughput import run_throughput

__all__ = ["profile_mode", "summarize_profile"]


def start_profiler(ctx: Ctx, out: Path, rate: int) -> Callable[[list[Proc]], Any]:
    """An `on_start` hook that attaches py-spy to the flow process."""
    assert ctx.tools_python is not None
    spy = ctx.tools_python.parent / "py-spy"

    def hook(procs: list[Proc]) -> Any:
        cmd = [str(spy), "record", "--pid", str(procs[0].pid), "--rate", str(rate)]
        cmd += ["--format", "raw", "--nonblocking", "-o", str(out)]
        if ctx.args.native:
            cmd.append("--native")
        if ctx.args.gil:
            cmd.append("--gil")
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
            frames.append(f"{m.group(1)} ({_short_path(m.group(2))})")
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


def _short_path(path: str) -> str:
    for marker in ("site-packages/", "/src/", str(ROOT) + "/", "lib/python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


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
