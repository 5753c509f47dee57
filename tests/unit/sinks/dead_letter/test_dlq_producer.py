"""DeadLetterProducer's handling of records too large for the dead-letter topic and of
transient failures, with fake producers for fault injection only."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from flows.config import Settings
from sinks import failing
from sinks.dead_letter.headers import VALUE_OMITTED_HEADER
from sinks.dead_letter.producer import DeadLetterProducer
from sinks.errors import DeadLetterDeliveryError
from sinks.model import DeadLetter, Record

PRODUCER = "sinks.dead_letter.producer.Producer"


class FakeClock:
    """Records sleeps instead of sleeping; `on_sleep` may act on each."""

    def __init__(self, on_sleep: Any = None) -> None:
        self.now = 0.0
        self.on_sleep = on_sleep

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float, /) -> None:
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(seconds)


def dlq_producer(env: dict[str, str], clock: Any = None) -> DeadLetterProducer:
    config = Settings.load(env).dead_letter_config
    assert config is not None
    return DeadLetterProducer(config, clock or FakeClock())


class FakeProducer:
    """Refuses values over `limit` bytes: locally, or later in the delivery report."""

    def __init__(self, conf: dict[str, Any], limit: int = 100, local: bool = True) -> None:
        self.limit, self.local = limit, local
        self.sent: list[dict[str, Any]] = []
        self.reports: list[tuple[Any, KafkaError | None]] = []
        self.purged = False

    def produce(self, topic: str, value: bytes | None, key: bytes | None, headers: Any,
                on_delivery: Any) -> None:  # fmt: skip
        too_large = value is not None and len(value) > self.limit
        if too_large and self.local:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        err = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if too_large else None
        self.reports.append((on_delivery, err))
        if err is None:
            self.sent.append({"value": value, "key": key, "headers": dict(headers)})

    def flush(self, timeout: float) -> int:
        for cb, err in self.reports:
            cb(err, None)
        self.reports.clear()
        return 0

    def poll(self, timeout: float) -> int:
        return 0

    def close(self) -> bool:
        return True

    def purge(self) -> None:
        self.purged = True
        self.reports.clear()


def _producer(monkeypatch, fake: list[FakeProducer], local: bool) -> DeadLetterProducer:
    monkeypatch.setattr(
        PRODUCER,
        lambda conf: fake.append(FakeProducer(conf, local=local)) or fake[-1],
    )
    return dlq_producer({"KAFKA_TOPICS": "t", "DLQ_TOPIC": "dlq"})


BIG = DeadLetter(Record("t", 2, 7, None, b"k", b"x" * 500), "index", "E", "too big for ES")
SMALL = DeadLetter(Record("t", 2, 8, None, b"k2", b"y"), "deserialize", "E", "bad")


def test_a_record_too_large_for_any_producer_is_sent_without_its_value(monkeypatch):
    fake: list[FakeProducer] = []
    _producer(monkeypatch, fake, local=True).send([BIG, SMALL])

    sent = {m["key"]: m for m in fake[0].sent}
    assert sent[b"k2"]["value"] == b"y"  # the other record is untouched
    assert sent[b"k"]["value"] is None
    note = sent[b"k"]["headers"][VALUE_OMITTED_HEADER].decode()
    assert "500 bytes" in note and "t/2@7" in note
    assert sent[b"k"]["headers"]["__connect.errors.offset"] == b"7"


class BatchLimitProducer(FakeProducer):
    """Like a broker whose topic has a max.message.bytes of `limit`: a request (what was
    produced since the last flush) over it is refused whole, in the delivery reports."""

    def __init__(self, conf: dict[str, Any], limit: int = 100) -> None:
        super().__init__(conf, limit=limit, local=False)
        self.queued: list[tuple[Any, dict[str, Any]]] = []
        self.requests: list[list[bytes | None]] = []

    def produce(self, topic: str, value: bytes | None, key: bytes | None, headers: Any,
                on_delivery: Any) -> None:  # fmt: skip
        self.queued.append((on_delivery, {"value": value, "key": key, "headers": dict(headers)}))

    def flush(self, timeout: float) -> int:
        if self.queued:
            self.requests.append([m["value"] for _, m in self.queued])
        size = sum(len(m["value"] or b"") for _, m in self.queued)
        err = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if size > self.limit else None
        for cb, m in self.queued:
            if err is None:
                self.sent.append(m)
            cb(err, None)
        self.queued.clear()
        return 0


def _batch_producer(monkeypatch, fake: list[FakeProducer], **env: str) -> DeadLetterProducer:
    monkeypatch.setattr(
        PRODUCER,
        lambda conf: fake.append(BatchLimitProducer(conf)) or fake[-1],
    )
    monkeypatch.setattr(DeadLetterProducer, "_topic_limit", lambda self: "100", raising=False)
    return dlq_producer({"KAFKA_TOPICS": "t", "DLQ_TOPIC": "dlq", **env})


def _letter(offset: int, size: int) -> DeadLetter:
    return DeadLetter(Record("t", 2, offset, None, b"k", b"v" * size), "index", "E", "refused")


@pytest.fixture(autouse=True)
def _not_failing() -> Any:
    failing.clear()
    yield
    failing.clear()


def test_a_record_the_topic_refuses_as_too_large_stops_the_flow_naming_the_limit(monkeypatch):
    """Design weakness 3: retried forever before; now one line, and nothing committed."""
    fake: list[FakeProducer] = []
    producer = _batch_producer(monkeypatch, fake)
    with pytest.raises(DeadLetterDeliveryError) as info:
        producer.send([_letter(7, 500)])
    msg = str(info.value)
    assert msg.startswith("DLQ_TOPIC: topic dlq refused the dead letter of t/2@7 (")
    assert "max.message.bytes (100): raise max.message.bytes on the topic" in msg
    assert "nothing past this record is committed" in msg
    assert [len(f.requests) for f in fake] == [1, 1]  # once more alone, then not retried
    assert fake[0].sent == fake[1].sent == []
    assert failing.failing()  # close() of every sink partition now sends nothing


def test_a_batch_the_topic_refuses_is_sent_again_one_record_at_a_time(monkeypatch):
    """Each record fits the topic's limit alone: only their batch did not."""
    fake: list[FakeProducer] = []
    letters = [_letter(1, 60), _letter(2, 60), _letter(3, 60)]
    _batch_producer(monkeypatch, fake).send(letters)
    assert [len(r) for f in fake for r in f.requests] == [3, 1, 1, 1]
    assert [m["value"] for m in fake[1].sent] == [dl.record.value for dl in letters]
    assert not failing.failing()


