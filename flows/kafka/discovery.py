"""Kafka partitions that appear or disappear between and during executions.

Bytewax lists a source's partitions once per execution, so a
partition added to a topic, or a new topic matching KAFKA_TOPICS_REGEX, would be read only
after a restart by hand, and from `latest` it would skip what was written to it before.
Here:

- a watcher thread per process (KAFKA_METADATA_REFRESH_S) compares the topics and
  partitions with those this execution listed. On a change it logs one line and drains the
  flow like SIGTERM (`flows.runtime.shutdown.request`); once the dataflow has finished cleanly, the
  process executes its own command line again (`os.execv`, same pid), which lists the new
  partitions. Every process of a cluster runs its own watcher, so all of them restart.
  Never after a failure, a signal or PUT /stop, or when not started by `python -m
  bytewax.run`. The operator's restart (PUT /restart, `request_restart`) is the same drain
  and the same execution.
- a partition without a snapshot or committed offset, of a group that has committed
  offsets for this flow's topics, appeared after the group began: it starts at its
  earliest offset even under KAFKA_AUTO_OFFSET_RESET=latest (`earliest_reason`).
- a partition added to a topic the group already read (no committed offset while older
  partitions of the topic have one) reads and commits nothing until the group's committed
  offsets of those older partitions reach the end offsets they had when this execution
  started (`find_grown`, `NewPartitionHold`). Producers place a key by `hash(key) % N`, so
  adding partitions moves about half of the keys: their older writes wait in the older
  partitions' backlog while the newer ones go to the new partition. Committing nothing
  while held keeps the hold over a restart or a crash: the next start finds the partition
  new again, with later end offsets. A producer that learns the new partition count late
  can still write a moved key to its old partition after that point: this narrows the
  window, only VERSION=header:<name> closes it.
- VERSION=offset compares offsets, which only one partition orders: unless every record
  is its own document (DOC_ID=coordinates), a start refuses a topic of more than one
  partition and partitions added while running stop the flow (`VERSION_FIX`); a start
  also refuses a recreated or truncated topic (`check_start`).
- a partition a recovery store holds but this run does not read (topic no longer
  configured) must still be listed, or Bytewax cannot resume from the store: it becomes
  a `RetiredPartition`.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast

from bytewax.inputs import StatefulSourcePartition
from confluent_kafka import OFFSET_END, Consumer, KafkaException, Message, TopicPartition

from flows.config import Settings
from flows.errors import ConfigError
from flows.kafka.fencing import CHECK_TIMEOUT_S, metadata_fields, unread
from flows.kafka.topics import committed, find_topics
from flows.runtime import control, lifecycle, shutdown
from flows.runtime.args import restart_argv
from flows.runtime.recovery_store import SOURCE_KEY, stored_keys

logger = logging.getLogger(__name__)

VERSION_FIX = (
    "offsets of different partitions are not comparable: a key written to two partitions "
    "(a producer's choice, or partitions added) can have its newer write lose to an older "
    "one with a higher offset; use VERSION=none or VERSION=header:<name>, or "
    "DOC_ID=coordinates (a document per record)"
)


def offsets_compared_across_partitions(settings: Settings) -> bool:
    """VERSION=offset with ids a key shares across partitions (DOC_ID=key): the versions
    of one document may then come from two partitions' offsets."""
    return settings.version == "offset" and settings.doc_id != "coordinates"


Partitions = Mapping[str, Sequence[int]]


# -- what changed


@dataclass(frozen=True)
class Change:
    """What the broker has that the execution did not list."""

    topics: dict[str, list[int]] = field(default_factory=dict)
    """New topics (matching KAFKA_TOPICS_REGEX) and their partitions."""
    partitions: dict[str, list[int]] = field(default_factory=dict)
    """New partitions of topics already read."""

    def __bool__(self) -> bool:
        return bool(self.topics or self.partitions)

    def describe(self) -> str:
        """`partitions 1, 2 of topic a; topic b (partitions 0-3)`."""
        parts = [f"partitions {_ints(ps)} of topic {t}" for t, ps in self.partitions.items()]
        parts += [f"topic {t} (partitions {_ints(ps)})" for t, ps in self.topics.items()]
        return "; ".join(parts)


