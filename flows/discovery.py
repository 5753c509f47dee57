"""Kafka partitions that appear or disappear between and during executions.

Bytewax lists a source's partitions once per execution (review finding F11), so a
partition added to a topic, or a new topic matching KAFKA_TOPICS_REGEX, would be read only
after a restart by hand, and from `latest` it would skip what was written to it before.
Here:

- a watcher thread per process (KAFKA_METADATA_REFRESH_S) compares the topics and
  partitions with those this execution listed. On a change it logs one line and drains the
  flow like SIGTERM (`flows.shutdown.request`); once the dataflow has finished cleanly, the
  process executes its own command line again (`os.execv`, same pid), which lists the new
  partitions. Every process of a cluster runs its own watcher, so all of them restart.
  Never after a failure, a signal, or when not started by `python -m bytewax.run`.
- a partition without a snapshot or committed offset, of a group that has committed
  offsets for this flow's topics, appeared after the group began: it starts at its
  earliest offset even under KAFKA_AUTO_OFFSET_RESET=latest (`earliest_reason`).
- VERSION=offset compares offsets, which only one partition orders: unless every record
  is its own document (DOC_ID=coordinates), a start refuses a topic of more than one
  partition and partitions added while running stop the flow (`VERSION_FIX`); a start
  also refuses a recreated or truncated topic (`check_offsets_comparable`).
- a partition a recovery store holds but this run does not read (topic no longer
  configured) must still be listed, or Bytewax cannot resume (review finding F8): it
  becomes a `RetiredPartition`.
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
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from flows import shutdown
from flows.config import Settings
from flows.errors import ConfigError
from flows.recovery_store import SOURCE_KEY, stored_keys
from flows.runtime import restart_argv
from flows.topics import committed, find_topics

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
    checked: bool = False
    restart: bool = False
    fatal: str | None = None


_lock = threading.Lock()
_executions: dict[Settings, _Execution] = {}  # Settings hash by identity
_exit_hook = False


def watch(settings: Settings, found: Partitions) -> None:
    """Record what a worker listed and start this process's watcher (once); from
    `KafkaSource.list_parts`, which Bytewax calls on every worker at execution time."""
    global _exit_hook
    with _lock:
        ex = _executions.setdefault(settings, _Execution())
        for topic, parts in found.items():
            ex.listed.setdefault(topic, set()).update(parts)
        start = settings.kafka_metadata_refresh_s > 0 and not ex.watching
        ex.watching = ex.watching or start
        if not _exit_hook:
            atexit.register(_at_exit)
            _exit_hook = True
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
    shutdown.request(f"Kafka: {what} appeared; restarting to read them", grace_s=grace)
    return True


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
        signalled=shutdown.signalled(),
        restart=any(ex.restart for _, ex in executions),
        fatal=fatal is not None,
    )
    if action == "exit":
        return
    if action == "restart":
        argv = restart_argv()
        if argv is None:
            return
        if shutdown.signalled():  # a signal while deciding: the operator wants it gone
            return
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
    done = [tp for tp in committed(consumer, others) if tp.offset >= 0]
    group = settings.group_id
    if any(tp.topic == topic for tp in done):
        return f"new partition: group {group} has committed offsets for other partitions of {topic}"
    if done:
        return f"new topic: group {group} has committed offsets for topic {done[0].topic}"
    return None


def check_offsets_comparable(settings: Settings, found: Partitions) -> None:
    """`offsets_comparable`, once per execution."""
    if settings.version != "offset":
        return
    with _lock:
        ex = _executions.setdefault(settings, _Execution())
        if ex.checked:
            return
    offsets_comparable(settings, found)
    with _lock:
        ex.checked = True


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
    overrides = {"group.id": settings.group_id, "enable.auto.commit": "false"}
    consumer = Consumer(settings.librdkafka(None, **overrides))
    try:
        _check_offsets(consumer, settings.group_id, found)
    finally:
        consumer.close()


_PARTITIONS = "es-sink partitions="


def commit_metadata(settings: Settings, topic: str) -> str:
    """What a commit of `topic` carries: its partition count as this execution listed it,
    a record of the topic's shape for whoever reads the group's offsets."""
    parts = (listed(settings) or {}).get(topic)
    return f"{_PARTITIONS}{len(parts)}" if parts else ""


def _check_offsets(consumer: Consumer, group: str, found: Partitions) -> None:
    tps = [TopicPartition(t, p) for t, ps in found.items() for p in ps]
    for tp in committed(consumer, tps):
        if tp.offset < 0:
            continue
        _, high = consumer.get_watermark_offsets(tp, timeout=30)
        if tp.offset > high:
            origin = f"group {group} committed offset"
            raise above_log_end(tp.topic, tp.partition, tp.offset, origin, high)


def above_log_end(topic: str, partition: int, offset: int, origin: str, high: int) -> ConfigError:
    """VERSION=offset and a start offset above the log end: the topic was recreated or
    truncated, so its new offsets are lower than the versions already indexed."""
    return ConfigError(
        f"VERSION: topic {topic} partition {partition}: the {origin} {offset} is above the "
        f"log end {high} (the topic was recreated or truncated?); its new offsets would lose "
        f"to the versions already indexed: use VERSION=none or VERSION=header:<name>, or a "
        f"new group and recovery directory"
    )


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
