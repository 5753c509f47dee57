"""The dead-letter topic: original key, value and headers, plus Kafka Connect error headers.

Every produce has a delivery callback, and `send()` returns only once Kafka confirmed every
record; failed deliveries are produced again with backoff (forever, or for
DLQ_RETRY_BUDGET_S). Both sinks call it before their `write_batch`/`snapshot` returns, so
offsets are never committed past an unconfirmed dead letter. A dead letter the topic refuses
as larger than its `max.message.bytes` stops the flow with one line saying so: retrying
cannot fix it, and dropping it would break "every failed record reaches the dead-letter
topic with its original bytes, or stops the flow".
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from typing import Any

from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition
from confluent_kafka import KafkaError, KafkaException, Producer

from flows import metrics
from flows.config import Settings
from flows.errors import DeadLetterDeliveryError
from flows.record import DeadLetter
from sinks import failing
from sinks.es_client import locked_cache
from sinks.secrets import redact

logger = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 1000
MAX_STACKTRACE_CHARS = 8000
_P = "__connect.errors."
VALUE_OMITTED_HEADER = "__es_sink.value.omitted"
_TOO_LARGE = (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE)


def error_headers(dl: DeadLetter, secrets: Sequence[str] = ()) -> list[tuple[str, bytes]]:
    """Kafka Connect-style context headers, size-bounded, with known secrets masked."""
    rec = dl.record
    headers = [
        (_P + "topic", rec.topic.encode()),
        (_P + "partition", str(rec.partition).encode()),
        (_P + "offset", str(rec.offset).encode()),
        (_P + "stage", dl.stage.encode()),
        (_P + "exception.class.name", dl.error_class.encode()),
        (_P + "exception.message", _redact(dl.message, secrets, MAX_MESSAGE_CHARS).encode()),
    ]
    if dl.stacktrace:
        trace = _redact(dl.stacktrace, secrets, MAX_STACKTRACE_CHARS)
        headers.append((_P + "exception.stacktrace", trace.encode()))
    return headers


def _redact(text: str, secrets: Sequence[str], limit: int) -> str:
    text = redact(text, secrets)
    if len(text) > limit:
        text = text[: limit - 15] + "... (truncated)"
    return text.encode("utf-8", "replace").decode("utf-8")


class DeadLetterProducer:
    """Produces dead letters and waits until Kafka confirmed each one."""

    def __init__(self, settings: Settings) -> None:
        if not settings.dlq_topic:
            msg = "DeadLetterProducer needs DLQ_TOPIC"
            raise ValueError(msg)
        self._topic = settings.dlq_topic
        self._budget_s = settings.dlq_retry_budget_s
        self._secrets = settings.secrets()
        self._admin_conf = settings.librdkafka()  # to read the topic's limit in an error
        self._producer = Producer(
            settings.librdkafka(
                defaults={
                    "linger.ms": 5,
                    "message.max.bytes": 1_000_000_000,
                    "compression.type": "lz4",
                },
                # No duplicates or reordering on retries, and no loss on a leader change.
                **{"enable.idempotence": True, "acks": "all"},
            )
        )

    def send(self, letters: Sequence[DeadLetter]) -> None:
        """Produce `letters` and block until all are confirmed (retrying failed ones).

        Transient broker errors are retried with backoff, holding back the commit, forever
        or for DLQ_RETRY_BUDGET_S. A record the topic refuses as too large
        (`max.message.bytes`) is produced again alone (it may only have shared a batch
        with others); refused alone, it stops the flow (DeadLetterDeliveryError naming
        DLQ_TOPIC, the record and the limit). A record too large for any producer (over
        librdkafka's 1 GB message.max.bytes) is sent without its value, with a header
        naming where the original is: never dropped, never a crash loop.
        """
        pending = list(letters)
        oversized: set[int] = set()
        alone = False  # after a size refusal: one record per request, to find the culprit
        attempt = 0
        started = time.monotonic()
        try:
            while pending:
                failed: list[tuple[DeadLetter, KafkaError]] = []
                for dl in pending:
                    self._produce(dl, failed, oversized)
                    if alone:  # refused alone: this record is larger than the topic accepts
                        self._confirm(started)
                        if failed and failed[-1][0] is dl and failed[-1][1].code() in _TOO_LARGE:
                            raise self._refused_as_too_large(dl, oversized)
                self._confirm(started)
                if not failed:
                    break
                too_large = [dl for dl, err in failed if err.code() in _TOO_LARGE]
                if too_large and len(pending) == 1:
                    raise self._refused_as_too_large(too_large[0], oversized)
                alone = alone or bool(too_large)
                pending = [dl for dl, _ in failed]
                attempt += 1
                self._check_budget(started, f"delivery failed: {failed[0][1]}")
                self._retry_later(attempt, failed)
        except BaseException:  # any error here stops the flow
            failing.mark()
            raise
        for dl in letters:
            metrics.DEAD_LETTERS.labels(dl.stage).inc()

    def _confirm(self, started: float) -> None:
        """Wait until librdkafka has reported every queued delivery."""
        remaining = self._producer.flush(30)
        if remaining:
            logger.warning(
                "dead-letter topic %s: %d deliveries unconfirmed", self._topic, remaining
            )
            # Unconfirmed messages are still queued in librdkafka; wait on them.
            while self._producer.flush(30):
                self._check_budget(started, "deliveries stay unconfirmed")

    def _retry_later(self, attempt: int, failed: list[tuple[DeadLetter, KafkaError]]) -> None:
        delay = random.uniform(0, min(10.0, 0.1 * 2 ** min(attempt, 30)))  # full jitter
        logger.warning(
            "dead-letter topic %s: %d deliveries failed (%s); retrying in %.1fs",
            self._topic, len(failed), failed[0][1], delay,
        )  # fmt: skip
        time.sleep(delay)

    def _refused_as_too_large(self, dl: DeadLetter, oversized: set[int]) -> DeadLetterDeliveryError:
        """The broker refused this record alone as larger than the topic accepts."""
        rec = dl.record
        size = len(rec.key or b"") + (0 if id(dl) in oversized else len(rec.value or b""))
        size += sum(len(k) + len(v or b"") for k, v in (*rec.headers, *error_headers(dl)))
        limit = self._topic_limit()
        return DeadLetterDeliveryError(
            f"DLQ_TOPIC: topic {self._topic} refused the dead letter of "
            f"{rec.topic}/{rec.partition}@{rec.offset} ({size} bytes) as larger than its "
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
        failed: list[tuple[DeadLetter, KafkaError]],
        oversized: set[int],
    ) -> None:
        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                failed.append((dl, err))

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
                f"dead-letter topic accepts; read it from {rec.topic}/{rec.partition}@{rec.offset}"
            )
            headers.append((VALUE_OMITTED_HEADER, note.encode()))
        while True:
            try:
                self._producer.produce(
                    self._topic, value=value, key=rec.key, headers=headers, on_delivery=on_delivery
                )
                return
            except BufferError:  # local queue full: let deliveries drain, then go on
                self._producer.poll(0.5)
            except KafkaException as e:
                err = e.args[0]
                if not isinstance(err, KafkaError) or err.code() not in _TOO_LARGE:
                    raise
                if id(dl) in oversized:  # too large even without its value
                    raise
                logger.warning(
                    "dead-letter topic %s: %s@%d is too large (%s); sending it without its value",
                    self._topic, rec.topic, rec.offset, err.str(),
                )  # fmt: skip
                oversized.add(id(dl))
                self._produce(dl, failed, oversized)
                return

    def _check_budget(self, started: float, why: str) -> None:
        if self._budget_s and time.monotonic() - started > self._budget_s:
            msg = (
                f"dead-letter topic {self._topic}: {why} "
                f"for over DLQ_RETRY_BUDGET_S={self._budget_s}s"
            )
            raise DeadLetterDeliveryError(msg)
        if failing.failing():
            msg = f"dead-letter topic {self._topic}: {why}; stopped retrying: the flow is stopping"
            raise DeadLetterDeliveryError(msg)

    def close(self) -> None:
        """Nothing to deliver: `send()` returned only once every record was confirmed, and
        Bytewax also calls close() while unwinding after an error, when waiting on the
        broker would only delay the stop."""


@locked_cache
def shared_producer(settings: Settings) -> DeadLetterProducer:
    """One producer per process and settings. Sharing is safe: `send()` waits on `flush()`,
    which returns only once every queued record, whoever produced it, is confirmed."""
    return DeadLetterProducer(settings)


class DeadLetterSink(FixedPartitionedSink[DeadLetter, None]):
    """Writes dead letters from decode/transform to DLQ_TOPIC, confirmed per batch.

    Partitioned (not dynamic) so that its writes are part of the epoch Bytewax waits on
    before the source commits offsets. It keeps no state: the topic is the state.
    """

    def __init__(self, settings: Settings, partitions: int) -> None:
        self._settings = settings
        self._partitions = partitions

    def list_parts(self) -> list[str]:
        """`dlq-0000` ...: the same count as the Elasticsearch sink, then any further `dlq-`
        partition a recovery store holds (see ElasticsearchSink.list_parts)."""
        from flows.recovery_store import sink_parts

        return sink_parts("dlq", self._partitions)

    def part_fn(self, item_key: str) -> int:
        """Items are keyed by a partition number already."""
        return int(item_key)

    def build_part(
        self, step_id: str, for_part: str, resume_state: None
    ) -> StatefulSinkPartition[DeadLetter, None]:
        """The process's dead-letter producer, built at run time."""
        return _DeadLetterPartition(shared_producer(self._settings))


class _DeadLetterPartition(StatefulSinkPartition[DeadLetter, None]):
    def __init__(self, producer: DeadLetterProducer) -> None:
        self._producer = producer

    def write_batch(self, items: list[DeadLetter]) -> None:
        self._producer.send(items)

    def snapshot(self) -> None:
        return None

    def close(self) -> None:
        """`write_batch` confirmed everything already (see DeadLetterProducer.close)."""
