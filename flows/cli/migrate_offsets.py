"""`es-sink migrate offsets`: copy a Kafka Connect sink connector's committed offsets (its
consumer group, `connect-<name>`) to the flow's group, so that the flow reads exactly the
records after those the connector committed.

The copy is refused while either group may still commit: it has members (a running or
paused connector's task stays a member; a stopped one leaves) or its members cannot be told,
an instance of the flow holds one of its partitions (`fencing.holds`: the source group too
when going back), or its commits move during the probe or differ, at the probe's last read,
from those the plan read (what is copied is what was seen settled). Into the flow's group it
commits as `es-sink offsets reset` does (`fencing.Reset`, plus `migrated-from=<group>` and the
partition count a flow's commit carries): no owner is named, so the next instance waits for
none (but for the bulks of an owner that had not released the partition, `reset-after`), and
it reads from these offsets at start even over a recovery directory's snapshot. A partition
the connector never committed gets no commit: the flow starts it per KAFKA_AUTO_OFFSET_RESET
(and its rule for partitions of a group that has read others).

Copied to any other group (`--to-group`, going back to the connector), the commits carry no
metadata, as Kafka Connect's own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flows.cli import common
from flows.cli.common import PartitionOffsets, Problem

if TYPE_CHECKING:
    from flows.config import Settings
    from flows.kafka.fencing import Reset

PROBE_S = 12.0
"""How long both groups' commits are watched before the copy (a flow commits about once an
epoch; a Connect worker every offset.flush.interval.ms, 60 s by default: its group's
membership is what tells that it runs)."""


@dataclass(frozen=True)
class Change:
    """One partition: what the connector committed, what the target group holds, and where
    the flow will start it."""

    topic: str
    partition: int
    low: int
    end: int
    source: int | None
    """The source group's committed offset (None: never committed)."""
    before: int | None
    """The target group's committed offset before the copy."""
    to: int | None
    """The offset committed to the target group (None: nothing committed)."""
    start: str
    """`committed` (from `to`), `kept` (the target's own commit), `earliest` or `latest`."""
    why: str = ""
    previous: str = ""
    """The target group's commit metadata before the copy (what a reset's commit keeps)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "source": self.source,
            "from": self.before,
            "to": self.to,
            "start": self.start,
            "low": self.low,
            "end": self.end,
            "note": self.why,
        }


def plan(settings: Settings, source: str, target: str) -> list[Change]:
    """Per partition of the flow's topics: the source group's offset, copied."""
    topics = common.flow_topics(settings)
    src = {(p.topic, p.partition): p for p in common.offsets(settings, source, topics)}
    dst = {(p.topic, p.partition): p for p in common.offsets(settings, target, topics)}
    if not any(p.committed is not None for p in src.values()):
        raise Problem(
            f"--from-group: group {source} has no committed offset for the flow's topics "
            f"({', '.join(topics)}): is it the connector's group (connect-<name>)?"
        )
    read = {k for k, p in src.items() if p.committed is not None} | {
        k for k, p in dst.items() if p.committed is not None
    }
    out = []
    for key in sorted(src):
        s, d = src[key], dst[key]
        if s.committed is not None:
            why = ""
            if s.committed < s.low:
                why = (
                    f"below the log start {s.low}: the flow reads from {s.low}, the records "
                    "between were deleted unread"
                )
            elif s.committed > s.end:
                why = f"above the log end {s.end}: the topic was recreated or truncated?"
            out.append(
                Change(
                    *key,
                    s.low,
                    s.end,
                    s.committed,
                    d.committed,
                    s.committed,
                    "committed",
                    why,
                    d.metadata if d.committed is not None else "",
                )
            )
        elif d.committed is not None:
            why = f"never committed by {source}; {target} keeps its own commit"
            out.append(Change(*key, s.low, s.end, None, d.committed, None, "kept", why))
        else:
            start, why = _auto(settings, key, read, source)
            out.append(Change(*key, s.low, s.end, None, None, None, start, why))
    return out


def _auto(
    settings: Settings, key: tuple[str, int], read: set[tuple[str, int]], source: str
) -> tuple[str, str]:
    """Where the flow starts a partition nobody committed (`discovery.earliest_reason`)."""
    reset = settings.auto_offset_reset
    never = f"never committed by {source}"
    if reset == "earliest":
        return "earliest", f"{never}: the flow starts it at earliest (KAFKA_AUTO_OFFSET_RESET)"
    others = [k for k in read if k != key]
    if others:
        return (
            "earliest",
            f"{never}: the flow starts it at earliest, not latest: its group has committed "
            "offsets of the flow's other partitions, so it takes this one for a partition "
            "added since (KAFKA_AUTO_OFFSET_RESET)",
        )
    return "latest", f"{never}: the flow starts it at latest (KAFKA_AUTO_OFFSET_RESET)"


def refusal(
    settings: Settings, source: str, target: str, changes: list[Change], probe_s: float
) -> str | None:
    """Why the offsets must not be copied now (None: nothing says a group still commits)."""
    for group, role, option in (
        (source, "the connector's", "--from-group"),
        (target, "the target", "--to-group"),
    ):
        members = _members(settings, group, option)
        if members:
            hint = (
                "stop the connector first (PUT /connectors/<name>/stop; a paused connector's "
                "task stays a member)"
                if group == source
                else "stop its consumers first"
            )
            return f"{role} group {group} has {members}; {hint}"
    for group in (source, target):
        holders = _holders(settings, group, changes)
        if holders:
            return (
                f"an instance of the flow holds {holders} in group {group}; stop it first (a "
                "clean stop releases its partitions)"
            )
    topics: dict[str, set[int]] = {}
    for c in changes:
        topics.setdefault(c.topic, set()).add(c.partition)
    before = _commits(settings, (source, target), topics) if probe_s > 0 else None
    if before is not None:
        time.sleep(probe_s)
    after = _commits(settings, (source, target), topics)
    if before is not None:
        moved = sorted(
            f"{g} {t}/{p}" for (g, t, p), o in after.items() if before.get((g, t, p)) != o
        )
        if moved:
            return (
                f"committed offsets moved within {probe_s:g} s ({', '.join(moved[:5])}): "
                "something still commits for the group"
            )
    # The plan read the commits before the probe: copy only what the probe saw settled.
    stale = [
        f"{g} {c.topic}/{c.partition}"
        for c in changes
        for g, planned in ((source, c.source), (target, c.before))
        if after.get((g, c.topic, c.partition)) != planned
    ]
    if stale:
        return (
            f"committed offsets moved after they were read ({', '.join(stale[:5])}): "
            "something still committed for the group; run it again"
        )
    return None


def _members(settings: Settings, group: str, option: str, tries: int = 3) -> str | None:
    """The group's members, or None when it has none. Only a group Kafka says does not
    exist has none: any other error describing it (no access, no coordinator) is a
    Problem, as a group not known to be empty may still commit."""
    from confluent_kafka import KafkaError, KafkaException

    from flows.kafka.topics import COORDINATOR_LOADING

    client = common.admin(settings)
    for attempt in range(1, tries + 1):
        try:
            desc = client.describe_consumer_groups([group])[group].result(common.KAFKA_TIMEOUT_S)
            break
        except KafkaException as e:
            err = e.args[0]
            if err.code() == KafkaError.GROUP_ID_NOT_FOUND:
                return None
            again = err.retriable() or err.code() in (KafkaError._TIMED_OUT, *COORDINATOR_LOADING)
            why = err.str()
        except TimeoutError:  # the future's own wait: no answer at all
            again, why = True, f"no answer within {common.KAFKA_TIMEOUT_S:g} s"
        if attempt == tries or not again:
            raise Problem(
                f"{option}: cannot tell whether group {group} has members "
                f"(describing it failed: {why}); refusing to copy"
            ) from None
    if desc.members:
        return f"{len(desc.members)} active members ({desc.state.name.lower()})"
    return None


def _holders(settings: Settings, group: str, changes: list[Change]) -> str:
    """The group's partitions whose commit names a flow instance that may still read them
    (`fencing.holds`)."""
    from flows.kafka.fencing import Owner, holds

    topics: dict[str, set[int]] = {}
    for c in changes:
        topics.setdefault(c.topic, set()).add(c.partition)
    now_ms = int(time.time() * 1000)
    held = []
    for p in common.offsets(settings, group, topics):
        owner = Owner.parse(p.metadata) if p.committed is not None else None
        why = holds(owner, now_ms)
        if owner is not None and why is not None:
            held.append(f"{p.topic}/{p.partition} (owner {owner.describe()}: {why})")
    return ", ".join(held[:5])


def _commits(
    settings: Settings, groups: tuple[str, ...], topics: dict[str, set[int]]
) -> dict[tuple[str, str, int], int | None]:
    out: dict[tuple[str, str, int], int | None] = {}
    for group in groups:
        for p in common.offsets(settings, group, topics):
            out[(group, p.topic, p.partition)] = p.committed
    return out


def metadata(
    settings: Settings, target: str, source: str, partitions: int, previous: str, mark: Reset
) -> str:
    """What a copied commit carries: into the flow's group, a reset's metadata over the
    group's `previous` commit (`fencing.reset_metadata`: its generation and a recorded pause
    kept, no owner), the topic's partition count, and where it came from; nothing into any
    other group."""
    from flows.kafka.fencing import metadata_fields, reset_metadata

    if target != settings.group_id:
        return ""
    text = reset_metadata(previous, mark)
    if "partitions" not in metadata_fields(text):
        head, _, rest = text.partition(" ")
        text = f"{head} partitions={partitions} {rest}"
    return f"{text} migrated-from={source}"


def apply(settings: Settings, source: str, target: str, changes: list[Change]) -> None:
    """Commit the copied offsets to `target` (Problem when Kafka refuses any)."""
    import socket

    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    from flows.kafka.fencing import Reset

    mark = Reset(int(time.time() * 1000), socket.gethostname() or "?")
    counts: dict[str, int] = {}
    for topic, parts in common.flow_topics(settings).items():
        counts[topic] = len(parts)
    tps = [
        TopicPartition(
            c.topic,
            c.partition,
            c.to,
            metadata(settings, target, source, counts[c.topic], c.previous, mark),
        )
        for c in changes
        if c.start == "committed" and c.to is not None
    ]
    if not tps:
        return
    client = common.admin(settings)
    future = client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(target, tps)])[
        target
    ]
    try:
        result = future.result(common.KAFKA_TIMEOUT_S)
    except Exception as e:
        raise Problem(f"--to-group: Kafka refused the offsets of {target}: {e}") from None
    failed = [
        f"{tp.topic}/{tp.partition}: {tp.error}" for tp in result.topic_partitions if tp.error
    ]
    if failed:
        raise Problem(f"--to-group: Kafka refused offsets ({'; '.join(failed)})")


__all__ = ["PROBE_S", "Change", "PartitionOffsets", "apply", "plan", "refusal"]
