"""flows.policy.ErrorPolicy, dead-letter headers (sinks.dead_letter) and error pickling."""

from __future__ import annotations

import pickle

import pytest

from flows.config import Settings
from flows.errors import (
    ConfigError,
    DeadLetterDeliveryError,
    DeadLetterLimitError,
    ElasticsearchUnavailableError,
    RecordFailedError,
)
from flows.policy import ErrorPolicy
from flows.record import DeadLetter, Record
from sinks.dead_letter import MAX_MESSAGE_CHARS, MAX_STACKTRACE_CHARS, error_headers

P = "__connect.errors."


def settings(**env: str) -> Settings:
    return Settings.load({"KAFKA_TOPICS": "orders", **env})


def tolerant(**env: str) -> ErrorPolicy:
    return ErrorPolicy(settings(ERRORS_TOLERANCE="all", DLQ_TOPIC="dead", **env), "test part")


def rec(offset: int = 42, partition: int = 3, topic: str = "orders") -> Record:
    return Record(topic, partition, offset, 1_700_000_000_000, b"k", b"v", (("h", b"1"),))


def dl(
    offset: int = 42,
    stage: str = "transform",
    message: str = "boom",
    stacktrace: str | None = None,
) -> DeadLetter:
    return DeadLetter(rec(offset), stage, "builtins.RuntimeError", message, stacktrace)  # type: ignore[arg-type]


def fails(n: int, start: int = 0) -> list[DeadLetter]:
    return [dl(start + i) for i in range(n)]


# ------------------------------------------------------------------------ tolerance none


def test_tolerance_none_raises_on_the_first_failure() -> None:
    policy = ErrorPolicy(settings(), "decode/transform")
    with pytest.raises(RecordFailedError) as info:
        policy.check(5, [dl(7, "deserialize", "invalid JSON"), dl(8)], 1)
    e = info.value
    assert e.where == "orders/3@7"
    assert e.stage == "deserialize"
    assert e.reason == "builtins.RuntimeError: invalid JSON"
    msg = str(e)
    assert msg.startswith("record orders/3@7 failed at stage deserialize: ")
    assert "builtins.RuntimeError: invalid JSON" in msg
    assert "ERRORS_TOLERANCE=none" in msg


def test_tolerance_none_without_failures_is_quiet() -> None:
    policy = ErrorPolicy(settings(), "x")
    policy.check(100, [], 0)
    policy.check(0, [], 0)


@pytest.mark.parametrize("stage", ["deserialize", "transform", "index"])
def test_tolerance_none_names_the_stage(stage: str) -> None:
    with pytest.raises(RecordFailedError, match=f"at stage {stage}:"):
        ErrorPolicy(settings(), "x").check(0, [dl(stage=stage)], 1)


def test_tolerance_all_without_limits_never_raises() -> None:
    policy = tolerant()
    for i in range(50):
        policy.check(0, fails(100, i * 100), 100)
    assert policy.failed == 5000


# ---------------------------------------------------------------- DLQ_MAX_CONSECUTIVE


def test_consecutive_limit_trips_only_past_the_limit_across_batches() -> None:
    policy = tolerant(DLQ_MAX_CONSECUTIVE="3")
    policy.check(0, fails(1), 1)
    policy.check(0, fails(2, 1), 2)  # 3 in a row: at the limit, not past it
    with pytest.raises(DeadLetterLimitError) as info:
        policy.check(0, fails(1, 3), 1)  # the 4th
    msg = str(info.value)
    assert msg.startswith("test part: 4 records in a row failed (DLQ_MAX_CONSECUTIVE=3)")
    assert "transform builtins.RuntimeError: boom" in msg


def test_consecutive_limit_within_one_batch() -> None:
    tolerant(DLQ_MAX_CONSECUTIVE="3").check(0, fails(3), 3)
    with pytest.raises(DeadLetterLimitError, match="4 records in a row"):
        tolerant(DLQ_MAX_CONSECUTIVE="3").check(0, fails(4), 4)