def diff(listed: Partitions, live: Partitions) -> Change:
    """What `live` (the broker now) adds to `listed`; what disappeared is not a change here
    (a deleted topic makes its consumers fail, which the source reports)."""
    topics: dict[str, list[int]] = {}
    partitions: dict[str, list[int]] = {}
    for topic, now in sorted(live.items()):
        if topic not in listed:
            topics[topic] = sorted(now)
        elif added := sorted(set(now) - set(listed[topic])):
            partitions[topic] = added
    return Change(topics, partitions)


def _ints(values: Iterable[int]) -> str:
    vs = sorted(values)
    if len(vs) > 2 and vs == list(range(vs[0], vs[-1] + 1)):
        return f"{vs[0]}-{vs[-1]}"
    return ", ".join(map(str, vs))


# -- per execution


@dataclass
class _Execution:
    listed: dict[str, set[int]] = field(default_factory=dict)
    watching: bool = False
    started: bool = False  # `check_start` ran
    grown: Grown = field(default_factory=dict)
    restart: bool = False
    fatal: str | None = None


_lock = threading.Lock()
_start_lock = threading.Lock()  # `check_start`: one worker looks, the others wait for it
_executions: dict[Settings, _Execution] = {}  # Settings hash by identity
_exit_hook = False
_restart_asked = False  # the operator asked for a restart (`request_restart`)


def _hook_exit() -> None:
    """Register `_at_exit` once (call with `_lock` held)."""
    global _exit_hook
    if not _exit_hook:
        atexit.register(_at_exit)
        _exit_hook = True


def watch(settings: Settings, found: Partitions) -> None:
    """Record what a worker listed and start this process's watcher (once); from
    `KafkaSource.list_parts`, which Bytewax calls on every worker at execution time."""
    with _lock:
        ex = _executions.setdefault(settings, _Execution())
        for topic, parts in found.items():
            ex.listed.setdefault(topic, set()).update(parts)
        start = settings.kafka_metadata_refresh_s > 0 and not ex.watching
        ex.watching = ex.watching or start
        _hook_exit()
    if start:
        threading.Thread(
            target=_watch, args=(settings, ex), name="es-sink-metadata", daemon=True
        ).start()


def listed(settings: Settings) -> dict[str, list[int]] | None:
    """The partitions this process's workers listed for `settings` (None before any)."""
    with _lock:
        ex = _executions.get(settings)
        return None if ex is None else {t: sorted(ps) for t, ps in ex.listed.items()}


def _watch(settings: Settings, ex: _Execution) -> None:
    period = settings.kafka_metadata_refresh_s
    seen: dict[str, list[int]] = {}
    last_error = ""
    stop = threading.Event()
    # Every process of a cluster looks at the same wall-clock moments, so all of them see a
    # change within about one look-up of each other (their drains then overlap).
    while not stop.wait(period - time.time() % period):
        if shutdown.requested():
            return  # stopping anyway (a signal, or another part of the flow)
        for topic, parts in (listed(settings) or {}).items():  # every worker's listing
            seen[topic] = sorted(set(seen.get(topic, ())) | set(parts))
        try:
            live = find_topics(settings)
        except Exception as e:  # a broker away must not end the watching
            if str(e) != last_error:
                logger.warning("KAFKA_METADATA_REFRESH_S: cannot list the topics: %s", e)
                last_error = str(e)
            continue
        change = diff(seen, live)
        if change and _act(settings, ex, change):
            return
        seen = {t: sorted(set(seen.get(t, ())) | set(ps)) for t, ps in live.items()}