def test_the_culprit_of_a_refused_batch_stops_the_flow(monkeypatch):
    fake: list[FakeProducer] = []
    producer = _batch_producer(monkeypatch, fake)
    with pytest.raises(DeadLetterDeliveryError, match="t/2@2 "):
        producer.send([_letter(1, 60), _letter(2, 500), _letter(3, 60)])
    assert [m["value"] for m in fake[1].sent] == [b"v" * 60]  # the one before it


def test_a_letter_refused_as_too_large_is_named_even_once_the_budget_is_spent(monkeypatch):
    """A size refusal is not transient: the letter goes alone at once, and its error names
    it and the limit, not DLQ_RETRY_BUDGET_S, however long the first flush took."""
    clock = FakeClock()
    fake: list[FakeProducer] = []

    class SlowBroker(BatchLimitProducer):
        def flush(self, timeout: float) -> int:
            clock.now += 20
            return super().flush(timeout)

    monkeypatch.setattr(PRODUCER, lambda conf: fake.append(SlowBroker(conf)) or fake[-1])
    monkeypatch.setattr(DeadLetterProducer, "_topic_limit", lambda self: "100", raising=False)
    env = {"KAFKA_TOPICS": "t", "DLQ_TOPIC": "dlq", "DLQ_RETRY_BUDGET_S": "15"}
    with pytest.raises(DeadLetterDeliveryError, match=r"refused the dead letter of t/2@1 \("):
        dlq_producer(env, clock).send([_letter(1, 500)])


def test_a_size_refusal_while_the_flow_stops_is_not_tried_again(monkeypatch):
    """Another partition stopped the flow: the lone pass (a flush per letter, each up to
    30 s against a broker gone away) is not started."""
    fake: list[FakeProducer] = []
    producer = _batch_producer(monkeypatch, fake)
    failing.mark()
    with pytest.raises(DeadLetterDeliveryError, match="the flow is stopping"):
        producer.send([_letter(1, 60), _letter(2, 60)])
    assert [len(f.requests) for f in fake[1:]] == [0]


class StuckBroker(BatchLimitProducer):
    """Confirms nothing (each flush takes 10 s and leaves every record queued); close()
    flushes what is queued first, as librdkafka's does, so it must find nothing."""

    def __init__(self, conf: dict[str, Any], clock: FakeClock) -> None:
        super().__init__(conf)
        self.clock = clock

    def flush(self, timeout: float) -> int:
        self.clock.now += 10
        return len(self.queued)

    def purge(self) -> None:
        super().purge()
        self.queued.clear()

    def close(self) -> bool:
        assert not self.queued, "close() would wait on records never to be confirmed"
        return True


