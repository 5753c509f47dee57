"""One mode end to end: create, produce, run and interrupt the flow, audit, clean up."""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.chaos import truth as truths
from tools.chaos.audit import AuditResult, Expect, audit, end_offsets
from tools.chaos.faults import Faults
from tools.chaos.flow import ROOT, consecutive_ports, flow_env
from tools.chaos.grow import Growth, Moves, holds_logged
from tools.chaos.invariants import Invariants
from tools.chaos.modes import (
    EPOCH_S,
    GROW_ADD,
    GROW_LAYOUT,
    GROW_SHARE,
    RECOVERY_PARTITIONS,
    Mode,
    base_settings,
)
from tools.chaos.monitor import Monitor
from tools.chaos.produce import Produced, produce
from tools.chaos.proxy import Proxy
from tools.chaos.reset import Reset
from tools.chaos.runner import Chaos, HarnessTimeout, ModeStats, TooManyCrashes
from tools.chaos.strict import StrictWatch, dropped_after
from tools.chaos.workload import Rec, generate, generate_strict, growth, index_body
from tools.devkit.kafka import add_partitions, create_topic


@dataclass
class ModeResult:
    stats: ModeStats
    audit: AuditResult
    produced: Produced
    records: int
    growth: Growth | None
    strict: StrictWatch | None
    faults: Faults | None
    reset: Reset | None
    passed: bool


class NeedsOpenSearch(Exception):
    """A mode that runs Painless scripts was asked for without an OpenSearch node."""


def node_url(args: argparse.Namespace, mode: Mode) -> str:
    """The node the mode writes to: `--opensearch` for a mode that needs Painless."""
    if not mode.opensearch:
        return str(args.es)
    if not args.opensearch:
        msg = (
            f"mode {mode.name} runs Painless scripts, which only OpenSearch nodes have "
            "(scripts/stack ES_DISTRIBUTION=opensearch): give --opensearch URL"
        )
        raise NeedsOpenSearch(msg)
    return str(args.opensearch)


def cleanup(
    bootstrap: str, es: Any, topics: list[str], index: str, group: str, say: Callable[[str], None]
) -> None:
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


