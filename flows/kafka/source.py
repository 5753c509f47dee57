"""Kafka source: one partition per Kafka partition, resumable, committing offsets that lag.

The partitions of a worker share one consumer (`flows.kafka.consumers`).

Offsets live in Bytewax recovery snapshots (with `-r`). The consumer group's committed
offsets are the fallback start position and what lag monitoring reads, so they must never
run ahead of what is durable in Elasticsearch or the dead-letter topic. An
`es-sink offsets reset` is the exception both ways: its commit (`fencing.Reset`) is where
the operator wants the partition to read, so a start prefers it to the snapshot, and a
running partition that finds it reads from there (`_follow`). Bytewax has no
"epoch is durable" hook, so a partition remembers the offset it snapshotted at the end of
epoch e and commits it on its first `next_batch()` of epoch e+1: Bytewax calls that only
once the whole dataflow (both sinks flush inside `snapshot()`) has finished epoch e.

A snapshot never passes a record the processor has not examined yet (`flows.halt`), so
the items of a `KafkaSource` must go through `flows.process.Processor`.

The same rule orders a stop under ERRORS_TOLERANCE=none (`flows.halt`) and ends the flow
cleanly: at the end offsets (KAFKA_STOP_AT_END) or after SIGTERM/SIGINT, a partition stops
reading, waits until its last offset is committed that way, and only then raises
StopIteration. The end offset is the one the consumer's isolation level sees at start
(the last stable offset under librdkafka's default `read_committed`), and the consumer's
position, not the last record read, says when it is reached: transaction markers and
aborted records occupy offsets that are never delivered.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from flows import halt, metrics
from flows.config import Settings
from flows.errors import PipelineError
from flows.kafka import consumers, discovery, fencing, topics
from flows.kafka.topics import find_topics, kafka_config_error
from flows.runtime import control, shutdown
from flows.runtime.args import run_args
from sinks import failing, progress
from sinks.backoff import Backoff
from sinks.resources import members

logger = logging.getLogger(__name__)

__all__ = [
    "KafkaSource",
    "KafkaSourceError",
    "KafkaSourcePartition",
    "PartitionView",
    "find_topics",  # flows.kafka.topics; kept here for callers of the old path
    "kafka_config_error",
    "partitions",
]

RECOMMIT_S = fencing.RECOMMIT_S
"""Commit an unchanged offset again after this long: a group used through `assign()` loses
a partition's offset `offsets.retention.minutes` (7 days) after its last commit."""
RESET_SNAPSHOTS = 2
"""After following an `es-sink offsets reset`, commits carry its fields (`fencing.Reset`)
until this many snapshots were taken from its offset on: by the commit of the second, the
first is durable in the recovery store, so a restart from it no longer undoes the reset."""
_SEP = "/"  # never legal in a topic name, so `topic/partition` splits unambiguously
_IDLE_WAKE = timedelta(milliseconds=20)
_HELD_WAKE = timedelta(milliseconds=200)  # waiting to own it (fencing), or for older ones
_LIVE: weakref.WeakSet[KafkaSourcePartition] = weakref.WeakSet()


class KafkaSourceError(PipelineError):
    """The broker reported a non-retriable error for a partition."""


