"""SIGTERM while Elasticsearch is unreachable.

The harness cuts the proxy between the flow and Elasticsearch (`tools.chaos.proxy`: `refuse`
like a node that is down, `blackhole` like a network partition), lets bulks fail or hang
for 0.3-1.5 s, then asks the flow to stop as an orchestrator would. A graceful stop cannot
flush, so every process must give up within SHUTDOWN_TIMEOUT_S (+ OUTAGE_SLACK_S) with a
non-zero status and commit nothing more; with `outage2` a second SIGTERM 0.3-1 s later
must end it within SECOND_SIGNAL_S. Processes still running then are SIGKILLed and
counted. What was durable is checked afterwards like after any kill, and the next attempt
(proxy restored) must lose nothing.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools.chaos.flow import Flow
from tools.chaos.proxy import CUT_MODES, Proxy

OUTAGE_SLACK_S = 3.0
SECOND_SIGNAL_S = 2.0


@dataclass
class OutageStats:
    outages: int = 0
    hung: int = 0
    """Processes still running past the limit after SIGTERM (must be 0)."""
    exit0: int = 0
    """Processes that exited 0 after SIGTERM in an outage: nothing could be flushed, so
    status 0 would claim a clean stop that did not happen (must be 0). Not counted: one
    that wrote nothing in its run (still waiting to own its partitions)."""
    max_s: float = 0.0
    """Longest exit after one SIGTERM."""
    term2_max_s: float = 0.0
    """Longest exit after the second SIGTERM."""


def sigterm_during_outage(
    flow: Flow,
    proxy: Proxy,
    rng: random.Random,
    *,
    twice: bool,
    shutdown_timeout_s: float,
    stats: OutageStats,
    idle: Callable[[], bool] = lambda: False,
) -> str:
    """Cut, SIGTERM (twice), wait, restore; returns what happened, for the log.

    `idle()`, asked once the flow exited: everything is committed (a flow without
    KAFKA_STOP_AT_END after its backlog), so a clean exit 0 is right and not counted.
    Asked after, not before the cut: a bulk already answered before the cut, and the
    epoch's commit after it, may make the last records durable while the cut lasts, and
    a stop with nothing left to flush rightly exits 0 (a CI run's `grow`: outage2 exit
    codes [0], committed 8,376 -> 8,763 of 8,763).
    """
    cut = rng.choice(CUT_MODES)
    proxy.cut(cut)
    try:
        time.sleep(rng.uniform(0.3, 1.5))  # bulks fail and retry, or hang
        t0 = time.monotonic()
        flow.terminate()
        if twice:
            time.sleep(rng.uniform(0.3, 1.0))
            t0 = time.monotonic()
            flow.terminate()
            limit = SECOND_SIGNAL_S
        else:
            limit = shutdown_timeout_s + OUTAGE_SLACK_S
        exited = flow.wait(limit)
        took = time.monotonic() - t0
        late = sum(c is None for c in flow.codes())
        if not exited:
            flow.kill_all()
    finally:
        proxy.restore()
    codes = flow.codes()
    stats.outages += 1
    stats.hung += late
    was_idle = idle()
    if not was_idle:
        stopped = zip(codes, flow.logs, strict=True)
        stats.exit0 += sum(c == 0 and not _wrote_nothing(log) for c, log in stopped)
    if twice:
        stats.term2_max_s = max(stats.term2_max_s, took)
    else:
        stats.max_s = max(stats.max_s, took)
    ended = f"{late} still running, SIGKILLed" if late else "exited"
    return (
        f"{cut} SIGTERM{' x2' if twice else ''}{' (idle)' if was_idle else ''}: {ended} after "
        f"{took:.1f}s (limit {limit:.0f}s), exit codes {codes}"
    )


def _wrote_nothing(log: Path) -> bool:
    """The process had nothing in flight when Elasticsearch was cut away: its log shows no
    request the sink had to retry (nothing it could not flush), or its stop line says it
    indexed and dead-lettered nothing (still waiting to own its partitions, for a dead
    owner's bulks or, after partitions were added, for the older partitions). Its exit 0
    is then a clean stop, not a false success."""
    text = log.read_text(errors="replace") if log.exists() else ""
    if "stopped (signal): indexed 0 documents, dead-lettered 0 records" in text:
        return True
    return not any(
        "sinks.elasticsearch.partition" in line and " retrying " in line
        for line in text.splitlines()
    )
