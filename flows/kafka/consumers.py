"""One librdkafka consumer per Bytewax worker, shared by all of that worker's partitions.

A consumer per Kafka partition costs each partition its own fetch requests (in live mode
every one of them fetches as soon as a record arrives, which costs the broker more CPU per
record than the flow spends), about four threads and its own prefetch budget, so threads and
memory grow with the partition count (docs/benchmarks.md, "Figures behind the code").
Bytewax calls every source partition of a worker from that worker's thread, so one consumer
per thread can serve them all: a partition reading consumes for everybody, and each record
goes to the queue of the partition it belongs to.

Memory stays bounded without pausing a partition that merely reads slower than the
others (a pause drops what librdkafka prefetched for it, which would then be fetched
again): the worker consumes only while its partitions that read hold fewer than
`READY_BATCHES` batches, so at most one more batch comes. A partition that emits nothing
for a while (paused, stopping, held or waiting to own it) is paused (`hold`): nothing
more comes for it, and what it queued waits outside that count.

Records reach a queue in offset order and leave it in that order; pausing and resuming
lose nothing, because librdkafka resumes fetching after the last record `consume()`
returned, which is the last one queued here.

A consumer that knows no broker at all is replaced (`tend`). librdkafka 2.16 (issue #5301)
can end there after a broker in controlled shutdown answers a leader query with no
broker: it forgets every broker, never contacts `bootstrap.servers` again, and its
fetches and commits wait forever. Its statistics (`statistics.interval.ms`) then list no
configured or learned broker; in an ordinary outage they still list the brokers it tries
again. The new consumer is assigned every partition at the position after the last record
queued here, so nothing is read twice or skipped; commits the old one did not answer are
answered as failed, and the next epoch commits again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import orjson
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

logger = logging.getLogger(__name__)

__all__ = ["BROKERLESS_REPORTS", "FETCH", "READY_BATCHES", "WorkerConsumer", "shared"]

Key = tuple[str, int]
CommitHandler = Callable[[KafkaError | None, list[TopicPartition]], None]

FETCH = {
    "queued.max.messages.kbytes": 16384,
    "fetch.min.bytes": 65536,
    "fetch.wait.max.ms": 50,
}
"""How a worker's consumer fetches, beside librdkafka's defaults: it prefetches up to 64 MB
per consumer by default, bounded here to keep memory flat. Its queued.min.messages (100,000)
stays: a lower one made a consumer that serves many partitions fetch several times slower. A
fetch waits for 64 KiB or 50 ms: at a moderate rate the broker otherwise answers every few
records (docs/benchmarks.md, "Figures behind the code"). `tools.bench.loop --floor` fetches the
same way."""

READY_BATCHES = 2
"""The worker consumes while its partitions that read hold fewer records than this many
batches."""

BROKERLESS_REPORTS = 2
"""A consumer whose statistics list no configured or learned broker this many times in a
row is replaced (librdkafka #5301; see the module docstring)."""

SERVE_EVERY_S = 1.0
"""`tend` serves librdkafka's callbacks (statistics, commit answers) when nothing has
consumed for this long, e.g. while every partition of the worker waits."""

_THREAD = threading.local()


def shared(conf: Mapping[str, Any]) -> WorkerConsumer:
    """The consumer of this worker thread for librdkafka configuration `conf` (without
    `on_commit`), created by the first partition that asks and closed by the last to leave."""
    consumers: weakref.WeakValueDictionary[tuple[tuple[str, str], ...], WorkerConsumer]
    consumers = getattr(_THREAD, "consumers", None) or weakref.WeakValueDictionary()
    _THREAD.consumers = consumers
    key = tuple(sorted((k, str(v)) for k, v in conf.items()))
    found = consumers.get(key)
    if found is None or found.closed:
        found = consumers[key] = WorkerConsumer(conf)
    return found


class WorkerConsumer:
    """A librdkafka consumer whose records are sorted into one queue per partition."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._conf = dict(conf)
        self._generation = 0
        self._brokerless = 0  # statistics in a row that listed no broker to contact
        self.renewals = 0
        """How many times the consumer was replaced (`tend`)."""
        self.consumer = self._new_consumer()
        self.closed = False
        self._served = time.monotonic()
        self._queues: dict[Key, deque[Message]] = {}
        self._handlers: dict[Key, weakref.WeakMethod[CommitHandler]] = {}
        self._inflight: dict[Key, int] = {}  # asynchronous commits not answered yet
        self._assigned: dict[Key, int] = {}  # the offset each was assigned at
        self._held: set[Key] = set()  # paused by its partition (`hold`)
        self._ready = 0  # records queued for partitions not held
        self._batch = 1

    def _new_consumer(self) -> Consumer:
        """A librdkafka consumer whose callbacks reach this object while it is the current
        one (a retired consumer's late answers are ignored)."""
        me = weakref.ref(self)  # the consumer's callbacks must not keep this object alive
        generation = self._generation

        def on_commit(err: KafkaError | None, partitions: list[TopicPartition]) -> None:
            owner = me()
            if owner is not None and owner._generation == generation:
                owner._answer(err, partitions)

        def on_stats(report: str) -> None:
            owner = me()
            if owner is not None and owner._generation == generation:
                owner._count_brokers(report)

        return Consumer({**self._conf, "on_commit": on_commit, "stats_cb": on_stats})

    # -- membership

    def join(self, key: Key, batch_size: int, on_commit: CommitHandler) -> None:
        """Register a partition (not assigned yet: `assign` starts its fetching);
        `on_commit`, a bound method, is held weakly and identifies the owner."""
        if key in self._queues:  # an owner that never closed (its worker failed)
            logger.warning("source %s/%d: taking over from a partition never closed", *key)
            self._forget(key)
        self._queues[key] = deque()
        self._handlers[key] = weakref.WeakMethod(on_commit)
        self._batch = max(self._batch, batch_size)

    def assign(self, tp: TopicPartition) -> None:
        """Start fetching `tp` at its offset."""
        self.consumer.incremental_assign([tp])
        self._assigned[(tp.topic, tp.partition)] = tp.offset

    def move(self, tp: TopicPartition) -> None:
        """Fetch an assigned partition from `tp.offset` on. Assigned again: librdkafka stops
        fetching a partition whose position left the log (`auto.offset.reset=error`) and
        refuses to `seek` it then (`_STATE`). A held partition stays paused; records
        queued for it from the old position are dropped."""
        key = (tp.topic, tp.partition)
        queue = self._queues.get(key)
        if queue:
            if key not in self._held:
                self._ready -= len(queue)
            queue.clear()
        self.consumer.incremental_unassign([TopicPartition(*key)])
        self.consumer.incremental_assign([tp])
        self._assigned[key] = tp.offset
        if key in self._held:
            self.consumer.pause([TopicPartition(*key)])

    def leave(self, key: Key, on_commit: CommitHandler) -> None:
        """Stop fetching the partition `on_commit`'s owner joined with and forget its queue
        (not if another owner took it over); the last to leave closes the consumer."""
        ref = self._handlers.get(key)
        if ref is not None and ref() not in (None, on_commit):
            return
        self._forget(key)
        if not self._queues and not self.closed:
            self.closed = True
            self.consumer.close()

    def _forget(self, key: Key) -> None:
        if self._assigned.pop(key, None) is not None:
            self.consumer.incremental_unassign([TopicPartition(*key)])
        queue = self._queues.pop(key, None)
        if queue is not None and key not in self._held:
            self._ready -= len(queue)
        self._handlers.pop(key, None)
        self._inflight.pop(key, None)
        self._held.discard(key)

    # -- records

    def hungry(self) -> bool:
        """Whether the partitions that read hold fewer than READY_BATCHES batches, so
        that consuming more is worth it."""
        return self._ready < READY_BATCHES * self._batch

    def fill(self, n: int, timeout: float) -> int:
        """Consume up to `n` records (serving commit answers too) into their partitions'
        queues; returns how many came."""
        msgs = self.consumer.consume(n, timeout)
        self._served = time.monotonic()
        if not msgs:
            return 0
        queues = self._queues
        partition: int | None = -2
        topic: str | None = None
        queue: deque[Message] | None = None
        for m in msgs:  # in runs of one partition: look a queue up once per run
            p, t = m.partition(), m.topic()
            if p != partition or t != topic:
                partition, topic = p, t
                queue = queues.get(cast(Key, (t, p)))
            if queue is not None:
                queue.append(m)
            elif m.error() is not None:
                self._broadcast(m)
            # else: a record of a partition that left; it is no longer assigned
        self._ready = sum(len(q) for k, q in queues.items() if k not in self._held)
        return len(msgs)

    def take(self, key: Key, n: int) -> list[Message]:
        """Up to `n` records of partition `key`, oldest first."""
        queue = self._queues[key]
        if not queue:
            return []
        if len(queue) <= n:
            out = list(queue)
            queue.clear()
        else:
            out = [queue.popleft() for _ in range(n)]
        if key not in self._held:
            self._ready -= len(out)
        return out

    def queued(self, key: Key) -> int:
        return len(self._queues[key])

    def hold(self, key: Key, paused: bool) -> None:
        """Stop (or restart) fetching a partition that emits nothing for a while; its
        queue is kept, outside the count that `hungry` reads."""
        if paused is (key in self._held) or key not in self._queues:
            return
        queued = len(self._queues[key])
        if paused:
            self._held.add(key)
            self._ready -= queued
        else:
            self._held.discard(key)
            self._ready += queued
        if key in self._assigned:
            tp = [TopicPartition(*key)]
            if paused:
                self.consumer.pause(tp)
            else:
                self.consumer.resume(tp)

    # -- a consumer that knows no broker

    def tend(self) -> None:
        """Called by every partition's read and before every final commit: serve the
        callbacks if nothing consumed for a while, and replace a consumer that knows no
        broker (see the module docstring)."""
        if time.monotonic() - self._served > SERVE_EVERY_S:
            self.fill(1, 0)  # a record it brings waits in its queue
        if self._brokerless >= BROKERLESS_REPORTS:
            self._renew()

    def _count_brokers(self, report: str) -> None:
        try:
            brokers = orjson.loads(report).get("brokers", {}).values()
        except (orjson.JSONDecodeError, AttributeError):
            return
        known = any(b.get("source") in ("configured", "learned") for b in brokers)
        self._brokerless = 0 if known else self._brokerless + 1

    def _renew(self) -> None:
        """Replace the consumer by a new one that reads every partition on from the last
        record queued here (`position`), with the same partitions paused."""
        old = self.consumer
        keys = list(self._assigned)
        positions = old.position([TopicPartition(*k) for k in keys]) if keys else []
        starts = [
            TopicPartition(tp.topic, tp.partition, tp.offset)
            if tp.offset >= 0
            else TopicPartition(tp.topic, tp.partition, self._assigned[(tp.topic, tp.partition)])
            for tp in positions
        ]
        self._generation += 1
        self._brokerless = 0
        self.renewals += 1
        self.consumer = self._new_consumer()
        if starts:
            self.consumer.incremental_assign(starts)
        held = [TopicPartition(*k) for k in keys if k in self._held]
        if held:
            self.consumer.pause(held)
        # Closing a consumer that knows no broker takes about 45 s: not on this thread.
        threading.Thread(target=_close, args=(old,), name="retired-consumer", daemon=True).start()
        logger.warning(
            "the Kafka consumer of %d partition(s) knew no broker for %d statistics "
            "reports (librdkafka issue #5301): replaced by a new one, which reads each "
            "partition on from its last record read",
            len(keys), BROKERLESS_REPORTS,
        )  # fmt: skip
        lost, self._inflight = self._inflight, {}
        for key, count in lost.items():
            if count:
                why = KafkaError(KafkaError._TRANSPORT, "consumer replaced before Kafka answered")
                self._handle(key, why, [TopicPartition(*key)])

    def _broadcast(self, m: Message) -> None:
        """An error of no partition this worker reads: a topic's (partition -1) or the
        consumer's goes to every queue it concerns, so that each partition reports it."""
        topic, partition = m.topic(), m.partition()
        if partition is not None and partition >= 0:
            return  # a partition that left
        for (t, _), queue in self._queues.items():
            if not topic or t == topic:
                queue.append(m)

    # -- commits

    def commit(self, tp: TopicPartition) -> None:
        """Commit asynchronously; the answer goes to the partition's handler."""
        self.consumer.commit(offsets=[tp], asynchronous=True)
        key = (tp.topic, tp.partition)
        self._inflight[key] = self._inflight.get(key, 0) + 1

    @contextlib.contextmanager
    def answers_only(self) -> Iterator[None]:
        """While the worker waits in one partition for commit answers, nobody takes
        records: fetching pauses meanwhile, so that `fill` serves answers only."""
        tps = [TopicPartition(*k) for k in self._assigned if k not in self._held]
        if tps:
            self.consumer.pause(tps)
        try:
            yield
        finally:
            if tps and not self.closed:
                self.consumer.resume(tps)  # the current consumer's: `_renew` may have run

    def inflight(self, key: Key) -> int:
        """Asynchronous commits of `key` Kafka has not answered yet."""
        return self._inflight.get(key, 0)

    def _answer(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """Route Kafka's answer to a commit to the partition(s) it names (librdkafka
        names the committed partitions, with or without an error)."""
        if not partitions:
            logger.warning("an offset commit answer named no partition: %s", err)
        for key in {(tp.topic, tp.partition) for tp in partitions}:
            if self._inflight.get(key):
                self._inflight[key] -= 1
            self._handle(key, err, [tp for tp in partitions if (tp.topic, tp.partition) == key])

    def _handle(self, key: Key, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        ref = self._handlers.get(key)
        handler = ref() if ref is not None else None
        if handler is not None:
            handler(err, partitions)


def _close(consumer: Consumer) -> None:
    with contextlib.suppress(Exception):
        consumer.close()
