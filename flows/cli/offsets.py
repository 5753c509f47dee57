"""`es-sink offsets show` and `es-sink offsets reset`: the flow's consumer-group offsets,
like `kafka-consumer-groups --reset-offsets` and Kafka Connect's offsets API.

A reset while an instance of the group reads a partition would be undone by its next
commit, so `reset` refuses unless `--force`. Who reads a partition is in the metadata of
the group's commits (`flows.kafka.fencing`): an owner that has not released it holds it while its
process runs on this host, or, elsewhere, until its last commit is older than a running
instance lets pass (`fencing.holds`). A process of the group answering on its status API
(`--api`, or API_PORT) or a member in the group holds it too; a partition whose commit
names no owner (FENCING=false, another tool) is held while the group's commits move
during `--probe-s` seconds.

The reset commits with metadata of its own (`fencing.Reset`: `reset-by=es-sink`, its time
and host), which names no owner: an instance that finds it reads from there, at its next
check while it runs (`--force`) and at its start even over its recovery snapshot.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from flows.cli import common, control
from flows.cli.common import PartitionOffsets, Problem, Usage

if TYPE_CHECKING:
    from flows.config import Settings

PROBE_S = 12.0
"""Longer than the default epoch (`-s 10`), after which a reading flow commits."""

offsets_app = typer.Typer(
    help="Show or move the flow's consumer-group offsets.", no_args_is_help=True
)


@offsets_app.command("show")
def show(
    topic: str | None = typer.Option(None, "--topic", help="Only this topic."),
    partition: int | None = typer.Option(None, "--partition", min=0, help="Only this partition."),
    json_out: bool = common.JsonOpt,
) -> None:
    """The group's committed offset, the log start and end and the lag of each partition."""
    with common.errors_as_exits():
        settings = common.load_settings()
        parts = common.flow_partitions(settings, topic, partition)
        if json_out:
            common.emit_json(
                {
                    "group": settings.group_id,
                    "partitions": [{"topic": p.topic, **p.as_json()} for p in parts],
                }
            )
            return
        table = Table("topic", "partition", "low", "end", "committed", "committed lag",
                      title=f"group {settings.group_id}", title_justify="left")  # fmt: skip
        for p in parts:
            row = (p.topic, p.partition, p.low, p.end, _dash(p.committed), _dash(p.committed_lag))
            table.add_row(*map(common.cell, row))
        common.out.print(table)


def _dash(value: object) -> object:
    return "-" if value is None else value


def targets(
    settings: Settings, parts: list[PartitionOffsets], to: str
) -> dict[tuple[str, int], int]:
    """Where each partition goes: `earliest`, `latest`, an ISO-8601 time (the first offset
    at or after it, the end when there is none) or an offset (kept within the log)."""
    from confluent_kafka import TopicPartition

    spec = to.strip().lower()
    if spec == "earliest":
        return {(p.topic, p.partition): p.low for p in parts}
    if spec == "latest":
        return {(p.topic, p.partition): p.end for p in parts}
    if spec.lstrip("-").isdigit():
        wanted = int(spec)
        if wanted < 0:
            raise Usage(f"--to: an offset must not be negative, got {to}")
        return {(p.topic, p.partition): min(max(wanted, p.low), p.end) for p in parts}
    when = common.parse_time(to, "--to")
    c = common.consumer(settings)
    try:
        found = c.offsets_for_times(
            [TopicPartition(p.topic, p.partition, when) for p in parts],
            timeout=common.KAFKA_TIMEOUT_S,
        )
    finally:
        c.close()
    ends = {(p.topic, p.partition): p.end for p in parts}
    return {
        (tp.topic, tp.partition): tp.offset if tp.offset >= 0 else ends[(tp.topic, tp.partition)]
        for tp in found
    }


if TYPE_CHECKING:
    from flows.kafka.fencing import Owner, Reset

Holder = tuple["Owner", str, list[PartitionOffsets]]
"""An owner that holds partitions (`fencing.holds`), why, and which of them."""


def holders(parts: list[PartitionOffsets], now_ms: int) -> list[Holder]:
    """The owners that hold some of `parts`, per their committed metadata."""
    from flows.kafka.fencing import Owner, holds

    found: dict[str, Holder] = {}
    for p in parts:
        owner = Owner.parse(p.metadata) if p.committed is not None else None
        why = holds(owner, now_ms)
        if owner is not None and why is not None:
            found.setdefault(owner.token, (owner, why, []))[2].append(p)
    return list(found.values())