def test_a_success_resets_the_run() -> None:
    policy = tolerant(DLQ_MAX_CONSECUTIVE="3")
    policy.check(0, fails(3), 3)
    policy.check(1, [], 0)  # a success: run over
    policy.check(0, fails(3), 3)
    assert policy.consecutive == 3


def test_trailing_failures_carry_into_the_next_batch() -> None:
    policy = tolerant(DLQ_MAX_CONSECUTIVE="3")
    policy.check(10, fails(5), 2)  # ends with 2 failures after the last success
    assert policy.consecutive == 2
    policy.check(0, fails(1), 1)
    with pytest.raises(DeadLetterLimitError, match="4 records in a row"):
        policy.check(0, fails(1), 1)


def test_batches_with_only_skipped_records_do_not_reset_the_run() -> None:
    policy = tolerant(DLQ_MAX_CONSECUTIVE="2")
    policy.check(0, fails(2), 2)
    policy.check(0, [], 0)
    with pytest.raises(DeadLetterLimitError):
        policy.check(0, fails(1), 1)


# ------------------------------------------------------------------------ DLQ_MAX_RATIO


def test_ratio_waits_for_min_records_then_trips() -> None:
    policy = tolerant(DLQ_MAX_RATIO="0.1", DLQ_RATIO_MIN_RECORDS="10")
    policy.check(7, fails(2), 0)  # 2/9 failed, but fewer than 10 records seen
    with pytest.raises(DeadLetterLimitError) as info:
        policy.check(0, fails(1), 1)  # 3/10 = 30% > 10%
    msg = str(info.value)
    assert msg.startswith("test part: 3 of 10 records failed (30.0% > DLQ_MAX_RATIO=0.1)")


def test_ratio_equal_to_the_limit_does_not_trip() -> None:
    policy = tolerant(DLQ_MAX_RATIO="0.2", DLQ_RATIO_MIN_RECORDS="10")
    policy.check(8, fails(2), 0)  # exactly 20%
    policy.check(10, [], 0)
    assert (policy.seen, policy.failed) == (20, 2)
    with pytest.raises(DeadLetterLimitError, match=r"5 of 23 records failed \(21\.7%"):
        policy.check(0, fails(3), 3)  # 5/23 = 21.7%


def test_ratio_below_the_limit_never_trips() -> None:
    policy = tolerant(DLQ_MAX_RATIO="0.5", DLQ_RATIO_MIN_RECORDS="1")
    for _ in range(20):
        policy.check(2, fails(1), 0)
    assert policy.failed == 20


# ------------------------------------------------------------------------ error headers


def header_dict(headers: list[tuple[str, bytes]]) -> dict[str, bytes]:
    d = dict(headers)
    assert len(d) == len(headers)
    return d


def test_error_headers_exact() -> None:
    letter = DeadLetter(
        rec(offset=1234, partition=5, topic="pay"), "index", "elasticsearch.x", "it failed"
    )
    assert error_headers(letter) == [
        (P + "topic", b"pay"),
        (P + "partition", b"5"),
        (P + "offset", b"1234"),
        (P + "stage", b"index"),
        (P + "exception.class.name", b"elasticsearch.x"),
        (P + "exception.message", b"it failed"),
    ]


def test_stacktrace_header_only_when_present() -> None:
    assert P + "exception.stacktrace" not in header_dict(error_headers(dl(stacktrace=None)))
    assert P + "exception.stacktrace" not in header_dict(error_headers(dl(stacktrace="")))
    headers = error_headers(dl(stacktrace="Traceback ...\nRuntimeError: boom\n"))
    assert len(headers) == 7
    assert headers[-1] == (P + "exception.stacktrace", b"Traceback ...\nRuntimeError: boom\n")