def test_the_lone_producer_is_purged_before_it_is_closed_when_the_flow_stops(monkeypatch):
    clock = FakeClock()
    fake: list[FakeProducer] = []

    def make(conf: dict[str, Any]) -> FakeProducer:
        fake.append(BatchLimitProducer(conf) if not fake else StuckBroker(conf, clock))
        return fake[-1]

    monkeypatch.setattr(PRODUCER, make)
    monkeypatch.setattr(DeadLetterProducer, "_topic_limit", lambda self: "100", raising=False)
    env = {"KAFKA_TOPICS": "t", "DLQ_TOPIC": "dlq", "DLQ_RETRY_BUDGET_S": "15"}
    with pytest.raises(DeadLetterDeliveryError, match="deliveries stay unconfirmed"):
        dlq_producer(env, clock).send([_letter(1, 60), _letter(2, 60)])
    assert fake[1].purged


def test_a_letter_refused_only_with_another_threads_is_not_named_the_culprit(monkeypatch):
    """The producer is shared per process: another thread's too-large letter can share
    the broker's batch with this thread's lone small one. The small one is produced again
    through a producer of its own, where it is accepted."""
    fake: list[FakeProducer] = []
    producer = _batch_producer(monkeypatch, fake)
    shared = fake[0]
    assert isinstance(shared, BatchLimitProducer)
    shared.queued.append((lambda err, msg: None, {"value": b"x" * 500}))  # another thread's
    producer.send([_letter(1, 60)])
    assert [m["value"] for m in fake[1].sent] == [b"v" * 60]
    assert not failing.failing()


class FlakyProducer(FakeProducer):
    """Every delivery fails with a transient broker error."""

    def flush(self, timeout: float) -> int:
        for cb, _err in self.reports:
            cb(KafkaError(KafkaError.NOT_ENOUGH_REPLICAS), None)
        self.reports.clear()
        return 0


def test_dlq_retry_budget_s_bounds_transient_retries(monkeypatch):
    fake: list[FakeProducer] = []
    monkeypatch.setattr(PRODUCER, lambda conf: fake.append(FlakyProducer(conf)) or fake[-1])
    clock = FakeClock()
    env = {
        "KAFKA_TOPICS": "t",
        "DLQ_TOPIC": "dlq",
        "DLQ_RETRY_BUDGET_S": "5",
        "ES_RETRY_BUDGET_S": "0",
    }
    producer = dlq_producer(env, clock)
    with pytest.raises(DeadLetterDeliveryError, match=r"for over DLQ_RETRY_BUDGET_S=5\.0s"):
        producer.send([SMALL])
    assert 5 < clock.now < 5 + 10.0  # gave up within one backoff of the budget
    assert failing.failing()


def test_transient_retries_stop_once_the_flow_is_failing(monkeypatch):
    fake: list[FakeProducer] = []
    monkeypatch.setattr(PRODUCER, lambda conf: fake.append(FlakyProducer(conf)) or fake[-1])
    clock = FakeClock(on_sleep=lambda _s: failing.mark())
    producer = dlq_producer({"KAFKA_TOPICS": "t", "DLQ_TOPIC": "dlq"}, clock)
    with pytest.raises(DeadLetterDeliveryError, match="the flow is stopping"):
        producer.send([SMALL])


class FlakyThenFine(FakeProducer):
    """The first `failures` flushes fail every delivery; then the broker is back."""

    def __init__(self, conf: dict[str, Any], failures: int) -> None:
        super().__init__(conf)
        self.failures = failures

    def flush(self, timeout: float) -> int:
        if self.failures:
            self.failures -= 1
            for cb, _err in self.reports:
                cb(KafkaError(KafkaError.NOT_ENOUGH_REPLICAS), None)
            self.reports.clear()
            return 0
        return super().flush(timeout)


def test_dead_letters_have_their_own_budget_and_full_jitter_backoff(monkeypatch):
    """ES_RETRY_BUDGET_S bounds Elasticsearch, not the dead-letter topic (it once did)."""
    fake: list[FakeProducer] = []
    monkeypatch.setattr(PRODUCER, lambda conf: fake.append(FlakyThenFine(conf, 30)) or fake[-1])
    sleeps: list[float] = []
    clock = FakeClock(on_sleep=sleeps.append)
    env = {"KAFKA_TOPICS": "t", "DLQ_TOPIC": "dlq", "ES_RETRY_BUDGET_S": "1"}
    dlq_producer(env, clock).send([SMALL])  # returns: confirmed at the 31st try
    assert fake[0].failures == 0 and not fake[0].reports
    assert len(sleeps) == 30 and clock.now > 1  # DLQ_RETRY_BUDGET_S=0: retried on
    caps = [min(10.0, 0.1 * 2**n) for n in range(1, 31)]
    assert all(0 <= s <= c for s, c in zip(sleeps, caps, strict=True))
    assert max(sleeps) > 5.0  # doubling reaches the 10 s cap
    assert not failing.failing()