def _names(parts: list[PartitionOffsets]) -> str:
    return ", ".join(f"{p.topic}/{p.partition}" for p in parts)


def held(parts: list[PartitionOffsets], now_ms: int) -> list[str]:
    """One phrase per owner that holds some of `parts`: `t/0, t/2 are held by instance
    <token> (host h, …) since …: <why>`."""
    out = []
    for owner, why, mine in holders(parts, now_ms):
        verb = "is" if len(mine) == 1 else "are"
        out.append(f"{_names(mine)} {verb} held by instance {owner.describe()}: {why}")
    return out


def _ownerless(parts: list[PartitionOffsets]) -> list[PartitionOffsets]:
    """Partitions whose commit names no owner nor a reset: only their commits moving can
    tell that a flow reads them (FENCING=false, an earlier version, never committed)."""
    from flows.kafka.fencing import Owner, Reset

    return [p for p in parts if Owner.parse(p.metadata) is None and Reset.parse(p.metadata) is None]


def running(
    settings: Settings, parts: list[PartitionOffsets], api: list[str] | None, probe_s: float
) -> str | None:
    """Why an instance of the group may read some of `parts` (None when nothing says so)."""
    reasons = held(parts, int(time.time() * 1000))
    if reasons:
        return "; ".join(reasons)
    group = settings.group_id
    answers = control.statuses(settings, api)
    for a in answers:
        body = a.body or {}
        same = body.get("process", {}).get("group", group) == group
        if a.body is not None and same and body.get("state") in control.RUNNING_STATES:
            return f"a flow of it is running (the flow process at {a.url} is {body['state']})"
    state = _members(settings, group)
    if state:
        return f"a flow of it is running ({state})"
    silent = _ownerless(parts)
    if probe_s <= 0 or not silent:
        return None
    topics: dict[str, set[int]] = {}
    for p in silent:
        topics.setdefault(p.topic, set()).add(p.partition)
    before = {(p.topic, p.partition): p.committed for p in common.offsets(settings, group, topics)}
    time.sleep(probe_s)
    after = {(p.topic, p.partition): p.committed for p in common.offsets(settings, group, topics)}
    moved = sorted(f"{t}/{p}" for (t, p), o in after.items() if before.get((t, p)) != o)
    if moved:
        return (
            f"a flow of it is running (its committed offsets moved within {probe_s:g} s: "
            f"{', '.join(moved[:5])})"
        )
    return None


def _members(settings: Settings, group: str) -> str | None:
    client = common.admin(settings)
    try:
        desc = client.describe_consumer_groups([group])[group].result(common.KAFKA_TIMEOUT_S)
    except Exception:  # a group never committed to is fine to reset
        return None
    if desc.members:
        return f"the group has {len(desc.members)} active members ({desc.state.name.lower()})"
    return None


def alter(
    settings: Settings, parts: list[PartitionOffsets], to: dict[tuple[str, int], int]
) -> Reset:
    """Commit the new offsets for the group, marked as this reset's (`fencing.Reset`),
    each keeping the partition count the flow's VERSION=offset check reads."""
    import socket

    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    from flows.kafka.fencing import Reset, reset_metadata

    mark = Reset(int(time.time() * 1000), socket.gethostname() or "?")
    tps = [
        TopicPartition(
            p.topic, p.partition, to[(p.topic, p.partition)], reset_metadata(p.metadata, mark)
        )
        for p in parts
    ]
    client = common.admin(settings)
    request = ConsumerGroupTopicPartitions(settings.group_id, tps)
    future = client.alter_consumer_group_offsets([request])[settings.group_id]
    try:
        result = future.result(common.KAFKA_TIMEOUT_S)
    except Exception as e:
        raise Problem(
            f"KAFKA_GROUP_ID: Kafka refused the new offsets of {settings.group_id}: {e}"
        ) from None
    failed = [
        f"{tp.topic}/{tp.partition}: {tp.error}" for tp in result.topic_partitions if tp.error
    ]
    if failed:
        raise Problem(f"KAFKA_GROUP_ID: Kafka refused offsets ({'; '.join(failed)})")
    return mark


