"""The dead-letter producer: original key, value and headers, plus error headers, confirmed.

Every produce has a delivery callback, and `send()` returns only once Kafka confirmed every
record; failed deliveries are produced again with backoff (forever, or for
DLQ_RETRY_BUDGET_S). The Elasticsearch sink's bulk threads call it before their bulk is
done; the dead-letter sink produces with `produce()` as records come and confirms with
`confirm()` in its `snapshot()` (a Kafka round trip per worker batch held the worker), so
offsets are never committed past an unconfirmed dead letter. A dead letter the topic refuses
for good (larger than its `max.message.bytes`, not authorised, a record the topic cannot
take such as a null key on a compacted topic, the topic gone) stops the flow with one line
saying so: retrying cannot fix it, and dropping it would break "every failed record
reaches the dead-letter topic with its original bytes, or stops the flow".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from sinks import failing, metrics, progress
from sinks.backoff import SYSTEM_CLOCK, Backoff, Clock, Retries, end_wait, list_wait
from sinks.dead_letter.config import DeadLetterConfig
from sinks.dead_letter.headers import VALUE_OMITTED_HEADER, error_headers
from sinks.errors import DeadLetterDeliveryError
from sinks.model import DeadLetter
from sinks.resources import locked_cache

logger = logging.getLogger(__name__)

_TOO_LARGE = (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE)
_TRANSIENT = frozenset({
    KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TIMED_OUT_QUEUE,
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION, KafkaError.BROKER_NOT_AVAILABLE,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.KAFKA_STORAGE_ERROR, KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
})  # fmt: skip
"""Delivery errors a later attempt can pass: the broker or the network away, a leader or
in-sync replicas missing. A delivery report's `retriable()` cannot say so: the client
builds the report's error from its code alone, so the flag is False even for a timeout;
and librdkafka has already retried what it retries itself (until `message.timeout.ms`)."""
_HINTS = {
    KafkaError.INVALID_RECORD: "a compacted topic refuses a record without a key",
    KafkaError.INVALID_MSG: "a compacted topic refuses a record without a key",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "grant the producer WRITE on the topic",
    KafkaError.UNKNOWN_TOPIC_OR_PART: "the topic was deleted? create it",
    KafkaError._UNKNOWN_TOPIC: "the topic was deleted? create it",
}
RETRY_INITIAL_S = 0.1
RETRY_MAX_S = 10.0
_PRODUCER_DEFAULTS = {
    "linger.ms": 1000,
    "message.max.bytes": 1_000_000_000,
    "compression.type": "lz4",
}
"""A long linger: bad records trickle in, and a short one made a produce request (with the
broker's and librdkafka's work for it) of almost every letter. Nothing waits on it:
`flush()` in `send()` and `confirm()` sends what is queued at once, linger or not."""
# No duplicates or reordering on retries, and no loss on a leader change.
_PRODUCER_OVERRIDES = {"enable.idempotence": True, "acks": "all"}
Failed = tuple[DeadLetter, KafkaError]


class DeadLetterProducer:
    """Produces dead letters and waits until Kafka confirmed each one: in `send()`, or in
    `confirm()` for what `produce()` queued."""

    def __init__(self, config: DeadLetterConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self._topic = config.topic
        self._budget_s = config.retry_budget_s
        self._backoff = Backoff(RETRY_INITIAL_S, RETRY_MAX_S, budget_s=config.retry_budget_s)
        self._clock = clock
        self._secrets = config.secrets
        self._admin_conf = dict(config.kafka)  # to read the topic's limit in an error
        self._conf = {**_PRODUCER_DEFAULTS, **config.kafka, **_PRODUCER_OVERRIDES}
        self._producer = Producer(self._conf)

    def send(self, letters: Sequence[DeadLetter]) -> None:
        """Produce `letters` and block until all are confirmed (retrying failed ones).

        Transient broker errors are retried with backoff, holding back the commit, forever
        or for DLQ_RETRY_BUDGET_S. A record the topic refuses for good (`_final`: too large
        for its `max.message.bytes`, not authorised, invalid for the topic, the topic gone)
        is produced again alone, by a producer of its own (it may only have shared a
        batch with others, this thread's or another's); refused alone, it stops the flow
        (DeadLetterDeliveryError naming DLQ_TOPIC, the record and the broker's reason, or
        the limit). A record too large for any producer (over
        librdkafka's 1 GB message.max.bytes) is sent without its value, with a header
        naming where the original is: never dropped, never a crash loop.
        """
        self._send(letters, self._backoff.start(self._clock))

    def _send(self, letters: Sequence[DeadLetter], retries: Retries) -> None:
        """`send()` within the budget `retries` already counts."""
        pending = list(letters)
        oversized: set[int] = set()
        # After a refusal for good: one record per request, to find the culprit, through a
        # producer no other thread shares (the broker refuses a whole batch, and in the
        # shared producer another thread's letter may share it: the wrong record is named).
        alone: Producer | None = None
        try:
            while pending:
                failed: list[Failed] = []
                for dl in pending:
                    self._produce(dl, failed, oversized, retries=retries, producer=alone)
                    if alone is not None:  # refused alone: this record is the culprit
                        self._confirm(retries, alone)
                        if failed and failed[-1][0] is dl and _final(failed[-1][1]):
                            raise self._refused(dl, failed[-1][1], oversized)
                self._confirm(retries, alone)
                if not failed:
                    break
                pending = [dl for dl, _ in failed]
                if alone is None and any(_final(err) for _, err in failed):
                    alone = Producer({**self._conf, "linger.ms": 0})
                    if all(_final(err) for _, err in failed):
                        self._check_stopping(f"delivery failed: {failed[0][1]}")
                        continue  # not transient: alone at once, named even past the budget
                self._check_budget(retries, f"delivery failed: {failed[0][1]}")
                delay = retries.next_delay()
                logger.warning(
                    "dead-letter topic %s: %d deliveries failed (%s); retrying in %.1fs",
                    self._topic, len(failed), failed[0][1], delay,
                )  # fmt: skip
                retries.sleep(delay, "dead-letter", f"delivery failed: {failed[0][1]}")
        except BaseException:  # any error here stops the flow
            failing.mark()
            if alone is not None:
                alone.purge()  # never waited for: close() would flush it, unbounded
            raise
        finally:
            if alone is not None:
                alone.close()
        for dl in letters:
            metrics.DEAD_LETTERS.labels(dl.stage).inc()

    def produce(self, letters: Sequence[DeadLetter], failed: list[Failed]) -> int:
        """Produce `letters` without waiting for Kafka: the bytes queued (keys, values and
        headers). A delivery that fails lands in `failed` (whichever thread serves the
        delivery reports) for `confirm()`; only the caller's thread may produce into it."""
        oversized: set[int] = set()
        size = 0
        try:
            for dl in letters:
                size += self._produce(dl, failed, oversized, count=True)
            self._producer.poll(0)  # serve the reports so far: they hold their records
        except BaseException:
            failing.mark()
            raise
        return size

    def confirm(self, failed: list[Failed]) -> None:
        """Wait until every record `produce()` queued is confirmed; produce the failed ones
        again as `send()` does (backoff, a record too large stops the flow), all within one
        DLQ_RETRY_BUDGET_S.

        When `flush()` returns, every delivery report of what was queued has run, on
        whichever thread served it, and nothing else produces into `failed` meanwhile (see
        `produce()`), so taking the list needs no lock."""
        retries = self._backoff.start(self._clock)
        try:
            self._confirm(retries)
        except BaseException:
            failing.mark()
            raise
        if failed:
            taken, failed[:] = failed[:], []
            letters = [dl for dl, _ in taken]
            logger.warning(
                "dead-letter topic %s: %d deliveries failed (%s); producing them again",
                self._topic, len(letters), taken[0][1],
            )  # fmt: skip
            self._send(letters, retries)

    def _confirm(self, retries: Retries, producer: Producer | None = None) -> None:
        """Wait until librdkafka has reported every delivery queued in `producer` (None:
        the shared one)."""
        producer = producer or self._producer
        remaining = producer.flush(30)
        if remaining:
            logger.warning(
                "dead-letter topic %s: %d deliveries unconfirmed", self._topic, remaining
            )
            # Unconfirmed messages are still queued in librdkafka; wait on them.
            while producer.flush(30):
                progress.beat()
                self._check_budget(retries, "deliveries stay unconfirmed")

    def _refused(
        self, dl: DeadLetter, err: KafkaError, oversized: set[int]
    ) -> DeadLetterDeliveryError:
        """The broker refused this record alone, for good."""
        if err.code() in _TOO_LARGE:
            return self._refused_as_too_large(dl, oversized)
        hint = _HINTS.get(err.code())
        return DeadLetterDeliveryError(
            f"DLQ_TOPIC: topic {self._topic} refused the dead letter of {dl.record.where} "
            f"for good: {err.str()} ({err.name()}{f'; {hint}' if hint else ''}); nothing "
            "past this record is committed"
        )

    def _refused_as_too_large(self, dl: DeadLetter, oversized: set[int]) -> DeadLetterDeliveryError:
        """The broker refused this record alone as larger than the topic accepts."""
        rec = dl.record
        size = len(rec.key or b"") + (0 if id(dl) in oversized else len(rec.value or b""))
        size += sum(len(k) + len(v or b"") for k, v in (*rec.headers, *error_headers(dl)))
        limit = self._topic_limit()
        return DeadLetterDeliveryError(
            f"DLQ_TOPIC: topic {self._topic} refused the dead letter of "
            f"{rec.where} ({size} bytes) as larger than its "
            f"max.message.bytes{f' ({limit})' if limit else ''}: raise max.message.bytes on "
            "the topic and run again; nothing past this record is committed"
        )

    def _topic_limit(self) -> str | None:
        """The topic's max.message.bytes, best effort (for the error message only)."""
        try:
            from confluent_kafka.admin import AdminClient, ConfigResource

            resource = ConfigResource("topic", self._topic)
            admin: Any = AdminClient(self._admin_conf)
            configs = admin.describe_configs([resource], request_timeout=10)[resource].result(10)
            return str(configs["max.message.bytes"].value)
        except Exception:  # the error is about the record; the limit is a courtesy
            return None

    def _produce(
        self,
        dl: DeadLetter,
        failed: list[Failed],
        oversized: set[int],
        count: bool = False,
        retries: Retries | None = None,
        producer: Producer | None = None,
    ) -> int:
        """Queue `dl` in `producer` (None: the shared one): the bytes of its key, value and
        headers. With `count`, its delivery counts it in the metrics (`send()` counts its
        letters once all are confirmed). A full local queue is waited out within `retries`
        (the caller's budget), or a budget of its own."""
        target = producer or self._producer

        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                failed.append((dl, err))
            elif count:
                metrics.DEAD_LETTERS.labels(dl.stage).inc()

        rec = dl.record
        value = rec.value
        headers: list[tuple[str, str | bytes | None]] = [
            *rec.headers,
            *error_headers(dl, self._secrets),
        ]
        if id(dl) in oversized:
            value = None
            note = (
                f"original value of {len(rec.value or b'')} bytes is larger than the "
                f"dead-letter topic accepts; read it from {rec.where}"
            )
            headers.append((VALUE_OMITTED_HEADER, note.encode()))
        waiting = retries
        queue_full: int | None = None  # its `under_way()` entry while the queue is full
        try:
            while True:
                try:
                    target.produce(
                        self._topic,
                        value=value,
                        key=rec.key,
                        headers=headers,
                        on_delivery=on_delivery,
                    )
                    size = len(value or b"") + len(rec.key or b"")
                    return size + sum(len(k) + len(v or b"") for k, v in headers)
                except BufferError:  # local queue full: let deliveries drain, then go on
                    waiting = waiting or self._backoff.start(self._clock)
                    if queue_full is None:
                        queue_full = list_wait("dead-letter", "the producer's queue is full")
                    target.poll(0.5)
                    progress.beat()  # waiting on purpose: the worker is alive
                    self._check_budget(waiting, "the producer's queue stayed full")
                except KafkaException as e:
                    err = e.args[0]
                    if not isinstance(err, KafkaError) or err.code() not in _TOO_LARGE:
                        raise
                    if id(dl) in oversized:  # too large even without its value
                        raise
                    logger.warning(
                        "dead-letter topic %s: %s@%d is too large (%s); sending it without "
                        "its value",
                        self._topic, rec.topic, rec.offset, err.str(),
                    )  # fmt: skip
                    oversized.add(id(dl))
                    return self._produce(dl, failed, oversized, count, waiting, producer)
        finally:
            if queue_full is not None:
                end_wait(queue_full)

    def _check_budget(self, retries: Retries, why: str) -> None:
        if retries.over_budget():
            msg = (
                f"dead-letter topic {self._topic}: {why} "
                f"for over DLQ_RETRY_BUDGET_S={self._budget_s}s"
            )
            raise DeadLetterDeliveryError(msg)
        self._check_stopping(why)

    def _check_stopping(self, why: str) -> None:
        if failing.failing():
            msg = f"dead-letter topic {self._topic}: {why}; stopped retrying: the flow is stopping"
            raise DeadLetterDeliveryError(msg)

    def close(self) -> None:
        """Nothing to deliver: `send()` returned only once every record was confirmed, what
        `produce()` queued since the last `confirm()` was never committed, and Bytewax also
        calls close() while unwinding after an error, when waiting on the broker would only
        delay the stop."""


def _final(err: KafkaError) -> bool:
    """Whether the topic refused a letter for good, so that producing it again cannot
    help: librdkafka's classification (fatal, retriable) where a report carries it, else
    any error that is not `_TRANSIENT`."""
    return err.fatal() or not (err.retriable() or err.code() in _TRANSIENT)


@locked_cache
def shared_producer(config: DeadLetterConfig) -> DeadLetterProducer:
    """One producer per process and config. Sharing is safe: `send()` and `confirm()` wait
    on `flush()`, which returns only once every queued record, whoever produced it, is
    confirmed and its delivery report has run, on whichever thread served it."""
    return DeadLetterProducer(config)
