"""The figures of a run and their outputs: the printed table, the JSON files, the charts.

`--json PATH` holds exactly JSON_KEYS per system (tests/integration/test_bench_smoke.py
pins them); the stack's CPU per record goes beside it, in PATH with `.stack-cpu.json`.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.systems import ROOT

__all__ = [
    "JSON_KEYS",
    "Row",
    "head_commit",
    "plot",
    "plot_memory",
    "print_table",
    "write_json",
]

JSON_KEYS = (
    "system",
    "variant",
    "docs_per_s",
    "cpu_s_per_million",
    "peak_rss_mb",
    "p50_ms",
    "p99_ms",
    "ratio_to_ceiling",
)
STACK_KEYS = ("es_cpu_us", "kafka_cpu_us", "total_cpu_us", "bound_docs_per_s", "bound_ratio")


def _rounded(v: Any) -> Any:
    return round(v, 3) if isinstance(v, float) else v


@dataclass
class Row:
    """One system's figures; `as_json` has exactly JSON_KEYS."""

    system: str
    variant: str
    docs_per_s: float | None = None
    cpu_s_per_million: float | None = None
    peak_rss_mb: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    ratio_to_ceiling: float | None = None
    # not in the JSON: printed and documented
    wall_s: float | None = None
    first_doc_s: float | None = None
    lat_samples: int = 0
    lat_missing: int = 0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {k: _rounded(getattr(self, k)) for k in JSON_KEYS}


def stack_cpu_json(r: Row) -> dict[str, Any]:
    """A row's pipeline + Elasticsearch + Kafka CPU per record and the CPU bound."""
    out: dict[str, Any] = {"system": r.system, "variant": r.variant, "cores": os.cpu_count()}
    out["cpu_us"] = None if r.cpu_s_per_million is None else round(r.cpu_s_per_million, 3)
    for k in STACK_KEYS:
        out[k] = _rounded(r.extra.get(k))
    return out


def write_json(rows: list[Row], path: Path) -> None:
    """The rows at `path` (JSON_KEYS only) and their stack CPU beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([r.as_json() for r in rows], indent=2) + "\n")
    stack_json = path.with_suffix(".stack-cpu.json")
    stack_json.write_text(json.dumps([stack_cpu_json(r) for r in rows], indent=2) + "\n")


def head_commit() -> str:
    """The checked-out commit (read-only), '+dirty' when tracked files differ from it."""

    def git(*a: str) -> str:
        r = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=False)
        return r.stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return (git("rev-parse", "--short", "HEAD") or "?") + ("+dirty" if dirty else "")


def print_table(rows: list[Row], rate: float | None) -> None:
    head = (
        f"{'system':<8} {'variant':<7} {'docs/s':>9} {'ratio':>6} {'cpu_s/M':>8} "
        f"{'rss_mb':>7} {'p50_ms':>7} {'p99_ms':>7} {'wall_s':>7} {'first_s':>7} "
        f"{'live_us':>7} {'lull_s':>6} {'es_us':>6} {'kafka_us':>8} {'total_us':>8} "
        f"{'bound/s':>9} {'bound_r':>7}"
    )
    print(head)
    print("-" * len(head))

    def f(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    for r in rows:
        if r.error:
            print(f"{r.system:<8} {r.variant:<7} FAILED: {r.error.splitlines()[0][:80]}")
            continue
        print(
            f"{r.system:<8} {r.variant:<7} {f(r.docs_per_s, ',.0f'):>9} "
            f"{f(r.ratio_to_ceiling, '.2f'):>6} {f(r.cpu_s_per_million, ',.1f'):>8} "
            f"{f(r.peak_rss_mb, ',.0f'):>7} {f(r.p50_ms, ',.0f'):>7} "
            f"{f(r.p99_ms, ',.0f'):>7} {f(r.wall_s, '.1f'):>7} {f(r.first_doc_s, '.1f'):>7} "
            f"{f(r.extra.get('live_cpu_us'), '.1f'):>7} {f(r.extra.get('flush_s'), '.1f'):>6} "
            f"{f(r.extra.get('es_cpu_us'), '.1f'):>6} {f(r.extra.get('kafka_cpu_us'), '.1f'):>8} "
            f"{f(r.extra.get('total_cpu_us'), '.1f'):>8} "
            f"{f(r.extra.get('bound_docs_per_s'), ',.0f'):>9} "
            f"{f(r.extra.get('bound_ratio'), '.2f'):>7}"
        )
    sat = [r.system for r in rows if r.extra.get("saturated")]
    if sat:
        print(f"saturated at the latency rate (latency grew during the window): {', '.join(sat)}")
    if rate:
        print(f"latency at {rate:,.0f} records/s; samples (missing): ", end="")
        print(", ".join(f"{r.system} {r.lat_samples} ({r.lat_missing})" for r in rows))


def _pyplot() -> Any:
    """matplotlib's pyplot without a display (imported only when a chart is asked for)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(rows: list[Row], path: Path, title: str) -> None:
    plt = _pyplot()
    ok = [r for r in rows if r.docs_per_s]
    names = [r.system for r in ok]
    colors = ["#888888" if r.system == "ceiling" else "#4c72b0" for r in ok]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    bars = a.bar(names, [r.docs_per_s or 0 for r in ok], color=colors)
    a.set_title("throughput (docs/s, higher is better)")
    for bar, r in zip(bars, ok, strict=True):
        label = f"{r.docs_per_s:,.0f}"
        if r.ratio_to_ceiling is not None:
            label += f"\n{r.ratio_to_ceiling:.2f}x"
        a.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                   ha="center", va="bottom", fontsize=8)  # fmt: skip
    a.margins(y=0.2)
    bars = b.bar(names, [r.cpu_s_per_million or 0 for r in ok], color=colors)
    b.set_title("CPU per record (µs, lower is better)")
    for bar, r in zip(bars, ok, strict=True):
        b.annotate(f"{r.cpu_s_per_million:,.1f}",
                   (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                   ha="center", va="bottom", fontsize=8)  # fmt: skip
    b.margins(y=0.2)
    for ax in (a, b):
        ax.tick_params(axis="x", labelrotation=20)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_memory(samples: list[tuple[float, float]], path: Path, title: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.8))
    ax.plot([t for t, _ in samples], [m for _, m in samples], lw=1.2)
    ax.set_xlabel("seconds since the flow started")
    ax.set_ylabel("RSS (MiB)")
    ax.set_ylim(0, max(m for _, m in samples) * 1.3)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