def _act(settings: Settings, ex: _Execution, change: Change) -> bool:
    """Stop for a restart (True), stop for good under VERSION=offset (True), or only say
    what appeared when this process cannot restart itself (False)."""
    what = change.describe()
    if offsets_compared_across_partitions(settings):
        # Partitions added, or a new topic (KAFKA_TOPICS_REGEX) the start would refuse.
        wide = {t: ps for t, ps in change.topics.items() if len(ps) > 1}
        if change.partitions or wide:
            spread = [f"partitions were added to topic {t}" for t in change.partitions]
            spread += [f"topic {t} appeared with {len(ps)} partitions" for t, ps in wide.items()]
            ex.fatal = f"VERSION=offset: {'; '.join(spread)}; {VERSION_FIX}"
            shutdown.request(f"{ex.fatal}; stopping")
            return True
    if settings.stop_at_end or restart_argv() is None:
        why = "KAFKA_STOP_AT_END" if settings.stop_at_end else "not started by bytewax.run"
        logger.warning(
            "Kafka: %s appeared; not read by this run (%s), the next run reads them from "
            "their beginning",
            what,
            why,
        )
        return False
    ex.restart = True
    # The dataflow ends once every process of the cluster drained: allow the others one
    # more look-up to notice.
    grace = settings.kafka_metadata_refresh_s
    shutdown.request(
        f"Kafka: {what} appeared; restarting to read them", grace_s=grace, cause="new partitions"
    )
    return True


def request_restart(reason: str, cause: str, grace_s: float) -> str | None:
    """The operator's restart (PUT /restart): drain like SIGTERM, then, once the dataflow
    finished cleanly, execute the same command line again (same pid, environment and
    arguments; settings files and code are read again). None when begun, else why not."""
    global _restart_asked
    if restart_argv() is None:
        return (
            "this process was not started by `python -m bytewax.run` and cannot execute "
            "itself again: stop it and start it"
        )
    with _lock:
        if shutdown.requested():
            return "a stop is under way already"
        _restart_asked = True
        _hook_exit()
    if not shutdown.request(reason, grace_s=grace_s, cause=cause):
        return "a stop is under way already"  # begun between the look and the request
    return None


# -- at exit

Action = Literal["restart", "fail", "exit"]


def exit_action(*, failed: bool, signalled: bool, restart: bool, fatal: bool) -> Action:
    """What a process does once Bytewax returned or raised: a failure keeps its status and
    traceback; a VERSION=offset stop fails; a signal means the operator wants it gone."""
    if failed:
        return "exit"
    if fatal:
        return "fail"
    if signalled:
        return "exit"
    return "restart" if restart else "exit"


def _at_exit() -> None:
    failed = getattr(sys, "last_value", None) is not None  # set before atexit handlers run
    shutdown.returned()
    with _lock:
        executions = list(_executions.items())
    if not failed and not shutdown.requested():
        # The dataflow ended without this process asking: peers drained for a change that
        # this process's watcher has not seen yet. Look once more.
        for settings, ex in executions:
            if settings.kafka_metadata_refresh_s > 0 and not settings.stop_at_end:
                try:
                    change = diff(listed(settings) or {}, find_topics(settings))
                except (ConfigError, KafkaException):
                    continue
                if change:
                    _act(settings, ex, change)
    fatal = next((ex.fatal for _, ex in executions if ex.fatal), None)
    action = exit_action(
        failed=failed,
        signalled=shutdown.wanted_gone(),
        restart=_restart_asked or any(ex.restart for _, ex in executions),
        fatal=fatal is not None,
    )
    if action == "exit":
        return
    if action == "restart":
        argv = restart_argv()
        if argv is None:
            return
        if shutdown.wanted_gone():  # a signal while deciding: the operator wants it gone
            return
        if executions:
            lifecycle.log_restart(executions[0][0])
        logger.warning("restarting the flow with the same command line: %s", " ".join(argv))
        shutdown.flush_logs()
        os.execv(sys.executable, argv)  # noqa: S606 (our own command line, no shell)
    logger.error("es_sink: %s", fatal)
    shutdown.flush_logs()
    os._exit(1)


# -- where a partition starts