def followed(settings: Settings, held_by: list[Holder], mark: Reset) -> None:
    """After `--force`: wait until each instance that held a partition commits it under its
    own name, at most its lease. One that keeps the reset's fields followed it; one that
    does not committed its position over it (an earlier version, or its commit crossed the
    reset's): Problem. One that commits nothing within its lease is gone or stuck."""
    from flows.kafka.fencing import Owner, Reset

    waiting = {(p.topic, p.partition): owner for owner, _, mine in held_by for p in mine}
    deadline = time.monotonic() + max(owner.lease_s for owner, _, _ in held_by)
    overwritten: list[str] = []
    while waiting:
        topics: dict[str, set[int]] = {}
        for t, n in waiting:
            topics.setdefault(t, set()).add(n)
        for p in common.offsets(settings, settings.group_id, topics):
            key = (p.topic, p.partition)
            owner, found = Owner.parse(p.metadata), Reset.parse(p.metadata)
            if owner is None and found == mark:
                continue  # not checked yet
            del waiting[key]
            if owner is not None and found == mark:
                common.err.print(
                    f"es-sink: --force: instance {owner.token} reads {p.topic}/{p.partition} "
                    f"from the new offset (committed {p.committed})",
                    highlight=False,
                    markup=False,
                )
            else:
                who = f"instance {owner.describe()}" if owner is not None else "another tool"
                overwritten.append(
                    f"{who} committed {p.topic}/{p.partition} at {p.committed} over the reset"
                )
        if waiting and time.monotonic() > deadline:
            for (t, n), owner in waiting.items():
                common.err.print(
                    f"es-sink: --force: instance {owner.token} did not commit {t}/{n} within "
                    f"its lease of {owner.lease_s:g} s (stopped, or stuck); the reset stands",
                    highlight=False,
                    markup=False,
                )
            break
        if waiting:
            time.sleep(0.5)
    if overwritten:
        raise Problem(
            f"KAFKA_GROUP_ID: {'; '.join(overwritten)} (an earlier version, or a commit that "
            "crossed the reset's); stop every process first, then reset again"
        )


@offsets_app.command("reset")
def reset(
    to: str = typer.Option(..., "--to", help="earliest, latest, an ISO-8601 time or an offset."),
    topic: str | None = typer.Option(None, "--topic", help="Only this topic."),
    partition: int | None = typer.Option(None, "--partition", min=0, help="Only this partition."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would change; change nothing."),
    api: list[str] | None = control.ApiOpt,
    probe_s: float = typer.Option(
        PROBE_S,
        "--probe-s",
        min=0,
        help="For partitions whose commit names no owner, watch the commits this long.",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Move them even while an instance holds them: it reads from there at its next "
        "check (within an epoch).",
    ),
    json_out: bool = common.JsonOpt,
) -> None:
    """Move the group's committed offsets (refused while an instance of the group holds
    them, unless --force)."""
    with common.errors_as_exits():
        settings = common.load_settings()
        parts = common.flow_partitions(settings, topic, partition)
        new = targets(settings, parts, to)
        if not dry_run:
            why = running(settings, parts, api, probe_s) if not force else None
            if why is not None:
                raise Problem(
                    f"KAFKA_GROUP_ID: refusing to move the offsets of group {settings.group_id}: "
                    f"{why}; stop every process first, or pass --force"
                )
            held_by = holders(parts, int(time.time() * 1000)) if force else []
            for owner, why, mine in held_by:
                common.err.print(
                    f"es-sink: --force: {_names(mine)} held by instance {owner.describe()}: "
                    f"{why}; waiting up to {owner.lease_s:g} s for it to read from the new "
                    "offset (at its next check, within an epoch)",
                    highlight=False,
                    markup=False,
                )
            mark = alter(settings, parts, new)
        changes = [
            {
                "topic": p.topic,
                "partition": p.partition,
                "from": p.committed,
                "to": new[(p.topic, p.partition)],
            }
            for p in parts
        ]
        if json_out:
            common.emit_json(
                {"group": settings.group_id, "to": to, "dry_run": dry_run, "changes": changes}
            )
        else:
            verb = "would move" if dry_run else "moved"
            for c in changes:
                common.out.print(
                    f"{verb} {c['topic']}/{c['partition']}: {_dash(c['from'])} -> {c['to']}",
                    highlight=False,
                    markup=False,
                )
        if not dry_run and held_by:
            followed(settings, held_by, mark)