class KafkaSource(FixedPartitionedSource[Message, int]):
    """Every partition of KAFKA_TOPICS (or KAFKA_TOPICS_REGEX); items are confluent Messages."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings  # no I/O here: this object is part of the flow description

    def list_parts(self) -> list[str]:
        """Ask the broker for the partitions of the configured topics, plus those a recovery
        store holds that this run does not read (Bytewax cannot resume a stored key nobody
        lists: they become retired partitions). Starts this process's metadata watcher."""
        found = find_topics(self._settings)
        discovery.check_start(self._settings, found)
        discovery.watch(self._settings, found)
        live = [f"{t}{_SEP}{p}" for t, parts in found.items() for p in parts]
        return live + discovery.retired_keys(live)

    @failing.on_error
    @progress.tracked
    def build_part(
        self, step_id: str, for_part: str, resume_state: int | None
    ) -> StatefulSourcePartition[Message, int]:
        """Open a consumer for one partition, positioned per recovery state or group offset."""
        topic, _, partition = for_part.rpartition(_SEP)
        why = discovery.retired_reason(self._settings, topic, int(partition))
        if why is not None:
            return discovery.RetiredPartition(for_part, resume_state, why)
        return KafkaSourcePartition(self._settings, topic, int(partition), resume_state)


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition as this process sees it (the status API adds what Kafka says)."""

    topic: str
    partition: int
    position: int
    """The next offset to read."""
    confirmed: int | None
    """The last offset commit Kafka confirmed to this process."""
    paused: bool
    held: str | None
    """Why it reads nothing although it could (a new partition waiting for older ones)."""
    last_error: tuple[float, str] | None


def partitions() -> list[PartitionView]:
    """Every Kafka partition this process reads now, in (topic, partition) order."""
    return sorted((p.view() for p in members(_LIVE)), key=lambda v: (v.topic, v.partition))


class KafkaSourcePartition(StatefulSourcePartition[Message, int]):
    """Reads one Kafka partition; its snapshot is the next offset to read."""

    def __init__(
        self, settings: Settings, topic: str, partition: int, resume_offset: int | None
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._batch_size = settings.consume_batch_size
        self._stop_at_end = settings.stop_at_end
        self._awake: datetime | None = None
        self._key = (topic, partition)
        # One consumer per worker serves all of its partitions (flows.kafka.consumers).
        self._shared = consumers.shared(
            settings.librdkafka(
                "consumer",
                defaults={
                    **consumers.FETCH,
                    # How a consumer that knows no broker is found (flows.kafka.consumers).
                    "statistics.interval.ms": 5000,
                },
                **{
                    "group.id": settings.group_id,
                    "enable.auto.commit": "false",
                    "enable.auto.offset.store": "false",
                    # Every partition is assigned at an explicit offset, so librdkafka's
                    # reset would only act on a position that left the log while running
                    # (`latest` would skip to the end): `_back_in_log` decides instead.
                    "auto.offset.reset": "error",
                    "enable.partition.eof": "false",
                },
            )
        )
        self._shared.join(self._key, self._batch_size, self._on_commit)
        try:
            self._start(settings, topic, partition, resume_offset)
        except BaseException:
            self._shared.leave(self._key, self._on_commit)
            raise
        _LIVE.add(self)

    def _start(
        self, settings: Settings, topic: str, partition: int, resume_offset: int | None
    ) -> None:
        """Find the start offset (recovery snapshot, group offset or reset)."""
        tp = TopicPartition(topic, partition)
        low, high = self._consumer.get_watermark_offsets(tp, timeout=30)
        group = topics.committed(self._consumer, [tp])[0]
        self._committed: int | None = group.offset if group.offset >= 0 else None
        self._fence = fencing.PartitionFence.of(settings, topic, partition, group)
        self._new: discovery.NewPartitionHold | None = None
        if self._committed is None:  # the hold commits nothing: a restart holds it again
            self._new = discovery.new_partition_hold(settings, topic, partition)
        # An operator's reset wins over the recovery snapshot until a snapshot from its
        # offset on is durable: until then the group's commits keep its fields.
        self._reset = fencing.Reset.parse(group.metadata) if group.offset >= 0 else None
        followed = fencing.Owner.parse(group.metadata) is not None  # by an instance's commit
        if followed and resume_offset == self._committed:
            self._reset = None  # the snapshot resumes where the group is: nothing to override
        self._reset_snapshots = 0
        self._moving: int | None = None  # to read again from (a reset, a take-back)
        self._moving_why = ""  # whence that offset came, for `_in_log`'s lines
        if self._reset is not None:
            start = cast(int, self._committed)
            how = "following" if followed else "set by"
            origin = f"group {settings.group_id} committed offset, {how} {self._reset.describe()}"
            if resume_offset is not None and resume_offset != start:
                origin += f", not the recovery snapshot's {resume_offset}"
            if self._fence is not None:
                self._fence.follow(self._reset)
        elif resume_offset is not None:
            start, origin = resume_offset, "recovery snapshot"
        elif self._committed is not None:
            start, origin = self._committed, f"group {settings.group_id} committed offset"
            if run_args().recovery:
                logger.warning(
                    "source %s/%d: no recovery snapshot although a recovery directory is "
                    "set (new or replaced directory?); resuming from the %s %d",
                    topic, partition, origin, start,
                )  # fmt: skip
        elif settings.auto_offset_reset == "latest" and (
            why := discovery.earliest_reason(self._consumer, settings, topic, partition)
        ):
            start, origin = low, f"earliest, not auto.offset.reset=latest: {why}"
        else:
            reset = low if settings.auto_offset_reset == "earliest" else high
            start, origin = reset, f"auto.offset.reset={settings.auto_offset_reset}"
        self._version_offset = settings.version == "offset"
        start = self._in_log(start, origin, low, high)
        self._next = self._start_offset = start
        self._end = high
        self._pending: int | None = None
        self._committed_at = time.monotonic()
        # The topic's partition count goes with every commit, so that a start can tell
        # partitions added since (VERSION=offset) from offsets that merely expired.
        self._commit_metadata = discovery.commit_metadata(settings, topic)
        self._unread_at: int | None = None  # the offset an announcement committed unread
        # The pause this partition's commits recorded (flows.runtime.control), as last seen and as
        # last sent: a change is committed at once, a failed commit again each epoch.
        self._mark_seen = control.marker()
        self._mark_sent: str | None = self._mark_seen
        self._held_snapshotted = False
        self._durable = self._next  # then each snapshot, once next_batch is called again
        if self._new is None:  # a held new partition commits nothing (flows.kafka.discovery)
            self._announce()
        # Assigned at the first read, once the worker built all its partitions: the
        # look-ups above would otherwise queue behind the fetches of those built before
        # and delay the first document (docs/benchmarks.md, "Figures behind the code").
        self._assigned = False
        logger.info(
            "source partition %s/%d starts at offset %d (%s); log end %d",
            topic, partition, self._next, origin, high,
        )  # fmt: skip
        self._lag = metrics.CONSUMER_LAG.labels(topic, str(partition))
        # The offset after the last record emitted; the processor examines it later, and a
        # snapshot never passes a record the processor has not examined (flows.halt).
        self._emitted = self._next
        halt.start(topic, partition, self._next)
        self._out_of_log: int | None = None  # the broker's position that left the log
        self._cut = False  # ... because the log was cut back below it (`_in_log`)
        self._paused = False  # PUT /pause reached this partition (flows.runtime.control)
        self._stalled = False  # not fetched (`_stall`)
        self.last_error: tuple[float, str] | None = None
        """(wall-clock time, text) of the latest Kafka error on this partition."""

    # -- Bytewax calls

    @failing.on_error
    @progress.tracked
    def next_batch(self) -> list[Message]:
        """Commit what the previous epoch made durable, then read what is ready (never blocks)."""
        self._shared.tend()
        if not self._assigned:
            self._shared.assign(TopicPartition(self._topic, self._partition, self._next))
            self._assigned = True
        if self._fence is not None and self._fence.due():  # once per epoch: flows.kafka.fencing
            verdict = self._fence.check(self._consumer)  # a newer owner: the process ends
            # Unknown while stopping: the final commit (retried, bounded) decides, so that a
            # broker away does not hold SIGTERM until SHUTDOWN_TIMEOUT_S.
            if verdict is fencing.Verdict.UNKNOWN and not self._finishing():
                self._stall(True)
                self._awake = datetime.now(UTC) + _HELD_WAKE
                return []
            if verdict is fencing.Verdict.TAKEN_BACK:
                self._take_back(self._fence)
            if verdict is fencing.Verdict.RESET:
                self._follow(*cast(tuple[int, fencing.Reset], self._fence.reset))
        if self._fence is not None and self._fence.holding():  # a newer owner, maybe gone
            if self._finishing():
                raise StopIteration  # commit nothing over it
            self._stall(True)
            self._awake = datetime.now(UTC) + _HELD_WAKE
            return []
        if self._moving is not None and not self._move():
            self._awake = datetime.now(UTC) + _IDLE_WAKE
            return []
        if self._new is not None:  # added to its topic: flows.kafka.discovery
            if self._new.holding(self._consumer):
                if self._finishing():
                    raise StopIteration  # commit nothing: the next start holds it again
                self._stall(True)
                self._awake = datetime.now(UTC) + _HELD_WAKE
                return []
            self._new = None
            self._announce()
        held = halt.held(self._topic, self._partition)
        if held is not None:  # ERRORS_TOLERANCE=none: see flows.halt
            if self._held_snapshotted:
                raise held[1]
            self._stall(True)
            self._awake = datetime.now(UTC) + _IDLE_WAKE
            return []
        if self._fence is not None and self._fence.waiting() and self._finishing():
            # It read nothing: commit and release nothing, so that whoever comes next waits
            # for the previous owner (and its bulks) as this instance did.
            raise StopIteration
        mark = control.marker()
        if mark != self._mark_seen:  # paused or resumed: the group's commits record it now
            self._mark_seen = mark
            if self._pending is None:
                if self._committed is None and self._durable == self._start_offset:
                    self._unread_at = self._durable  # FENCING=false: no announcement made
                self._pending = self._durable
        if self._pending is not None:
            final = self._finishing()
            self._commit(self._pending, final, release=final and self._pending == self._next)
        if self._finishing():
            self._stall(True)
            if self._committed == self._next:
                if self._fence is not None and self._committed is not None:
                    self._fence.release(self._consumer, self._committed, self._base())
                raise StopIteration
            self._awake = datetime.now(UTC) + _IDLE_WAKE
            return []
        if self._fence is not None and self._fence.waiting():
            self._stall(True)
            self._awake = datetime.now(UTC) + _HELD_WAKE
            return []
        if self._out_of_log is not None and not self._back_in_log():
            self._awake = datetime.now(UTC) + _IDLE_WAKE
            return []
        self._paused = control.paused  # PUT /pause (flows.runtime.control); read once
        self._stall(self._paused)
        shared, key = self._shared, self._key
        if shared.hungry():
            shared.fill(self._batch_size, 0)  # serves commit answers too
        msgs = [] if self._paused else shared.take(key, self._batch_size)
        if not msgs:
            if not self._paused:  # and its queue is empty: the position is all it was given
                self._skip_control_records()
            # Records another partition's read brings for it wait as long (not 1 ms: idle
            # partitions would spin while one has a backlog).
            self._awake = datetime.now(UTC) + _IDLE_WAKE
            return []
        self._awake = None
        good = msgs
        for m in msgs:
            if m.error() is not None:
                good = [m for m in msgs if self._check(m)]
                break
        if good:
            self._next = self._emitted = cast(int, good[-1].offset()) + 1
        return good

    def next_awake(self) -> datetime | None:
        """Sleep briefly when idle instead of spinning on an empty partition."""
        return self._awake

    @failing.on_error
    @progress.tracked
    def snapshot(self) -> int:
        """The next offset to read, but never past a record the processor has not examined
        yet; committed to the group once this epoch is durable."""
        progress.epoch_closed()
        # Bytewax snapshots in the activation that emitted the last batch, before the
        # processor sees it (flows.halt): until then, resume at that batch.
        examined = halt.EXAMINED.get((self._topic, self._partition), self._emitted)
        offset = self._next if examined >= self._emitted else examined
        held = halt.held(self._topic, self._partition)
        if held is not None:  # resume at the failed record, never past it
            offset = min(offset, held[0])
            self._held_snapshotted = True
        if self._moving is None:  # moving back: commit none of the old positions
            self._snapshotted(offset)
        if self._fence is not None:
            self._fence.mark_due()
        if self._new is not None:
            self._new.mark_due()
        high = self._consumer.get_watermark_offsets(
            TopicPartition(self._topic, self._partition), cached=True
        )
        if high is not None and high[1] >= 0:
            self._lag.set(max(high[1] - offset, 0))
        return offset

    def _snapshotted(self, offset: int) -> None:
        """Queue the commit of a snapshot's offset (at the next epoch's first read)."""
        if self._reset is not None:
            self._reset_snapshots += 1
            if self._reset_snapshots >= RESET_SNAPSHOTS:
                self._reset = None
                self._pending = offset  # the commit that drops the reset's fields
        if (
            offset != self._committed
            or time.monotonic() - self._committed_at > RECOMMIT_S
            or control.marker() != self._mark_sent  # a commit recording the pause failed
        ):
            self._pending = offset
        self._durable = offset

    def close(self) -> None:
        """Leave without committing: only next_batch commits, after the epoch is durable."""
        _LIVE.discard(self)
        self._shared.leave(self._key, self._on_commit)

    # -- helpers

    @property
    def _consumer(self) -> Consumer:
        """The worker's consumer now (`flows.kafka.consumers` may replace it)."""
        return self._shared.consumer

    def _finishing(self) -> bool:
        return shutdown.requested() or (self._stop_at_end and self._next >= self._end)

    def _stall(self, want: bool) -> None:
        """Stop (or restart) fetching this partition while it emits nothing: paused
        (`flows.runtime.control`), stopping, held (`flows.halt`), waiting to own it (fencing) or
        for the older partitions of its topic (`flows.kafka.discovery`).
        What is queued waits; the other partitions' fetching goes on."""
        if want is not self._stalled:
            self._shared.hold(self._key, want)
            self._stalled = want

    def view(self) -> PartitionView:
        """What the status API shows of this partition (plain reads, from another thread)."""
        new = self._new
        return PartitionView(
            self._topic, self._partition, self._next, self._committed, self._paused,
            None if new is None else new.describe(), self.last_error,
        )  # fmt: skip

    def _skip_control_records(self) -> None:
        """Transaction markers and aborted records occupy offsets the consumer never returns,
        so the last record read can end before the log end (KAFKA_STOP_AT_END would never
        finish, the group would lag by one): the consumer's position moves past them."""
        tp = TopicPartition(self._topic, self._partition)
        position = cast(int, self._consumer.position([tp])[0].offset)
        if position > self._next:
            self._next = position

    def _in_log(self, offset: int, origin: str, low: int, high: int, cut: bool = False) -> int:
        """Where to read from, for `offset` (`origin` says whence it came) and a log that
        holds offsets `low` to `high`: at start and when the position leaves the log while
        running (`_back_in_log`). `cut`: librdkafka found the log cut back below `offset`
        without saying where it diverged (an unclean leader election), so the offsets
        below it may hold new records: read as a position above the log end is."""
        topic, partition = self._key
        if cut:
            if self._version_offset:
                raise discovery.cut_back(topic, partition, offset)
            logger.warning(
                "source %s/%d: the log was cut back below offset %d (%s; an unclean leader "
                "election?) and where it diverged is unknown; reading it from its earliest "
                "offset %d",
                topic, partition, offset, origin, low,
            )  # fmt: skip
            return low
        if offset > high:
            # The topic was recreated or truncated: its offsets began again, and what it
            # holds now is new. Reading from `offset` would skip it (or, under
            # KAFKA_STOP_AT_END, end at once and commit past it).
            if self._version_offset:
                raise discovery.above_log_end(topic, partition, offset, origin, high)
            logger.warning(
                "source %s/%d: offset %d (%s) is above the log end %d (topic recreated or "
                "truncated?); reading it from its earliest offset %d",
                topic, partition, offset, origin, high, low,
            )  # fmt: skip
            return low
        if offset < low:
            logger.warning(
                "source %s/%d: offset %d (%s) is gone: the broker deleted offsets %d to %d "
                "(retention, DeleteRecords) before they were read; reading on from the "
                "earliest, %d",
                topic, partition, offset, origin, offset, low - 1, low,
            )  # fmt: skip
            metrics.DELETED_UNREAD.labels(topic, str(partition)).inc(low - offset)
            return low
        return offset

    def _back_in_log(self) -> bool:
        """The broker answered that the position `_out_of_log` is outside the log (retention
        or DeleteRecords passed it while the partition was paused, held or lagging; a
        truncation): fetch on per `_in_log` (`_relocate`)."""
        assert self._out_of_log is not None
        if self._relocate(self._out_of_log, "read position", self._cut) is None:
            return False
        self._out_of_log, self._cut = None, False
        return True

    def _relocate(self, offset: int, why: str, cut: bool = False) -> int | None:
        """Fetch the partition from `offset` (`why`: whence it came) per `_in_log`'s rules,
        once the processor has examined every record emitted, so that the snapshot follows
        the new position. The offset it reads from; None: not yet (records unexamined, or
        the broker away: asked again on the next read)."""
        key = self._key
        if halt.EXAMINED.get(key, self._emitted) < self._emitted:
            return None
        tp = TopicPartition(*key)
        try:
            low, high = self._consumer.get_watermark_offsets(tp, timeout=30)
        except KafkaException as e:
            self.last_error = (time.time(), f"{why}: log start and end: {e}")
            return None
        offset = self._in_log(offset, why, low, high, cut)
        self._shared.move(TopicPartition(*key, offset))
        self._next = self._emitted = offset
        self._end = min(self._end, high)  # a truncated log never reaches its old end
        halt.start(*key, offset)
        return offset

    def _take_back(self, fence: fencing.PartitionFence) -> None:
        """Commit under this owner's name again. From a newer owner that released the
        partition below this owner's position, read again from there: its replay of the
        records before it may have put documents back to older writes that this owner had
        already replaced."""
        at, fence.released_at = fence.released_at, None
        if at is None or at >= self._durable:
            if self._pending is None:
                self._pending = self._durable
            return
        logger.warning(
            "source %s/%d: the newer instance released it at offset %d, below this "
            "instance's %d; reading again from %d",
            *self._key, at, self._durable, at,
        )  # fmt: skip
        self._moving, self._moving_why = at, "the newer instance's release"
        self._pending = None
        self._durable = at

    def _base(self, mark: str | None = None) -> str:
        """What every commit's metadata carries before the owner's fields: the topic's
        partition count (`flows.kafka.discovery`), the fields of a reset followed whose first
        snapshot may not be durable yet (`RESET_SNAPSHOTS`), and the pause, if any
        (`flows.runtime.control`; `mark`: the one to record, else the current one)."""
        mark = control.marker() if mark is None else mark
        words = [self._reset.words() if self._reset is not None else "", mark]
        extra = " ".join(w for w in words if w)
        if not extra:
            return self._commit_metadata
        return f"{self._commit_metadata or 'es-sink'} {extra}"

    def _follow(self, offset: int, reset: fencing.Reset) -> None:
        """`es-sink offsets reset` committed `offset` while this partition runs (its check
        found it): read from there, as the operator asked, instead of committing this
        position over it. What was read before is still written; nothing of the old
        position is committed any more."""
        logger.warning(
            "source partition %s/%d: %s moved the group's offset to %d; reading from there "
            "(the position was %d)",
            self._topic, self._partition, reset.describe(), offset, self._next,
        )  # fmt: skip
        self._reset, self._reset_snapshots = reset, 0
        self._moving, self._moving_why = offset, reset.describe()
        self._pending = None
        self._durable = offset

    def _move(self) -> bool:
        """Go to the offset a reset or a take-back set (`_follow`, `_take_back`), as
        `_relocate` allows; then commit it under this owner's name (`_base` keeps a reset's
        fields)."""
        assert self._moving is not None
        offset = self._relocate(self._moving, self._moving_why)
        if offset is None:
            return False
        self._moving = None
        self._out_of_log, self._cut = None, False
        self._durable = offset
        if self._new is None:  # a held new partition commits nothing (flows.kafka.discovery)
            self._pending = offset
        return True

    def _announce(self) -> None:
        """Commit this owner's name before reading (flows.kafka.fencing): at the committed offset,
        or, on a partition the group never committed, at the start offset, so that a
        successor restarted after a crash knows whose bulks may still run."""
        if self._fence is None:
            return
        if self._committed is not None:
            self._commit(self._committed, final=True)
        else:
            self._commit(self._next, final=True, unread=True)
        self._fence.announced()

    def _commit(
        self, offset: int, final: bool, release: bool = False, unread: bool = False
    ) -> None:
        """Commit `offset`; `_committed` moves only when Kafka confirms (`_on_commit`), so a
        failed commit is queued again by the next snapshot. `release`: the last commit;
        `unread`: the announcement of a partition the group never committed."""
        if unread:
            self._unread_at = offset
        elif offset != self._unread_at:
            self._unread_at = None
        unread = self._unread_at is not None  # still nothing read: say so again
        self._mark_sent = control.marker()
        meta = self._base(self._mark_sent)
        if self._fence is not None:
            meta = self._fence.metadata(meta, released=release, unread=unread)
        elif unread:
            meta = f"{meta or 'es-sink'} {fencing.UNREAD}"
        tp = TopicPartition(self._topic, self._partition, offset, meta)
        self._pending = None
        if final:
            # An earlier asynchronous commit still parked in librdkafka (broker away) could
            # land after this one and move the group back: let those finish first.
            deadline = time.monotonic() + 60
            with self._shared.answers_only():
                while self._shared.inflight(self._key) and time.monotonic() < deadline:
                    self._shared.fill(1, 0.2)  # serves commit answers
                    progress.beat()

            # The last commit before stopping must land, or a restart replays the tail.
            def commit_now() -> None:
                self._shared.tend()  # a consumer that knows no broker never answers
                result = self._consumer.commit(offsets=[tp], asynchronous=False)
                self._confirm(result or [])
                if self._committed != offset:
                    raise KafkaException(KafkaError(KafkaError._FAIL, "commit not confirmed"))

            _retry(commit_now)
            if self._fence is not None:
                self._fence.released = release
        else:
            self._shared.commit(tp)

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """Kafka's answer to a commit (served inside consume() or the final commit)."""
        if err is not None:
            self._mark_sent = None  # the pause may not be recorded: the next epoch commits
            self.last_error = (time.time(), f"offset commit failed: {err}")
            logger.warning("source %s/%d: offset commit failed (retried next epoch): %s",
                           self._topic, self._partition, err)  # fmt: skip
            return
        self._confirm(partitions)

    def _confirm(self, partitions: list[TopicPartition]) -> None:
        """Set `_committed` to what Kafka confirmed for this partition, even below the
        group's previous offset (a recovery snapshot behind the group): only this consumer
        commits the partition, and Kafka answers its commits in order."""
        for tp in partitions:
            if tp.topic != self._topic or tp.partition != self._partition:
                continue
            if tp.error is not None:
                self._mark_sent = None
                logger.warning("source %s/%d: offset commit failed (retried next epoch): %s",
                               self._topic, self._partition, tp.error)  # fmt: skip
            else:
                self._committed = tp.offset
                self._committed_at = time.monotonic()

    def _check(self, msg: Message) -> bool:
        err = msg.error()
        if err is None:
            return True
        self.last_error = (time.time(), str(err))
        if err.code() == KafkaError._AUTO_OFFSET_RESET:  # see `_back_in_log`
            offset = msg.offset()  # None: a log cut back, where it diverged unknown
            self._cut = offset is None or offset < 0
            self._out_of_log = self._next if self._cut else offset
            logger.warning("source %s/%d: %s", self._topic, self._partition, err)
            return False
        if err.code() == KafkaError._PARTITION_EOF or err.retriable():
            logger.warning("source %s/%d: %s (retrying)", self._topic, self._partition, err)
            return False
        msg_ = f"source {self._topic}/{self._partition}: {err}"
        raise KafkaSourceError(msg_)


COMMIT_BACKOFF = Backoff(initial_s=0.1, max_s=5.0, tries=9)
"""The final commit: 10 tries, waits of at most 0.2, 0.4 ... 5 s between them."""


def _retry(call: Callable[[], Any], backoff: Backoff = COMMIT_BACKOFF) -> None:
    retries = backoff.start()
    while True:
        try:
            call()
            return
        except KafkaException as e:
            if retries.exhausted():
                raise
            delay = retries.next_delay()
            logger.warning("offset commit failed, retrying in %.1fs: %s", delay, e)
            retries.sleep(delay, "commit", str(e))
