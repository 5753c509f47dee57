"""One librdkafka consumer per Bytewax worker, shared by all of that worker's partitions.

A consumer per Kafka partition costs each partition its own fetch requests (in live mode
every one of them fetches as soon as a record arrives: ~60 µs of broker CPU per record
with 8 partitions), about four threads and its own prefetch budget (120 partitions: 489
threads, 574 MB). Bytewax calls every source partition of a worker from that worker's
thread, so one consumer per thread can serve them all: a partition reading consumes for
everybody, and each record goes to the queue of the partition it belongs to.

Memory stays bounded without pausing a partition that merely reads slower than the
others (a pause drops what librdkafka prefetched for it, which would then be fetched
again): the worker consumes only while its partitions that read hold fewer than
`READY_BATCHES` batches, so at most one more batch comes. A partition that emits nothing
for a while (paused, stopping, held or waiting to own it) is paused (`hold`): nothing
more comes for it, and what it queued waits outside that count.

Records reach a queue in offset order and leave it in that order; pausing and resuming
lose nothing, because librdkafka resumes fetching after the last record `consume()`
returned, which is the last one queued here.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

logger = logging.getLogger(__name__)

__all__ = ["READY_BATCHES", "WorkerConsumer", "shared"]

Key = tuple[str, int]
CommitHandler = Callable[[KafkaError | None, list[TopicPartition]], None]

READY_BATCHES = 2
"""The worker consumes while its partitions that read hold fewer records than this many
batches."""

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
        me = weakref.ref(self)  # the consumer's callback must not keep this object alive

        def on_commit(err: KafkaError | None, partitions: list[TopicPartition]) -> None:
            owner = me()
            if owner is not None:
                owner._answer(err, partitions)

        self.consumer = Consumer({**conf, "on_commit": on_commit})
        self.closed = False
        self._queues: dict[Key, deque[Message]] = {}
        self._handlers: dict[Key, weakref.WeakMethod[CommitHandler]] = {}
        self._assigned: set[Key] = set()
        self._held: set[Key] = set()  # paused by its partition (`hold`)
        self._ready = 0  # records queued for partitions not held
        self._batch = 1

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
        self._assigned.add((tp.topic, tp.partition))

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
        if key in self._assigned:
            self._assigned.discard(key)
            self.consumer.incremental_unassign([TopicPartition(*key)])
        queue = self._queues.pop(key, None)
        if queue is not None and key not in self._held:
            self._ready -= len(queue)
        self._handlers.pop(key, None)
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
                self.consumer.resume(tps)

    def _answer(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """Route Kafka's answer to a commit to the partition(s) it names (librdkafka
        names the committed partitions, with or without an error)."""
        if not partitions:
            logger.warning("an offset commit answer named no partition: %s", err)
        for key in {(tp.topic, tp.partition) for tp in partitions}:
            ref = self._handlers.get(key)
            handler = ref() if ref is not None else None
            if handler is not None:
                handler(err, [tp for tp in partitions if (tp.topic, tp.partition) == key])