def earliest_reason(
    consumer: Consumer, settings: Settings, topic: str, partition: int
) -> str | None:
    """Why a partition with no snapshot and no committed offset starts at its earliest
    offset under KAFKA_AUTO_OFFSET_RESET=latest: the group has committed offsets for its
    topic, or for another topic of this flow, so the partition (or topic) appeared after
    the group began and `latest` would skip what was written to it before this run."""
    flow = listed(settings) or {}
    if topic not in flow:
        meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
        flow[topic] = sorted(meta.partitions) if meta is not None else []
    others = [
        TopicPartition(t, p) for t, ps in flow.items() for p in ps if (t, p) != (topic, partition)
    ]
    if not others:
        return None
    # An owner's announcement at its start offset (`fencing.unread`) is no sign of a read.
    done = [tp for tp in committed(consumer, others) if tp.offset >= 0 and not unread(tp.metadata)]
    group = settings.group_id
    if any(tp.topic == topic for tp in done):
        return f"new partition: group {group} has committed offsets for other partitions of {topic}"
    if done:
        return f"new topic: group {group} has committed offsets for topic {done[0].topic}"
    return None


def check_start(settings: Settings, found: Partitions) -> None:
    """Once per execution, before any partition is built (the entry point, then every
    worker's `KafkaSource.list_parts`): refuse what VERSION=offset cannot order
    (`offsets_comparable`), find the partitions to hold (`find_grown`) and start paused
    if the group's commits record a pause (`restore_pause`)."""
    with _start_lock:
        with _lock:
            ex = _executions.setdefault(settings, _Execution())
            if ex.started:
                return
        offsets_comparable(settings, found)
        grown = find_grown(settings, found)
        restore_pause(settings, found)
        with _lock:
            ex.grown, ex.started = grown, True


def started(settings: Settings) -> bool:
    """Whether `check_start` has run for `settings`: the start has read the group's commits
    (a recorded pause is in force from then on)."""
    with _lock:
        ex = _executions.get(settings)
        return ex is not None and ex.started


def restore_pause(settings: Settings, found: Partitions) -> None:
    """Start paused when the committed metadata of any partition of the flow's topics
    records a pause (`flows.runtime.control`): every partition, not only this process's, so that
    every process of a cluster honours it whatever the layout it was paused in."""
    tps = [TopicPartition(t, p) for t, ps in found.items() for p in ps]
    if not tps:
        return
    consumer = group_consumer(settings)
    try:
        answer = committed(consumer, tps)
    finally:
        consumer.close()
    control.restore((tp.metadata for tp in answer if tp.offset >= 0), settings.group_id)


def offsets_comparable(settings: Settings, found: Partitions) -> None:
    """VERSION=offset: refuse topics whose offsets do not order the writes to one
    document: more than one partition (unless DOC_ID=coordinates), or a committed offset
    above the log end (the topic was recreated or truncated, its new offsets start
    lower). ConfigError naming VERSION and the topic."""
    if settings.version != "offset":
        return
    if offsets_compared_across_partitions(settings):
        for topic, parts in found.items():
            if len(parts) > 1:
                msg = (
                    f"VERSION: topic {topic} has {len(parts)} partitions and VERSION=offset "
                    f"with DOC_ID={settings.doc_id}; {VERSION_FIX}"
                )
                raise ConfigError(msg)
    consumer = group_consumer(settings)
    try:
        _check_offsets(consumer, settings.group_id, found)
    finally:
        consumer.close()


def group_consumer(settings: Settings) -> Consumer:
    """A consumer of the flow's group that only asks (committed and end offsets): it never
    reads, commits or joins the group."""
    overrides = {"group.id": settings.group_id, "enable.auto.commit": "false"}
    return Consumer(settings.librdkafka("consumer", None, **overrides))


_PARTITIONS = "es-sink partitions="


def commit_metadata(settings: Settings, topic: str) -> str:
    """What a commit of `topic` carries: its partition count as this execution listed it,
    a record of the topic's shape for whoever reads the group's offsets."""
    parts = (listed(settings) or {}).get(topic)
    return f"{_PARTITIONS}{len(parts)}" if parts else ""


