"""The topics and partitions the flow reads, looked up on the broker: at start (the entry
point's check, `KafkaSource.list_parts`), by the metadata watcher (`flows.kafka.discovery`) and by
the `es-sink` command, so that all of them agree on what "the configured topics" are."""

from __future__ import annotations

import logging
import re
import threading

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from flows.config import Settings
from flows.errors import ConfigError
from flows.runtime import shutdown
from sinks.backoff import Backoff

logger = logging.getLogger(__name__)

__all__ = ["committed", "find_topics", "kafka_config_error"]


METADATA_BACKOFF = Backoff(initial_s=0.05, max_s=1.0, budget_s=30.0)
"""Looking up the topics: 30 s of tries (each waits up to 2 s for an answer)."""


COORDINATOR_BACKOFF = Backoff(initial_s=0.1, max_s=2.0, budget_s=60.0)
"""Asking a group's committed offsets while the broker creates or loads its coordinator."""
COMMITTED_TIMEOUT_S = 10.0
"""One try's wait for the answer: a coordinator answers in milliseconds once it is there,
and several tries fit in COORDINATOR_BACKOFF's budget."""

COORDINATOR_LOADING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError._TIMED_OUT,  # no answer in time: a broker busy starting, or a hiccup
    }
)


def committed(consumer: Consumer, tps: list[TopicPartition]) -> list[TopicPartition]:
    """The group's committed offsets of `tps`. A fresh broker answers NOT_COORDINATOR (or
    that it is loading, or not in time) until it has created `__consumer_offsets` and the
    group's coordinator: a flow started with the broker must wait, not crash at start."""
    retries = COORDINATOR_BACKOFF.start()
    while True:
        try:
            return consumer.committed(tps, timeout=COMMITTED_TIMEOUT_S)
        except KafkaException as e:
            err = e.args[0]
            # Stopping: no more tries either (the stop stays bounded).
            if (
                err.code() not in COORDINATOR_LOADING
                or retries.over_budget()
                or shutdown.requested()
            ):
                raise
            if retries.count == 0:
                logger.warning(
                    "Kafka's group coordinator does not answer yet (%s); asking again for "
                    "up to %gs", err.str(), COORDINATOR_BACKOFF.budget_s,
                )  # fmt: skip
            retries.sleep(retries.next_delay(), "kafka-coordinator", err.str())


def find_topics(settings: Settings) -> dict[str, list[int]]:
    """The partitions of KAFKA_TOPICS or KAFKA_TOPICS_REGEX; ConfigError if none or missing,
    or if DLQ_TOPIC is missing or among them (the flow would read its own dead letters)."""
    s = settings
    if s.dlq_topic and not s.topics_regex and s.dlq_topic in s.topics:
        msg = (
            f"KAFKA_TOPICS: contains DLQ_TOPIC {s.dlq_topic}; the flow would read its own "
            "dead letters again and again"
        )
        raise ConfigError(msg)
    auth_errors: list[KafkaError] = []

    def on_error(err: KafkaError) -> None:
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
            auth_errors.append(err)

    try:
        admin = AdminClient(s.librdkafka("admin", error_cb=on_error))
    except KafkaException as e:
        raise kafka_config_error(e) from None
    retries = METADATA_BACKOFF.start()
    while True:
        try:
            meta = admin.list_topics(timeout=2)
            break
        except KafkaException as e:
            admin.poll(0)  # serves error_cb
            if auth_errors:
                msg = (
                    "KAFKA_CONFIG_SASL_USERNAME/KAFKA_CONFIG_SASL_PASSWORD: Kafka refused the "
                    f"credentials: {auth_errors[0].str()}"
                )
                raise ConfigError(msg) from None
            if retries.over_budget():
                msg = f"KAFKA_BOOTSTRAP_SERVERS: cannot reach Kafka at {s.bootstrap_servers}: {e}"
                raise ConfigError(msg) from None
            retries.sleep(retries.next_delay(), "kafka-metadata", str(e))
    if s.dlq_topic and s.dlq_topic not in meta.topics:
        msg = (
            f"DLQ_TOPIC: no topic {s.dlq_topic} on {s.bootstrap_servers}; create it (the "
            "first dead letter would otherwise stall the flow)"
        )
        raise ConfigError(msg)
    if s.topics_regex:
        pattern = re.compile(s.topics_regex)
        matched = sorted(t for t in meta.topics if pattern.fullmatch(t))
        # Never the dead-letter topic (each dead letter would fail and be dead-lettered
        # again, forever) nor Kafka's internal topics (__consumer_offsets, ...).
        excluded = [t for t in matched if t == s.dlq_topic or t.startswith("__")]
        topics = [t for t in matched if t not in excluded]
        _log_excluded(excluded)
        if not topics:
            msg = f"KAFKA_TOPICS_REGEX: no topic matches {s.topics_regex!r}"
            if excluded:
                msg += f" but {', '.join(excluded)} (dead-letter or internal, never read)"
            raise ConfigError(msg)
    else:
        missing = [t for t in s.topics if t not in meta.topics]
        if missing:
            msg = f"KAFKA_TOPICS: no topic {', '.join(missing)} on {s.bootstrap_servers}"
            raise ConfigError(msg)
        topics = list(s.topics)
    return {t: sorted(meta.topics[t].partitions) for t in topics}


_excluded_lock = threading.Lock()
_excluded_logged: set[str] = set()


def _log_excluded(topics: list[str]) -> None:
    """Log each topic the regex matched but the flow does not read, once per process."""
    with _excluded_lock:
        new = [t for t in topics if t not in _excluded_logged]
        _excluded_logged.update(new)
    if new:
        logger.info(
            "KAFKA_TOPICS_REGEX: not reading %s (the dead-letter topic or internal topics)",
            ", ".join(new),
        )


def kafka_config_error(exc: KafkaException) -> ConfigError:
    """librdkafka's refusal of a setting, named as the KAFKA_CONFIG_* variable to fix."""
    text = str(exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else exc)
    m = re.search(r'property:? "?([\w.]+)"?', text)
    name = f"KAFKA_CONFIG_{m.group(1).upper().replace('.', '_')}" if m else "KAFKA_CONFIG_*"
    return ConfigError(f"{name}: librdkafka refused the configuration: {text}")