def test_message_truncated_to_1000_chars() -> None:
    assert MAX_MESSAGE_CHARS == 1000
    exact = "m" * 1000
    assert header_dict(error_headers(dl(message=exact)))[P + "exception.message"] == exact.encode()
    long = "0123456789" * 500
    value = header_dict(error_headers(dl(message=long)))[P + "exception.message"].decode()
    assert len(value) == 1000
    assert value.endswith("... (truncated)")
    assert value.startswith(long[:985])


def test_stacktrace_truncated() -> None:
    trace = "line\n" * 5000
    value = header_dict(error_headers(dl(stacktrace=trace)))[P + "exception.stacktrace"].decode()
    assert len(value) == MAX_STACKTRACE_CHARS
    assert value.endswith("... (truncated)")


def test_secrets_masked_in_message_and_stacktrace() -> None:
    letter = dl(
        message="auth failed for elastic:pw-s3cr3t with key K3Y-abc",
        stacktrace="Traceback\n  password='pw-s3cr3t'\nError: K3Y-abc\n",
    )
    headers = header_dict(error_headers(letter, ["pw-s3cr3t", "K3Y-abc", ""]))
    assert headers[P + "exception.message"] == b"auth failed for elastic:*** with key ***"
    assert headers[P + "exception.stacktrace"] == b"Traceback\n  password='***'\nError: ***\n"
    for v in headers.values():
        assert b"s3cr3t" not in v
        assert b"K3Y" not in v


def test_secret_masked_before_truncation() -> None:
    secret = "SUPERSECRETVALUE-0123456789"
    message = "x" * 975 + secret + "y" * 100  # the secret straddles the cut
    value = header_dict(error_headers(dl(message=message), [secret]))[P + "exception.message"]
    assert b"SUPERSEC" not in value
    assert b"SUPER" not in value
    assert len(value.decode()) == 1000


def test_unicode_and_lone_surrogates_are_encoded() -> None:
    headers = header_dict(error_headers(dl(message="Zoë ☃ \udc80 end")))
    value = headers[P + "exception.message"]
    assert value.startswith("Zoë ☃ ".encode())
    assert value.endswith(b" end")


def test_dead_letter_from_exception_without_chained_causes() -> None:
    try:
        try:
            raise KeyError("password=hunter2")
        except KeyError as cause:
            raise ValueError("bad record") from cause
    except ValueError as e:
        with_trace = DeadLetter.from_exception(rec(), "transform", e, with_trace=True)
        without = DeadLetter.from_exception(rec(), "transform", e)
    assert with_trace.error_class == "builtins.ValueError"
    assert with_trace.message == "bad record"
    assert with_trace.stage == "transform"
    assert with_trace.stacktrace is not None
    assert "ValueError: bad record" in with_trace.stacktrace
    assert "hunter2" not in with_trace.stacktrace
    assert without.stacktrace is None
    headers = header_dict(error_headers(with_trace))
    assert b"ValueError: bad record" in headers[P + "exception.stacktrace"]
    assert P + "exception.stacktrace" not in header_dict(error_headers(without))


# ----------------------------------------------------------------------------- pickling


def test_record_failed_error_pickles() -> None:
    e = RecordFailedError("orders/3@42", "index", "elasticsearch.mapper_parsing_exception: x")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is RecordFailedError
    assert str(back) == str(e)
    assert (back.where, back.stage, back.reason) == (e.where, e.stage, e.reason)


@pytest.mark.parametrize(
    "cls",
    [ConfigError, DeadLetterLimitError, DeadLetterDeliveryError, ElasticsearchUnavailableError],
)
def test_other_errors_pickle(cls: type[Exception]) -> None:
    back = pickle.loads(pickle.dumps(cls("NAME: something")))
    assert type(back) is cls
    assert str(back) == "NAME: something"


def test_policy_error_pickles_with_its_message() -> None:
    with pytest.raises(RecordFailedError) as info:
        ErrorPolicy(settings(), "x").check(0, [dl(9)], 1)
    back = pickle.loads(pickle.dumps(info.value))
    assert str(back) == str(info.value)
    assert "orders/3@9" in str(back)
