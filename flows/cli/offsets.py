"""`es-sink offsets show` and `es-sink offsets reset`: the flow's consumer-group offsets,
like `kafka-consumer-groups --reset-offsets` and Kafka Connect's offsets API.

A reset while a flow of the group runs would be undone by its next commit (each source
partition commits its own position), so `reset` refuses when it sees one: a process of the
group answering on its status API (`--api`, or API_PORT: authoritative when set), a member
in the group (other consumers), or, without a status API, the group's committed offsets
moving during `--probe-s` seconds (a flow reads through `assign()` and is never a group
member; it commits about once an epoch while it has records to read).
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


def running(settings: Settings, api: list[str] | None, probe_s: float) -> str | None:
    """Why a flow of the group seems to run (None when nothing says so)."""
    group = settings.group_id
    answers = control.statuses(settings, api)
    for a in answers:
        body = a.body or {}
        same = body.get("process", {}).get("group", group) == group
        if a.body is not None and same and body.get("state") in control.RUNNING_STATES:
            return f"the flow process at {a.url} is {body['state']}"
    state = _members(settings, group)
    if state:
        return state
    if answers and not api:  # API_PORT is set and no process of it answers
        return None
    if probe_s <= 0:
        return None
    topics = common.flow_topics(settings)
    before = {(p.topic, p.partition): p.committed for p in common.offsets(settings, group, topics)}
    time.sleep(probe_s)
    after = {(p.topic, p.partition): p.committed for p in common.offsets(settings, group, topics)}
    moved = sorted(f"{t}/{p}" for (t, p), o in after.items() if before.get((t, p)) != o)
    if moved:
        return f"its committed offsets moved within {probe_s:g} s ({', '.join(moved[:5])})"
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
) -> None:
    """Commit the new offsets for the group, each keeping the metadata the flow committed
    with it (the partition count the flow's VERSION=offset check reads)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    tps = [
        TopicPartition(p.topic, p.partition, to[(p.topic, p.partition)], p.metadata) for p in parts
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


@offsets_app.command("reset")
def reset(
    to: str = typer.Option(..., "--to", help="earliest, latest, an ISO-8601 time or an offset."),
    topic: str | None = typer.Option(None, "--topic", help="Only this topic."),
    partition: int | None = typer.Option(None, "--partition", min=0, help="Only this partition."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would change; change nothing."),
    api: list[str] | None = control.ApiOpt,
    probe_s: float = typer.Option(
        PROBE_S, "--probe-s", min=0, help="Without a status API, watch the commits this long."
    ),
    json_out: bool = common.JsonOpt,
) -> None:
    """Move the group's committed offsets (refused while a flow of the group runs)."""
    with common.errors_as_exits():
        settings = common.load_settings()
        parts = common.flow_partitions(settings, topic, partition)
        new = targets(settings, parts, to)
        if not dry_run:
            why = running(settings, api, probe_s)
            if why is not None:
                raise Problem(
                    f"KAFKA_GROUP_ID: refusing to move the offsets of group {settings.group_id}: "
                    f"a flow of it is running ({why}); stop every process first"
                )
            alter(settings, parts, new)
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
            return
        verb = "would move" if dry_run else "moved"
        for c in changes:
            common.out.print(
                f"{verb} {c['topic']}/{c['partition']}: {_dash(c['from'])} -> {c['to']}",
                highlight=False,
                markup=False,
            )