def prime_group(bootstrap: str, group: str, topic: str, partitions: int) -> None:
    """Commit offset 0 for every partition: the group exists before the flow first runs."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
        consumer.commit(offsets=tps, asynchronous=False)
    finally:
        consumer.close()


def old_committed(monitor: Monitor, partitions: int) -> dict[int, int]:
    """The group's committed offsets of partitions 0..`partitions`-1, asked until the
    broker answers for all of them (10 s at most; a partition it never answered for is
    left out, which `Moves` counts as read to its end)."""
    deadline = time.monotonic() + 10
    while True:
        got = monitor.committed_by_partition()
        if all(p in got for p in range(partitions)) or time.monotonic() > deadline:
            return {p: o for p, o in got.items() if p < partitions}
        time.sleep(0.2)


def forced_plans(kills: int, outages: int, rng: random.Random) -> dict[int, str]:
    """Kill numbers that are SIGTERMs in an outage: `outage` and `outage2` alternately,
    never the first attempt (it is the one that builds everything from nothing)."""
    slots = list(range(2, kills + 1)) or list(range(1, kills + 1))
    picks = sorted(rng.sample(slots, min(outages, len(slots))))
    return {k: ("outage", "outage2")[n % 2] for n, k in enumerate(picks)}


def run_mode(
    args: argparse.Namespace,
    mode: Mode,
    run: str,
    es: Any,
    workdir: Path,
    seed: int,
    deadline: float,
    say: Callable[[str], None],
) -> ModeResult:
    """One mode end to end; the caller prints the summary."""
    t0 = time.monotonic()
    topic = index = group = f"chaos-{run}-{mode.name}"
    dlq = f"{topic}-dlq"
    logdir = workdir / mode.name
    logdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"{seed}-{mode.name}")
    records = args.records
    first = int(records * (1 - GROW_SHARE)) if mode.grow else records
    if mode.strict:
        recs = generate_strict(first, seed, mode.partitions)
    else:
        recs = generate(
            first, seed, mode.partitions, tombstone_share=mode.tombstones,
            null_key_share=mode.null_keys,
        )  # fmt: skip
    faults = es_proxy = None
    if mode.late or mode.rejects:
        faults = Faults(random.Random(f"{seed}-{mode.name}-faults"), mode.late, mode.rejects)
        es_proxy = faults.start(node_url(args, mode))
    proxy = Proxy(es_proxy.url if es_proxy is not None else node_url(args, mode))
    try:
        create_topic(args.bootstrap, topic, mode.partitions)
        create_topic(args.bootstrap, dlq, 1)
        es.indices.create(index=index, **index_body(mode.shards, mode.routed, mode.counted))
        produced = produce(
            args.bootstrap, topic, recs, txn_share=args.txn_share, rng=rng,
            partitions=mode.partitions,
        )  # fmt: skip
        gone: dict[int, tuple[int, int]] = {}  # partition -> offsets the broker deleted unread

        def rebuild() -> truths.Truth:
            def deleted(r: Rec) -> bool:
                low, high = gone.get(r.partition, (0, 0))
                return low <= r.offset < high

            return truths.build(
                topic, recs, deletes=mode.deletes, gone=deleted,
                grown_at=first if mode.grow else None,
            )  # fmt: skip

        truth = rebuild()
        finals = [truth.allowed(d, truths.INFINITY, truths.INFINITY) for d in truth.ops]
        say(
            f"[{mode.name}] produced {len(recs)} records to {topic} ({produced.txn_records} in "
            f"{produced.committed_txns} transactions, {len(produced.aborted)} more in "
            f"{produced.aborted_txns} aborted ones): {len(truth.ops)} documents, "
            f"{sum(not a.recs for a in finals)} of them deleted by tombstones, "
            f"{len(truth.bad)} bad records ({time.monotonic() - t0:.0f}s)"
        )
        if mode.grow or mode.reset:
            prime_group(args.bootstrap, group, topic, mode.partitions)
        run_args = ["-s", str(EPOCH_S)]
        if mode.recovery:
            recovery = logdir / "recovery"
            recovery.mkdir()
            subprocess.run(
                [sys.executable, "-m", "bytewax.recovery", str(recovery), str(RECOVERY_PARTITIONS)],
                check=True,
                cwd=ROOT,
            )
            run_args = ["-r", str(recovery), "-s", str(EPOCH_S), "-b", "0"]
        settings = base_settings(
            bootstrap=args.bootstrap, es_url=proxy.url, topic=topic, group=group, index=index,
            dlq=dlq,
        )  # fmt: skip
        settings.update(mode.settings)
        if mode.reset:
            settings["API_PORT"] = str(consecutive_ports(1))
        settings["SHUTDOWN_TIMEOUT_S"] = f"{args.shutdown_timeout:g}"
        settings.update(dict(item.split("=", 1) for item in args.settings))
        monitor = Monitor(es, args.bootstrap, group, topic, index)
        invariants = Invariants(
            es=es, bootstrap=args.bootstrap, truth=truth, index=index, dlq_topic=dlq, group=group
        )
        ends: dict[int, int] = end_offsets(args.bootstrap, topic)
        grower: Growth | None = None
        if mode.grow:

            def grow_now() -> tuple[int, Moves]:
                nonlocal truth, ends
                committed = old_committed(monitor, mode.partitions)
                before = dict(ends)
                add_partitions(args.bootstrap, topic, mode.partitions + GROW_ADD)
                more = growth(recs, records - first, seed, mode.partitions, GROW_ADD)
                extra = produce(
                    args.bootstrap, topic, more, txn_share=args.txn_share, rng=rng,
                    first_seq=len(recs), partitions=mode.partitions + GROW_ADD,
                    first_aborted=len(produced.aborted),
                )  # fmt: skip
                recs.extend(more)
                produced.aborted.extend(extra.aborted)
                produced.txn_records += extra.txn_records
                produced.committed_txns += extra.committed_txns
                produced.aborted_txns += extra.aborted_txns
                truth = invariants.truth = rebuild()
                ends = end_offsets(args.bootstrap, topic)
                return len(more), Moves.of(truth, mode.partitions, committed, before)

            grower = Growth(
                at_kill=max(args.kills // 2, 1), add=GROW_ADD, first_new=mode.partitions,
                produce=grow_now, layout=None if args.layouts else GROW_LAYOUT,
            )  # fmt: skip
        resetter: Reset | None = None
        if mode.reset:

            def deleted(partition: int, first: int, cut: int) -> None:
                nonlocal truth
                gone[partition] = (first, cut)
                truth = invariants.truth = rebuild()

            # In the first attempt: no earlier one wrote records past the position, which
            # the index would keep although the broker deleted them.
            resetter = Reset(
                at_kill=0, api_port=int(settings["API_PORT"]),
                bootstrap=args.bootstrap, topic=topic, deleted=deleted,
            )  # fmt: skip
        strict = StrictWatch(truth, invariants) if mode.strict else None

        def complete() -> bool:
            got = monitor.committed_by_partition()
            return all(got.get(p, 0) >= end for p, end in ends.items())

        chaos = Chaos(
            mode=mode.name,
            layouts=args.layouts or list(mode.layouts),
            kills=args.kills,
            offsets=lambda: sum(ends.values()),
            run_args=run_args,
            env=flow_env(settings),
            logdir=logdir,
            monitor=monitor,
            invariants=invariants,
            proxy=proxy,
            epoch_s=EPOCH_S,
            rng=random.Random(f"{seed}-{mode.name}-kills"),
            deadline=deadline,
            say=say,
            complete=complete,
            rate=args.rate,
            stop_at_end=settings["KAFKA_STOP_AT_END"] == "true",
            shutdown_timeout_s=args.shutdown_timeout,
            forced=forced_plans(args.kills, args.outages, rng) if mode.outages else {},
            strict=strict,
            growth=grower,
            faults=faults,
            reset=resetter,
        )
        try:
            chaos.run()
        except (HarnessTimeout, TooManyCrashes) as e:
            say(f"[{mode.name}] stopped: {e}")
        finally:
            monitor.close()
            invariants.close()
        while faults is not None and faults.holding():  # audit what a late bulk leaves
            time.sleep(0.1)
        bounds: dict[int, tuple[int, int]] = {}
        if mode.strict:
            committed = invariants.capture().committed
            for p, end in ends.items():
                limit = truth.first_bad.get(p)
                got = max(committed.get(p, 0), 0)
                if limit is None:
                    bounds[p] = (min(got, end), end)
                else:
                    bounds[p] = (limit, limit if dropped_after(truth, p) else truths.INFINITY)
        expect = Expect(
            versioned=mode.versioned,
            routed=mode.routed,
            counted=mode.counted,
            strict=mode.strict,
            bounds=bounds,
            ends=ends,
            aborted={(r.partition, r.offset): r for r in produced.aborted},
        )
        result = audit(
            es=es, bootstrap=args.bootstrap, truth=truth, index=index, dlq_topic=dlq,
            group=group, expect=expect,
        )  # fmt: skip
        if grower is not None:
            grower.held = len(holds_logged(logdir.glob("run-*.log"), topic))
        for line in result.details + invariants.found.examples:
            say(f"[{mode.name}] {line}")
        if strict is not None:
            for line in strict.stats.examples:
                say(f"[{mode.name}] {line}")
        stats = chaos.stats
        if stats.kills < args.kills:
            say(f"[{mode.name}] note: the backfill finished after {stats.kills} of {args.kills}")
        return ModeResult(
            stats,
            result,
            produced,
            len(recs),
            grower,
            strict,
            faults,
            resetter,
            _passed(stats, result, grower, strict, resetter),
        )
    finally:
        proxy.close()
        if es_proxy is not None:
            es_proxy.__exit__(None, None, None)
        if not args.keep:
            cleanup(args.bootstrap, es, [topic, dlq], index, group, say)


def _passed(
    stats: ModeStats,
    result: AuditResult,
    grower: Growth | None,
    strict: StrictWatch | None,
    reset: Reset | None,
) -> bool:
    ok = (
        result.ok
        and stats.completed
        and stats.crashes == 0
        and stats.commit_ahead == stats.resume_ahead == 0
        and stats.outage.hung == stats.outage.exit0 == 0
    )
    if grower is not None:
        # The road is walked only if some moved key still had an older write unread.
        ok = ok and grower.done and grower.live and grower.moves.moved_unread > 0
    if reset is not None:
        ok = ok and reset.done and reset.warned and reset.consistent
        ok = ok and reset.metric == reset.unread
    if strict is not None:
        s = strict.stats
        ok = ok and s.stops >= 2 and s.stop_wrong == s.stop_lost == s.past_bad == 0
    return ok
