"""The soak's verdict and figures: flat resources, p99 per window, the audit, a plot.

Flat means, for every run of the flow (between two restarts) and every process, judged
from `Plan.warmup_s` after the later of the run's start and the live phase's (buffers
fill, librdkafka prefetches, imports load): RSS grew by at most 15% + 16 MiB from the
first judged sample to the last, and open descriptors and threads never rose more than
`FD_SLACK` and `THREAD_SLACK` over it (an Elasticsearch restart reconnects, so a few
come and go). Across runs, the last judged run's peak RSS is at most 25% over the first's.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from chaos.soak import Outcome, Plan, Soak
from chaos.soak_watch import Sample
from devkit.stats import percentile

FD_SLACK = 16
THREAD_SLACK = 8


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


def per_run(samples: list[Sample], live_t0: float, warmup_s: float) -> list[dict[str, Any]]:
    """Per run and process: first judged sample, last and peak of each resource (runs
    with fewer than two judged samples are left out)."""
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
        out.append(
            {
                "run": run,
                "proc": proc,
                "judged_min": round((last.t - first.t) / 60, 1),
                "rss_mib": [first.rss_mib, last.rss_mib, max(s.rss_mib for s in warm)],
                "fds": [first.fds, last.fds, max(s.fds for s in warm)],
                "threads": [first.threads, last.threads, max(s.threads for s in warm)],
            }
        )
    return out


def unflat(runs: list[dict[str, Any]]) -> list[str]:
    """What did not stay flat (empty: everything did); see the module docstring."""
    problems = [] if runs else ["no run lasted long enough to judge its resources"]
    for r in runs:
        name = f"run {r['run']} process {r['proc']}"
        rss0, rss1, _ = r["rss_mib"]
        if rss1 > rss0 * 1.15 + 16:
            problems.append(f"{name}: RSS {rss0:.0f} -> {rss1:.0f} MiB")
        if r["fds"][2] > r["fds"][0] + FD_SLACK:
            problems.append(f"{name}: descriptors {r['fds'][0]} -> peak {r['fds'][2]}")
        if r["threads"][2] > r["threads"][0] + THREAD_SLACK:
            problems.append(f"{name}: threads {r['threads'][0]} -> peak {r['threads'][2]}")
    peaks: dict[int, float] = defaultdict(float)
    for r in runs:
        peaks[r["run"]] = max(peaks[r["run"]], r["rss_mib"][2])
    if len(peaks) > 1:
        first, last = peaks[min(peaks)], peaks[max(peaks)]
        if last > first * 1.25:
            problems.append(f"peak RSS grew across runs: {first:.0f} -> {last:.0f} MiB")
    return problems


def report(soak: Soak, out: Outcome, plan: Plan) -> dict[str, Any]:
    """Everything the run measured, as one JSON-able dict."""
    runs = per_run(soak.resources.samples, out.live_t0, plan.warmup_s)
    lat = windows(soak.latency.seen, out.live_t0, plan.window_s)
    a = out.audit
    return {
        "plan": asdict(plan),
        "capacity_per_s": round(out.capacity),
        "rate_per_s": round(out.rate),
        "records": out.records,
        "flow_stops_s": out.restarts,
        "bad_exits": out.bad_exits,
        "crashes": out.crashes,
        "es_restarts": out.es_restarts,
        "events": out.events,
        "live_t0": out.live_t0,
        "stalls": out.stalls,
        "drain_s": out.drain_s,
        "audit": asdict(a) if a is not None else None,
        "runs": runs,
        "unflat": unflat(runs),
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
        "es_restarts": len(rep["es_restarts"]),
        "crashes": len(rep["crashes"]),
        "bad_exits": len(rep["bad_exits"]),
        "peak_rss_mib": f"{min(rss, default=0):.0f}-{max(rss, default=0):.0f}",
        "unflat": len(rep["unflat"]),
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
        for at, what in rep["events"]:
            ax.axvline(at / 60, color=marks.get(what, "grey"), ls="--", lw=0.8)
    fig.suptitle(
        f"soak: {rep['plan']['minutes']:g} min at {rep['rate_per_s']:,}/s "
        f"({rep['plan']['layout']}); dashed: flow restart (green), write queue of 1 "
        "on/off (orange), ES restart (purple)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