class RefusingBroker(BatchLimitProducer):
    """Like a compacted topic: a request holding a record without a key is refused whole,
    for good (INVALID_RECORD), however often it is produced."""

    def flush(self, timeout: float) -> int:
        if self.queued:
            self.requests.append([m["value"] for _, m in self.queued])
        bad = any(m["key"] is None for _, m in self.queued)
        err = KafkaError(KafkaError.INVALID_RECORD, "Broker: Broker failed to validate record")
        for cb, m in self.queued:
            if not bad:
                self.sent.append(m)
            cb(err if bad else None, None)
        self.queued.clear()
        return 0


def _no_backoff(seconds: float) -> None:
    raise AssertionError(f"a refusal for good was retried as transient (backoff {seconds:.1f}s)")


def test_a_letter_the_topic_refuses_for_good_stops_the_flow_naming_the_reason(monkeypatch):
    """Not produced again forever: once more alone, to name the culprit, then one line."""
    fake: list[FakeProducer] = []
    monkeypatch.setattr(PRODUCER, lambda conf: fake.append(RefusingBroker(conf)) or fake[-1])
    producer = dlq_producer({"KAFKA_TOPICS": "t", "DLQ_TOPIC": "dlq"}, FakeClock(_no_backoff))
    keyless = DeadLetter(Record("t", 2, 5, None, None, b"{bad"), "deserialize", "E", "bad")
    with pytest.raises(DeadLetterDeliveryError) as info:
        producer.send([_letter(4, 10), keyless, _letter(6, 10)])
    assert str(info.value) == (
        "DLQ_TOPIC: topic dlq refused the dead letter of t/2@5 for good: Broker: Broker "
        "failed to validate record (INVALID_RECORD; a compacted topic refuses a record "
        "without a key); nothing past this record is committed"
    )
    assert [m["value"] for m in fake[1].sent] == [b"v" * 10]  # the one before it, alone
    assert failing.failing()


@pytest.mark.parametrize(
    "code", [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.UNKNOWN_TOPIC_OR_PART]
)
def test_other_refusals_for_good_stop_the_flow_too(monkeypatch, code):
    class Refusing(FakeProducer):
        def flush(self, timeout: float) -> int:
            for cb, _err in self.reports:
                cb(KafkaError(code), None)
            self.reports.clear()
            return 0

    monkeypatch.setattr(PRODUCER, lambda conf: Refusing(conf))
    producer = dlq_producer({"KAFKA_TOPICS": "t", "DLQ_TOPIC": "dlq"}, FakeClock(_no_backoff))
    reason = KafkaError(code).name()
    with pytest.raises(DeadLetterDeliveryError, match=rf"of t/2@8 for good: .*\({reason}"):
        producer.send([SMALL])


def test_a_delivery_timeout_is_retried_although_its_report_is_not_marked_retriable(monkeypatch):
    """A report's error never carries librdkafka's retriable flag (the client builds it
    from the code), so a broker away for `message.timeout.ms` must not read as final."""
    assert not KafkaError(KafkaError._MSG_TIMED_OUT).retriable()

    class TimesOutOnce(FlakyThenFine):
        def flush(self, timeout: float) -> int:
            if self.failures:
                self.failures -= 1
                for cb, _err in self.reports:
                    cb(KafkaError(KafkaError._MSG_TIMED_OUT), None)
                self.reports.clear()
                return 0
            return FakeProducer.flush(self, timeout)

    fake: list[FakeProducer] = []
    monkeypatch.setattr(PRODUCER, lambda conf: fake.append(TimesOutOnce(conf, 2)) or fake[-1])
    dlq_producer({"KAFKA_TOPICS": "t", "DLQ_TOPIC": "dlq"}).send([SMALL])
    assert len(fake) == 1 and fake[0].sent and not failing.failing()


def test_letters_linger_in_the_producer_until_a_flush_confirms_them(monkeypatch):
    """The shared producer waits for more letters before a request (a request per letter
    cost more than the letter), a setting a user's KAFKA_CONFIG_LINGER_MS still overrides;
    `confirm()` still flushes what is queued."""
    confs: list[dict[str, Any]] = []
    fake: list[FakeProducer] = []

    def make(conf: dict[str, Any]) -> FakeProducer:
        confs.append(conf)
        fake.append(FakeProducer(conf))
        return fake[-1]

    monkeypatch.setattr(PRODUCER, make)
    producer = dlq_producer({"KAFKA_TOPICS": "t", "DLQ_TOPIC": "dlq"})
    assert confs[0]["linger.ms"] == 1000
    failed: list[Any] = []
    producer.produce([SMALL], failed)
    assert fake[0].reports  # queued, not yet confirmed
    producer.confirm(failed)
    assert not fake[0].reports and fake[0].sent and not failed
    dlq_producer({"KAFKA_TOPICS": "t", "DLQ_TOPIC": "dlq", "KAFKA_CONFIG_LINGER_MS": "7"})
    assert confs[1]["linger.ms"] in (7, "7")
