"""`--memory`: the RSS of flow-1w once per second while it drains a large backlog."""

from __future__ import annotations

import json
import threading
import time

from tools.bench.procs import Proc
from tools.bench.report import plot_memory
from tools.bench.systems import Ctx, log
from tools.bench.throughput import run_throughput

__all__ = ["RssSampler", "memory_mode"]


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
