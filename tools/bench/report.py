"""The figures of a run and their outputs: the printed table, the JSON files, the charts.

`--json PATH` holds exactly JSON_KEYS per system and variant
(tests/integration/test_bench_smoke.py pins them); the stack's CPU per record goes beside
it, in PATH with `.stack-cpu.json`, and the other figures of each row (threads, start to
first searchable document, records, dead letters, CPU against flow-1w) in `.details.json`.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.bench.systems import ROOT

__all__ = [
    "JSON_KEYS",
    "Row",
    "add_cpu_vs_flow_1w",
    "head_commit",
    "plot",
    "plot_memory",
    "print_summary",
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
DETAIL_KEYS = (
    "records",
    "docs",
    "dead_letters",
    "processes",
    "peak_threads",
    "searchable_s",
    "ix_p50_ms",
    "ix_p99_ms",
    "ix_unmapped",
    "refresh_p99_ms",
    "lat_poll_ms",
    "latency_rate",
    "producer_late_ms",
    "saturated",
    "live_cpu_us",
    "live_kafka_us",
    "live_es_us",
    "steady_us",
    "cpu_vs_flow_1w",
    "steady_vs_flow_1w",
    "ceiling_runs",
)


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


def details_json(r: Row) -> dict[str, Any]:
    """A row's figures that are not in the main JSON."""
    out: dict[str, Any] = {"system": r.system, "variant": r.variant}
    out["wall_s"] = _rounded(r.wall_s)
    out["first_doc_s"] = _rounded(r.first_doc_s)
    for k in DETAIL_KEYS:
        v = r.extra.get(k)
        out[k] = [_rounded(x) for x in v] if isinstance(v, list) else _rounded(v)
    return out


