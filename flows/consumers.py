"""One librdkafka consumer per Bytewax worker, shared by all of that worker's partitions.

A consumer per Kafka partition costs each partition its own fetch requests (in live mode
every one of them fetches as soon as a record arrives: ~60 µs of broker CPU per record
with 8 partitions), about four threads and its own prefetch budget (120 partitions: 489
threads, 574 MB). Bytewax calls every source partition of a worker from that worker's
thread, so one consumer per thread can serve them all: a partition whose queue is empty
consumes once for everybody, and each record goes to the queue of the partition it
belongs to. A queue that grows past `HIGH_WATER` batches (its partition is held, paused,
fenced or stopping, or slower than its share of the fetches) pauses that partition's
fetching until it is drained again, so memory stays bounded by librdkafka's prefetch
budget plus a few batches per partition.

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
from collections.abc import Callable, Mapping
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

logger = logging.getLogger(__name__)

__all__ = ["HIGH_WATER", "WorkerConsumer", "shared"]

Key = tuple[str, int]
CommitHandler = Callable[[KafkaError | None, list[TopicPartition]], None]

HIGH_WATER = 4
"""A queue holding this many batches pauses its partition's fetching until it holds less
than one batch."""

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
        self._full: set[Key] = set()  # paused here because the queue is long
        self._held: set[Key] = set()  # paused by the partition's owner (flows.control)
        self._commits: deque[Key] = deque()  # asynchronous commits, oldest first
        self._batch: dict[Key, int] = {}
        self._topics: set[str] = set()

    # -- membership

    def join(self, key: Key, batch_size: int, on_commit: CommitHandler) -> None:
        """Register a partition (not assigned yet: `assign` starts its fetching)."""
        if key in self._queues:  # an owner that never closed (its worker failed)
            logger.warning("source %s/%d: taking over from a partition never closed", *key)
            self._forget(key)
        self._queues[key] = deque()
        self._topics = {t for t, _ in self._queues}
        self._handlers[key] = weakref.WeakMethod(on_commit)
        self._batch[key] = batch_size

    def assign(self, tp: TopicPartition) -> None:
        """Start fetching `tp` at its offset."""
        self.consumer.incremental_assign([tp])
        self._assigned.add((tp.topic, tp.partition))

    def leave(self, key: Key) -> None:
        """Stop fetching a partition and forget its queue; the last to leave closes."""
        self._forget(key)
        if not self._queues and not self.closed:
            self.closed = True
            self.consumer.close()

    def _forget(self, key: Key) -> None:
        if key in self._assigned:
            self._assigned.discard(key)
            self.consumer.incremental_unassign([TopicPartition(*key)])
        for registry in (self._queues, self._handlers, self._batch):
            registry.pop(key, None)
        self._full.discard(key)
        self._held.discard(key)
        self._topics = {t for t, _ in self._queues}

    # -- records

    def fill(self, n: int, timeout: float) -> int:
        """Consume up to `n` records (serving commit callbacks too) into their partitions'
        queues; returns how many came."""
        msgs = self.consumer.consume(n, timeout)
        if not msgs:
            return 0
        queues = self._queues
        many_topics = len(self._topics) > 1
        partition: int | None = -2
        topic: str | None = None
        queue: deque[Message] | None = None
        touched: list[tuple[Key, deque[Message]]] = []
        for m in msgs:  # in runs of one partition: look a queue up once per run
            p = m.partition()
            if p != partition or (many_topics and m.topic() != topic):
                partition, topic = p, m.topic()
                key = cast(Key, (topic, partition))
                queue = queues.get(key)
                if queue is not None:
                    touched.append((key, queue))
            if queue is not None:
                queue.append(m)
            elif m.error() is not None:
                self._broadcast(m)
            # else: a record of a partition that left; it is no longer assigned
        for k, queue in touched:
            if k not in self._full and len(queue) >= HIGH_WATER * self._batch[k]:
                self._full.add(k)
                self._set_paused(k)
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
        if key in self._full and len(queue) < self._batch[key]:
            self._full.discard(key)
            self._set_paused(key)
        return out

    def queued(self, key: Key) -> int:
        return len(self._queues[key])

    def hold(self, key: Key, paused: bool) -> None:
        """The owner's pause (flows.control): fetching stops, the queue is kept."""
        if paused:
            self._held.add(key)
        else:
            self._held.discard(key)
        self._set_paused(key)

    def _set_paused(self, key: Key) -> None:
        if key not in self._assigned:
            return
        tp = [TopicPartition(*key)]
        if key in self._held or key in self._full:
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
        self._commits.append((tp.topic, tp.partition))
        self.consumer.commit(offsets=[tp], asynchronous=True)

    def _answer(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """Route Kafka's answer to a commit to the partition(s) it concerns; an error that
        names no partition answers the oldest commit not answered yet."""
        keys = [(tp.topic, tp.partition) for tp in partitions]
        if not keys and self._commits:
            keys = [self._commits[0]]
        for key in keys:
            with contextlib.suppress(ValueError):  # not there: a synchronous commit's
                self._commits.remove(key)
            ref = self._handlers.get(key)
            handler = ref() if ref is not None else None
            if handler is not None:
                handler(err, [tp for tp in partitions if (tp.topic, tp.partition) == key])