def _listed_count(metadata: str | None) -> int:
    """The partition count a commit's metadata names (`commit_metadata`; 0: none)."""
    count = metadata_fields(metadata).get("partitions", "")
    return int(count) if count.isdigit() else 0


def _check_offsets(consumer: Consumer, group: str, found: Partitions) -> None:
    tps = [TopicPartition(t, p) for t, ps in found.items() for p in ps]
    for tp in committed(consumer, tps):
        if tp.offset < 0:
            continue
        _, high = consumer.get_watermark_offsets(tp, timeout=30)
        if tp.offset > high:
            origin = f"group {group} committed offset"
            raise above_log_end(tp.topic, tp.partition, tp.offset, origin, high)


_REUSED_OFFSETS = (
    "would lose to the versions already indexed: use VERSION=none or VERSION=header:<name>, "
    "or a new index (a new group alone does not help: the old documents keep their versions)"
)


def above_log_end(topic: str, partition: int, offset: int, origin: str, high: int) -> ConfigError:
    """VERSION=offset and a start offset above the log end: the topic was recreated or
    truncated, so its new offsets are lower than the versions already indexed."""
    return ConfigError(
        f"VERSION: topic {topic} partition {partition}: the {origin} {offset} is above the "
        f"log end {high} (the topic was recreated or truncated?); its new offsets "
        f"{_REUSED_OFFSETS}"
    )


def cut_back(topic: str, partition: int, offset: int) -> ConfigError:
    """VERSION=offset and a log cut back below the read position (an unclean leader
    election): the offsets below it may hold new records, lower than the versions indexed."""
    return ConfigError(
        f"VERSION: topic {topic} partition {partition}: the log was cut back below the read "
        f"position {offset} (an unclean leader election?); the new records at its offsets "
        f"{_REUSED_OFFSETS}"
    )


# -- partitions added to a topic the group already read

Grown = dict[tuple[str, int], dict[int, int]]
"""(topic, new partition) -> {older partition: its end offset at start}, for the older
partitions whose committed offset was below their end."""


def _behind(committed: int, end: int) -> bool:
    return max(committed, 0) < end  # no committed offset (-1001): nothing read yet


def find_grown(settings: Settings, found: Partitions) -> Grown:
    """The partitions added to a topic while the group had not read its older partitions
    to their ends, each with those partitions' end offsets now.

    New: no committed offset while partitions of its topic have one (a partition that reads
    commits in its first epoch; a held one commits nothing). Older: those with a committed
    offset and, for a partition at or above the partition count their commits name (added
    by a later change), the new partitions below that count, still held for an earlier
    change. A partition added to a topic whose older partitions are all read to their end
    reads at once."""
    wide = {t: sorted(ps) for t, ps in found.items() if len(ps) > 1}
    if not wide:
        return {}
    olders: dict[tuple[str, int], list[int]] = {}
    consumer = group_consumer(settings)
    try:
        tps = [TopicPartition(t, p) for t, ps in wide.items() for p in ps]
        done = {(tp.topic, tp.partition): tp for tp in committed(consumer, tps)}
        for topic, parts in wide.items():
            read = [p for p in parts if done[topic, p].offset >= 0]
            new = [p for p in parts if done[topic, p].offset < 0]
            count = max((_listed_count(done[topic, p].metadata) for p in read), default=0)
            for p in new if read else ():
                olders[topic, p] = read + [q for q in new if q < count <= p]
        wanted = sorted({(t, q) for (t, _), qs in olders.items() for q in qs})
        asked = [TopicPartition(t, q, OFFSET_END) for t, q in wanted]
        ends: dict[tuple[str, int], int] = {}
        for tp in consumer.offsets_for_times(asked, timeout=30) if asked else ():
            if tp.error is not None:
                raise KafkaException(tp.error)
            ends[tp.topic, tp.partition] = tp.offset
    finally:
        consumer.close()
    grown: Grown = {}
    for (topic, p), qs in olders.items():
        behind = {q: ends[topic, q] for q in qs if _behind(done[topic, q].offset, ends[topic, q])}
        if behind:
            grown[topic, p] = behind
    return grown


