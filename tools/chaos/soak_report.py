"""The soak's verdict and figures: flat resources, p99 per window, the audit, a plot.

Resources are judged per run of the flow (between two restarts) and per process, from
`Plan.warmup_s` after the later of the run's start and the live phase's (buffers fill,
imports load). Descriptors and threads never rise more than `FD_SLACK` and
`THREAD_SLACK` over the first judged sample (an Elasticsearch restart reconnects, so a
few come and go). Memory is judged on each run's last quiet stretch, from `QUIET_S`
after its last event settled (`Outcome.busy`) to its end: an outage raises RSS to a
high-water mark the allocator keeps, which is not a leak; a leak keeps growing while
nothing happens. So RSS may grow at most 5% + 8 MiB over that stretch (runs with fewer
than 3 samples in it are not judged on memory). A restart frees a process's memory, so
runs are not compared with each other (a run that starts behind reads bigger batches);
what outlives a restart is the recovery store, whose size must level off
(`store_grew`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tools.chaos.soak import Outcome, Plan, Soak
from tools.chaos.soak_watch import Sample
from tools.devkit.stats import percentile

FD_SLACK = 16
THREAD_SLACK = 8
QUIET_S = 30.0
MIN_QUIET = 3
JUDGE_MEMORY_MIN = 10.0
"""A soak this long or longer must judge memory somewhere (the 3-minute CI form has no
quiet stretch long enough: it reports RSS, and judges descriptors and threads)."""


def windows(seen: list[tuple[float, float]], live_t0: float, width: float) -> list[dict[str, Any]]:
    """Latency per window of `width` seconds of production time (live phase only)."""
    by: dict[int, list[float]] = defaultdict(list)
    for at, ms in seen:
        if at >= live_t0:
            by[int((at - live_t0) // width)].append(ms)
    return [
        {
            "from_s": k * width,
            "samples": len(v),
            "p50_ms": percentile(v, 0.5),
            "p99_ms": percentile(v, 0.99),
            "max_ms": max(v),
        }
        for k, v in sorted(by.items())
    ]


def per_run(
    samples: list[Sample], live_t0: float, warmup_s: float, busy: list[tuple[float, float]]
) -> list[dict[str, Any]]:
    """Per run and process: first judged sample, last and peak of each resource, and
    the RSS of the run's last quiet stretch, from `QUIET_S` after its last event settled
    (runs with fewer than two judged samples are left out)."""
    groups: dict[tuple[int, int], list[Sample]] = defaultdict(list)
    for s in samples:
        groups[(s.run, s.proc)].append(s)
    out = []
    for (run, proc), group in sorted(groups.items()):
        start = max(group[0].t, live_t0) + warmup_s
        warm = [s for s in group if s.t >= start]
        if len(warm) < 2:
            continue
        first, last = warm[0], warm[-1]
        ended = [end for begin, end in busy if begin <= last.t]
        calm = max(ended) + QUIET_S if ended else float("-inf")
        out.append(
            {
                "run": run,
                "proc": proc,
                "judged_min": round((last.t - first.t) / 60, 1),
                "rss_mib": [first.rss_mib, last.rss_mib, max(s.rss_mib for s in warm)],
                "quiet_rss_mib": [s.rss_mib for s in warm if s.t >= calm],
                "fds": [first.fds, last.fds, max(s.fds for s in warm)],
                "threads": [first.threads, last.threads, max(s.threads for s in warm)],
            }
        )
    return out


def unflat(runs: list[dict[str, Any]], *, need_memory: bool = True) -> list[str]:
    """What did not stay flat (empty: everything did); see the module docstring.
    `need_memory`: a run with no run judged on memory fails too."""
    problems = [] if runs else ["no run lasted long enough to judge its resources"]
    judged = [r for r in runs if len(r["quiet_rss_mib"]) >= MIN_QUIET]
    if runs and need_memory and not judged:
        problems.append(f"no run had {MIN_QUIET} quiet samples to judge its memory on")
    for r in runs:
        name = f"run {r['run']} process {r['proc']}"
        if r in judged:
            q0, q1 = r["quiet_rss_mib"][0], r["quiet_rss_mib"][-1]
            if q1 > q0 * 1.05 + 8:
                problems.append(f"{name}: RSS {q0:.0f} -> {q1:.0f} MiB while nothing happened")
        if r["fds"][2] > r["fds"][0] + FD_SLACK:
            problems.append(f"{name}: descriptors {r['fds'][0]} -> peak {r['fds'][2]}")
        if r["threads"][2] > r["threads"][0] + THREAD_SLACK:
            problems.append(f"{name}: threads {r['threads'][0]} -> peak {r['threads'][2]}")
    return problems


def store_grew(disk: list[tuple[float, float]]) -> list[str]:
    """The recovery store must not grow without bound: its size over the last third of
    the run at most 1.5 times its size over the first third, + 1 MiB (Bytewax keeps
    `-b` seconds of old snapshots, then deletes them)."""
    if len(disk) < 6:
        return []
    third = len(disk) // 3
    early, late = max(m for _, m in disk[:third]), max(m for _, m in disk[-third:])
    if late > early * 1.5 + 1:
        return [f"the recovery store grew: {early:.1f} -> {late:.1f} MiB"]
    return []


def report(soak: Soak, out: Outcome, plan: Plan) -> dict[str, Any]:
    """Everything the run measured, as one JSON-able dict."""
    runs = per_run(soak.resources.samples, out.live_t0, plan.warmup_s, out.busy)
    lat = windows(soak.latency.seen, out.live_t0, plan.window_s)
    a = out.audit
    return {
        "plan": asdict(plan),
        "capacity_per_s": round(out.capacity),
        "rate_per_s": round(out.rate),
        "records": out.records,
        "flow_stops_s": out.stops_s,
        "rejected_429": out.rejected,
        "bad_exits": out.bad_exits,
        "crashes": out.crashes,
        "es_restarts": out.es_restarts,
        "events": out.events,
        "live_t0": out.live_t0,
        "stalls": out.stalls,
        "busy": out.busy,
        "drain_s": out.drain_s,
        "audit": asdict(a) if a is not None else None,
        "runs": runs,
        "unflat": [
            *unflat(runs, need_memory=plan.minutes >= JUDGE_MEMORY_MIN),
            *store_grew(soak.resources.disk),
        ],
        "memory_judged_runs": sum(len(r["quiet_rss_mib"]) >= MIN_QUIET for r in runs),
        "latency_windows": lat,
        "latency_unseen": soak.latency.pending(),
        "samples": [asdict(s) for s in soak.resources.samples],
        "recovery_mib": soak.resources.disk,
    }


def passed(rep: dict[str, Any], out: Outcome) -> bool:
    return (
        out.audit is not None
        and out.audit.ok
        and not rep["unflat"]
        and not out.bad_exits
        and not out.crashes
        and all(s >= 0 for _, s in out.stalls)
        and all(n > 0 for n in out.rejected)  # the write queue of 1 did push back
        and rep["latency_unseen"] == 0
    )


def summary(rep: dict[str, Any], ok: bool) -> str:
    """The one line a run prints (and a test asserts on)."""
    a = rep["audit"] or {}
    p99 = [w["p99_ms"] for w in rep["latency_windows"]]
    rss = [r["rss_mib"][2] for r in rep["runs"]]
    fields = {
        "soak": "passed" if ok else "FAILED",
        "minutes": rep["plan"]["minutes"],
        "records": rep["records"],
        "rate": rep["rate_per_s"],
        "lost": a.get("lost"),
        "wrong": a.get("wrong"),
        "extra": a.get("extra"),
        "dlq": f"{a.get('dlq_found')}/{a.get('dlq_expected')}",
        "dlq_good": a.get("dlq_good"),
        "commit_mismatch": a.get("commit_mismatch"),
        "flow_restarts": len(rep["flow_stops_s"]) - 1,
        "flow_stop_s_max": max(rep["flow_stops_s"], default=0),
        "es_restarts": len(rep["es_restarts"]),
        "rejected_429": ",".join(str(n) for n in rep["rejected_429"]),
        "crashes": len(rep["crashes"]),
        "bad_exits": len(rep["bad_exits"]),
        "peak_rss_mib": f"{min(rss, default=0):.0f}-{max(rss, default=0):.0f}",
        "unflat": len(rep["unflat"]),
        "memory_judged": rep["memory_judged_runs"],
        "stalls_s": ",".join(f"{w}:{t:.0f}" for w, t in rep["stalls"]),
        "p99_ms_per_window": ",".join(f"{v:.0f}" for v in p99),
    }
    return " ".join(f"{k}={v}" for k, v in fields.items())


def write(rep: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(rep, indent=1, ensure_ascii=False))


def plot(rep: dict[str, Any], path: Path) -> None:
    """RSS, descriptors and threads per process, and p99 per window, events marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(10, 10), sharex=True)
    live0 = rep["live_t0"]
    series: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for s in rep["samples"]:
        series[(s["run"], s["proc"])].append(s)
    for (run, proc), ss in sorted(series.items()):
        ts = [(s["t"] - live0) / 60 for s in ss]
        color = f"C{proc}"
        label = f"process {proc}" if run == 1 else None
        for ax, key in zip(axes[:3], ("rss_mib", "fds", "threads"), strict=True):
            ax.plot(ts, [s[key] for s in ss], color=color, lw=1.2, label=label)
    for ax, name in zip(axes[:3], ("RSS (MiB)", "open descriptors", "threads"), strict=True):
        ax.set_ylabel(name)
        ax.set_ylim(bottom=0)
    axes[0].legend(loc="lower right", fontsize=8)
    lat = rep["latency_windows"]
    width = rep["plan"]["window_s"] / 60
    xs = [w["from_s"] / 60 + width / 2 for w in lat]
    axes[3].bar(xs, [w["p99_ms"] for w in lat], width=width * 0.8, label="p99", color="C3")
    axes[3].plot(xs, [w["p50_ms"] for w in lat], "ko-", ms=3, lw=1, label="p50")
    axes[3].set_yscale("log")
    axes[3].set_ylabel("latency (ms)")
    axes[3].legend(loc="upper right", fontsize=8)
    axes[3].set_xlabel("minutes into the live phase")
    marks = {"restart": "C2", "slow": "C1", "fast": "C1", "es-restart": "C4"}
    for ax in axes:
        ax.grid(alpha=0.3)
        for start, end in rep["busy"]:  # from each event until the flow committed again
            ax.axvspan((start - live0) / 60, (end - live0) / 60, color="grey", alpha=0.12)
        for at, what in rep["events"]:
            ax.axvline(at / 60, color=marks.get(what, "grey"), ls="--", lw=0.8)
    fig.suptitle(
        f"soak: {rep['plan']['minutes']:g} min at {rep['rate_per_s']:,}/s "
        f"({rep['plan']['layout']}); dashed: flow restart (green), write queue of 1 "
        "on/off (orange), ES restart (purple); grey: until the flow committed again",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