def write_json(rows: list[Row], path: Path) -> None:
    """The rows at `path` (JSON_KEYS only), their stack CPU and details beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([r.as_json() for r in rows], indent=2) + "\n")
    stack_json = path.with_suffix(".stack-cpu.json")
    stack_json.write_text(json.dumps([stack_cpu_json(r) for r in rows], indent=2) + "\n")
    details = path.with_suffix(".details.json")
    details.write_text(json.dumps([details_json(r) for r in rows], indent=2) + "\n")


def add_cpu_vs_flow_1w(rows: list[Row]) -> None:
    """flow-2w's and flow-2p's CPU per record over flow-1w's of the same variant, over the
    whole run (`cpu_vs_flow_1w`) and once running (`steady_vs_flow_1w`)."""
    one = {r.variant: r for r in rows if r.system == "flow-1w" and r.cpu_s_per_million}
    for r in rows:
        base = one.get(r.variant)
        if base and r.system in ("flow-2w", "flow-2p") and r.cpu_s_per_million:
            r.extra["cpu_vs_flow_1w"] = r.cpu_s_per_million / (base.cpu_s_per_million or 1)
            steady, base_steady = r.extra.get("steady_us"), base.extra.get("steady_us")
            if steady and base_steady:
                r.extra["steady_vs_flow_1w"] = steady / base_steady


def head_commit() -> str:
    """The checked-out commit (read-only), '+dirty' when tracked files differ from it."""

    def git(*a: str) -> str:
        r = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=False)
        return r.stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return (git("rev-parse", "--short", "HEAD") or "?") + ("+dirty" if dirty else "")


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def print_table(rows: list[Row], rates: dict[str, float | None]) -> None:
    """Every row, as today's table; `rates`: each variant's latency rate (None: no runs)."""
    vw = max([7, *(len(r.variant) for r in rows)])
    head = (
        f"{'system':<8} {'variant':<{vw}} {'docs/s':>9} {'ratio':>6} {'cpu_s/M':>8} "
        f"{'steady':>6} {'rss_mb':>7} {'threads':>7} {'p50_ms':>7} {'p99_ms':>7} {'ix_p50':>6} "
        f"{'ix_p99':>6} {'ref_p99':>7} {'wall_s':>7} "
        f"{'first_s':>7} {'search_s':>8} {'live_us':>7} {'lkafka':>6} {'lull_s':>6} {'es_us':>6} "
        f"{'kafka_us':>8} {'total_us':>8} {'bound/s':>9} {'bound_r':>7}"
    )
    print(head)
    print("-" * len(head))
    f = _f
    for r in rows:
        if r.error:
            print(f"{r.system:<8} {r.variant:<{vw}} FAILED: {r.error.splitlines()[0][:80]}")
            continue
        x = r.extra.get
        print(
            f"{r.system:<8} {r.variant:<{vw}} {f(r.docs_per_s, ',.0f'):>9} "
            f"{f(r.ratio_to_ceiling, '.2f'):>6} {f(r.cpu_s_per_million, ',.1f'):>8} "
            f"{f(x('steady_us'), '.1f'):>6} {f(r.peak_rss_mb, ',.0f'):>7} "
            f"{f(x('peak_threads'), 'd'):>7} "
            f"{f(r.p50_ms, ',.0f'):>7} {f(r.p99_ms, ',.0f'):>7} "
            f"{f(x('ix_p50_ms'), ',.0f'):>6} {f(x('ix_p99_ms'), ',.0f'):>6} "
            f"{f(x('refresh_p99_ms'), ',.0f'):>7} {f(r.wall_s, '.1f'):>7} "
            f"{f(r.first_doc_s, '.1f'):>7} {f(x('searchable_s'), '.1f'):>8} "
            f"{f(x('live_cpu_us'), '.1f'):>7} {f(x('live_kafka_us'), '.1f'):>6} "
            f"{f(x('flush_s'), '.1f'):>6} "
            f"{f(x('es_cpu_us'), '.1f'):>6} {f(x('kafka_cpu_us'), '.1f'):>8} "
            f"{f(x('total_cpu_us'), '.1f'):>8} {f(x('bound_docs_per_s'), ',.0f'):>9} "
            f"{f(x('bound_ratio'), '.2f'):>7}"
        )
    sat = [f"{r.system} ({r.variant})" for r in rows if r.extra.get("saturated")]
    if sat:
        print(f"saturated at the latency rate (latency grew during the window): {', '.join(sat)}")
    for variant, rate in rates.items():
        if not rate:
            continue
        print(f"{variant}: latency at {rate:,.0f} records/s; samples (missing): ", end="")
        print(
            ", ".join(
                f"{r.system} {r.lat_samples} ({r.lat_missing})"
                for r in rows
                if r.variant == variant
            )
        )


def print_summary(rows: list[Row], system: str = "flow-1w", base: str = "small") -> None:
    """`system` in each variant against its ceiling and against `base` (same run), and the
    CPU per record of 2 workers / 2 processes against 1."""
    ok = [r for r in rows if r.system == system and r.docs_per_s and not r.error]
    ref = next((r for r in ok if r.variant == base), None)
    if len({r.variant for r in ok}) > 1:
        label = f"{system} by variant"
        vw = max([len(label), *(len(r.variant) for r in ok)])
        head = (
            f"{label:<{vw}} {'records':>10} {'docs/s':>9} {'ratio':>6} "
            f"{'us/rec':>7} {'steady':>6} {'rss_mb':>7} {'threads':>7} {'search_s':>8} "
            f"{'vs ' + base + ' docs/s':>15} {'us/rec +':>8} {'steady +':>8}"
        )
        print()
        print(head)
        print("-" * len(head))
        for r in ok:
            rel = d_us = d_steady = None
            x = r.extra.get
            if ref is not None and ref.docs_per_s and r.cpu_s_per_million is not None:
                rel = (r.docs_per_s or 0) / ref.docs_per_s
                d_us = r.cpu_s_per_million - (ref.cpu_s_per_million or 0)
                if x("steady_us") is not None and ref.extra.get("steady_us") is not None:
                    d_steady = x("steady_us") - ref.extra["steady_us"]
            print(
                f"{r.variant:<{vw}} {_f(x('records'), ',d'):>10} {_f(r.docs_per_s, ',.0f'):>9} "
                f"{_f(r.ratio_to_ceiling, '.2f'):>6} {_f(r.cpu_s_per_million, '.1f'):>7} "
                f"{_f(x('steady_us'), '.1f'):>6} "
                f"{_f(r.peak_rss_mb, ',.0f'):>7} {_f(x('peak_threads'), 'd'):>7} "
                f"{_f(x('searchable_s'), '.1f'):>8} {_f(rel, '.2f'):>15} {_f(d_us, '+.1f'):>8} "
                f"{_f(d_steady, '+.1f'):>8}"
            )
    for r in rows:
        vs = r.extra.get("cpu_vs_flow_1w")
        if vs is not None:
            steady = r.extra.get("steady_vs_flow_1w")
            print(
                f"{r.variant}: {r.system} CPU per record {r.cpu_s_per_million:.1f} us = "
                f"{vs:.2f} x flow-1w's; once running (steady_us) "
                f"{_f(r.extra.get('steady_us'), '.1f')} us = {_f(steady, '.2f')} x flow-1w's"
            )


def _pyplot() -> Any:
    """matplotlib's pyplot without a display (imported only when a chart is asked for)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(rows: list[Row], path: Path, title: str) -> None:
    """Docs/s (with the ratio to the ceiling) and CPU per record per system: one row of two
    charts per variant, each on its own scale."""
    plt = _pyplot()
    ok = [r for r in rows if r.docs_per_s]
    variants = list(dict.fromkeys(r.variant for r in ok))
    fig, axes = plt.subplots(len(variants), 2, figsize=(11, 4.2 * len(variants)), squeeze=False)
    for (a, b), variant in zip(axes, variants, strict=True):
        vrows = [r for r in ok if r.variant == variant]
        names = [r.system for r in vrows]
        colors = ["#888888" if r.system == "ceiling" else "#4c72b0" for r in vrows]
        prefix = f"{variant}: " if len(variants) > 1 else ""
        bars = a.bar(names, [r.docs_per_s or 0 for r in vrows], color=colors)
        a.set_title(f"{prefix}throughput (docs/s, higher is better)")
        for bar, r in zip(bars, vrows, strict=True):
            label = f"{r.docs_per_s:,.0f}"
            if r.ratio_to_ceiling is not None:
                label += f"\n{r.ratio_to_ceiling:.2f}x"
            a.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                       ha="center", va="bottom", fontsize=8)  # fmt: skip
        a.margins(y=0.2)
        bars = b.bar(names, [r.cpu_s_per_million or 0 for r in vrows], color=colors)
        b.set_title(f"{prefix}CPU per record (µs, lower is better)")
        for bar, r in zip(bars, vrows, strict=True):
            b.annotate(f"{r.cpu_s_per_million:,.1f}",
                       (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                       ha="center", va="bottom", fontsize=8)  # fmt: skip
        b.margins(y=0.2)
        for ax in (a, b):
            ax.tick_params(axis="x", labelrotation=20)
    # A run of several variants has a long title: wrapped, and kept above the charts.
    lines = textwrap.wrap(title, 120)
    fig.suptitle("\n".join(lines), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.22 * len(lines) / fig.get_figheight()))
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