def new_partition_hold(settings: Settings, topic: str, partition: int) -> NewPartitionHold | None:
    """The hold of a partition `check_start` found new (None: it reads at once)."""
    with _lock:
        ex = _executions.get(settings)
        ends = None if ex is None else ex.grown.get((topic, partition))
    return None if ends is None else NewPartitionHold(topic, partition, ends)


class NewPartitionHold:
    """A partition `find_grown` found reads and commits nothing until the group's committed
    offsets of the older partitions it waits for reach their end offsets at start: until
    the older writes of the keys that moved to it are in Elasticsearch. Asked once per
    epoch, as commits move once per epoch."""

    def __init__(self, topic: str, partition: int, ends: Mapping[int, int]) -> None:
        self._topic, self._partition = topic, partition
        self._ends = dict(ends)
        self._due = True
        self._failing = False
        logger.warning(
            "source partition %s/%d: added to its topic while the group had not read the "
            "older partitions to their end; reading and committing nothing until the "
            "group's committed offsets reach %s, so that the older writes of keys that "
            "moved here land first",
            topic, partition, self._waited(),
        )  # fmt: skip

    def _waited(self) -> str:
        return ", ".join(f"{self._topic}/{q}@{end}" for q, end in sorted(self._ends.items()))

    def describe(self) -> str:
        """Why the partition reads nothing (the status API; read from another thread)."""
        return f"new partition: waiting for the older partitions to reach {self._waited()}"

    def mark_due(self) -> None:
        """An epoch ended (`snapshot()`): ask again at the next `next_batch`."""
        self._due = True

    def holding(self, consumer: Consumer) -> bool:
        """Whether to read nothing yet; asks Kafka once an epoch. False is final."""
        if not self._due:
            return True
        self._due = False
        tps = [TopicPartition(self._topic, q) for q in sorted(self._ends)]
        try:
            got = consumer.committed(tps, timeout=CHECK_TIMEOUT_S)
        except KafkaException as e:
            if not self._failing:
                logger.warning(
                    "source partition %s/%d: cannot ask the group's committed offsets of the "
                    "older partitions (%s); still reading nothing",
                    self._topic, self._partition, e,
                )  # fmt: skip
            self._failing = True
            return True
        self._failing = False
        self._ends = {
            tp.partition: self._ends[tp.partition]
            for tp in got
            if tp.error is not None or _behind(tp.offset, self._ends[tp.partition])
        }
        if self._ends:
            return True
        logger.warning(
            "source partition %s/%d: the older partitions of its topic reached their end "
            "offsets; reading",
            self._topic, self._partition,
        )  # fmt: skip
        return False


# -- partitions this run does not read


def retired_keys(live: Iterable[str]) -> list[str]:
    """Source keys the recovery store holds that this run does not list."""
    have = set(live)
    return [k for k in stored_keys(SOURCE_KEY) if k not in have]


def retired_reason(settings: Settings, topic: str, partition: int) -> str | None:
    """Why this run does not read `topic/partition` (None: it does)."""
    flow = listed(settings)
    if flow is None or partition in flow.get(topic, ()):
        return None
    if topic not in flow:
        setting = "KAFKA_TOPICS_REGEX" if settings.topics_regex else "KAFKA_TOPICS"
        return f"topic {topic} is no longer in {setting}"
    return f"topic {topic} has no partition {partition} now (recreated?)"


class RetiredPartition(StatefulSourcePartition[Message, int]):
    """A partition the recovery store holds that this run does not read: it reads and
    commits nothing, keeps its offset as its snapshot (should the topic come back), and
    ends at once."""

    def __init__(self, key: str, state: int | None, why: str) -> None:
        self._state = state
        logger.warning(
            "source partition %s: in the recovery store but %s; keeping its offset %s, "
            "reading nothing",
            key,
            why,
            state,
        )

    def next_batch(self) -> list[Message]:
        """Nothing to read."""
        raise StopIteration

    def snapshot(self) -> int:
        """The stored offset, unchanged (None when there was none)."""
        return cast(int, self._state)
