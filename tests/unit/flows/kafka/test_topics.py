"""flows.kafka.topics: the group's committed offsets are asked again while a fresh broker creates
or loads the group's coordinator, or does not answer in time (a flow started with its
broker crashed at start on NOT_COORDINATOR)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from flows.kafka import topics
from flows.runtime import shutdown
from sinks.backoff import Backoff


class Coordinator:
    """A consumer whose `committed` fails with `errors` first, then answers."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return [TopicPartition(tp.topic, tp.partition, 7) for tp in tps]


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics, "COORDINATOR_BACKOFF", Backoff(0.001, 0.002, budget_s=1.0))


def test_a_loading_coordinator_is_asked_again() -> None:
    loading = (
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError._TIMED_OUT,  # one try's wait ran out
    )
    consumer: Any = Coordinator(*loading)
    (tp,) = topics.committed(consumer, [TopicPartition("t", 0)])
    assert (tp.offset, consumer.calls) == (7, 4)


def test_a_coordinator_that_never_answers_is_raised_after_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(topics, "COORDINATOR_BACKOFF", Backoff(0.001, 0.002, budget_s=0.05))
    consumer: Any = Coordinator(*[KafkaError._TIMED_OUT] * 10_000)
    with pytest.raises(KafkaException):
        topics.committed(consumer, [TopicPartition("t", 0)])
    assert 1 < consumer.calls < 10_000


def test_a_stop_ends_the_tries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutdown, "_requested", threading.Event())
    shutdown.request()
    consumer: Any = Coordinator(KafkaError._TIMED_OUT, KafkaError._TIMED_OUT)
    with pytest.raises(KafkaException):
        topics.committed(consumer, [TopicPartition("t", 0)])
    assert consumer.calls == 1


def test_other_errors_are_raised_at_once() -> None:
    consumer: Any = Coordinator(KafkaError.GROUP_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        topics.committed(consumer, [TopicPartition("t", 0)])
    assert consumer.calls == 1
