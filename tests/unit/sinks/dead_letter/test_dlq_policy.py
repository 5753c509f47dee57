"""sinks.dead_letter.policy.ErrorPolicy: ERRORS_TOLERANCE and the dead-letter circuit
breaker, alone and shared by worker threads."""

from __future__ import annotations

import pickle
import sys
import threading
from collections.abc import Sequence

import pytest

from flows.config import Settings
from sinks.dead_letter.config import ErrorTolerance
from sinks.dead_letter.policy import ErrorPolicy
from sinks.errors import DeadLetterLimitError, RecordFailedError
from sinks.model import DeadLetter, Record


def tolerance(**env: str) -> ErrorTolerance:
    return Settings.load({"KAFKA_TOPICS": "orders", **env}).error_tolerance


def tolerant(**env: str) -> ErrorPolicy:
    return ErrorPolicy(tolerance(ERRORS_TOLERANCE="all", DLQ_TOPIC="dead", **env), "test part")


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


OK = None
"""A record that succeeded, in a batch walked by `walk`."""


def walk(policy: ErrorPolicy, outcomes: Sequence[DeadLetter | None]) -> None:
    """Walk one batch the way Processor and the sink do (see sinks.dead_letter.policy's docstring).

    `outcomes` holds, in record order, OK for a success and a DeadLetter for a failure.
    """
    run = policy.consecutive
    ok = 0
    failed: list[DeadLetter] = []
    for outcome in outcomes:
        if outcome is None:
            ok += 1
            run = 0
        else:
            run += 1
            policy.failed(outcome, run)
            failed.append(outcome)
    policy.end_batch(ok, len(failed), run, failed[-1] if failed else None)


def oks(n: int) -> list[None]:
    return [OK] * n


# ------------------------------------------------------------------------ tolerance none


def test_tolerance_none_raises_on_the_first_failure() -> None:
    policy = ErrorPolicy(tolerance(), "decode/transform")
    with pytest.raises(RecordFailedError) as info:
        walk(policy, [*oks(5), dl(7, "deserialize", "invalid JSON"), dl(8)])
    e = info.value
    assert e.where == "orders/3@7"
    assert e.stage == "deserialize"
    assert e.reason == "builtins.RuntimeError: invalid JSON"
    msg = str(e)
    assert msg.startswith("record orders/3@7 failed at stage deserialize: ")
    assert "builtins.RuntimeError: invalid JSON" in msg
    assert "ERRORS_TOLERANCE=none" in msg


def test_tolerance_none_raises_whatever_the_run() -> None:
    policy = ErrorPolicy(tolerance(), "x")
    with pytest.raises(RecordFailedError, match="orders/3@1 "):
        policy.failed(dl(1), 1)
    with pytest.raises(RecordFailedError, match="orders/3@2 "):
        policy.failed(dl(2), 0)


def test_tolerance_none_without_failures_is_quiet() -> None:
    policy = ErrorPolicy(tolerance(), "x")
    walk(policy, oks(100))
    walk(policy, [])
    assert (policy.seen, policy.failed_total, policy.consecutive) == (100, 0, 0)


@pytest.mark.parametrize("stage", ["deserialize", "transform", "index"])
def test_tolerance_none_names_the_stage(stage: str) -> None:
    with pytest.raises(RecordFailedError, match=f"at stage {stage}:"):
        walk(ErrorPolicy(tolerance(), "x"), [dl(stage=stage)])


def test_tolerance_all_without_limits_never_raises() -> None:
    policy = tolerant()
    for i in range(50):
        walk(policy, fails(100, i * 100))
    assert policy.failed_total == 5000
    assert policy.consecutive == 5000


# ---------------------------------------------------------------- DLQ_MAX_CONSECUTIVE


def test_consecutive_limit_trips_only_past_the_limit_across_batches() -> None:
    policy = tolerant(DLQ_MAX_CONSECUTIVE="3")
    walk(policy, fails(1))
    walk(policy, fails(2, 1))  # 3 in a row: at the limit, not past it
    assert policy.consecutive == 3
    with pytest.raises(DeadLetterLimitError) as info:
        walk(policy, fails(1, 3))  # the 4th
    msg = str(info.value)
    assert msg.startswith("test part: 4 records in a row failed (DLQ_MAX_CONSECUTIVE=3)")
    assert msg.endswith("Last: orders/3@3 stage transform: builtins.RuntimeError: boom")


def test_consecutive_limit_within_one_batch() -> None:
    walk(tolerant(DLQ_MAX_CONSECUTIVE="3"), fails(3))
    with pytest.raises(DeadLetterLimitError, match="4 records in a row"):
        walk(tolerant(DLQ_MAX_CONSECUTIVE="3"), fails(4))


def test_consecutive_limit_on_the_run_argument() -> None:
    policy = tolerant(DLQ_MAX_CONSECUTIVE="3")
    policy.failed(dl(0), 3)
    with pytest.raises(DeadLetterLimitError, match="4 records in a row"):
        policy.failed(dl(1), 4)


def test_a_run_ended_by_a_success_inside_the_batch_trips() -> None:
    with pytest.raises(DeadLetterLimitError, match="4 records in a row"):
        walk(tolerant(DLQ_MAX_CONSECUTIVE="3"), [OK, *fails(4), OK])


def test_a_run_carried_into_a_batch_and_ended_there_trips() -> None:
    policy = tolerant(DLQ_MAX_CONSECUTIVE="3")
    walk(policy, [OK, *fails(2)])
    with pytest.raises(DeadLetterLimitError, match="4 records in a row"):
        walk(policy, [*fails(2, 2), OK])


def test_a_success_resets_the_run() -> None:
    policy = tolerant(DLQ_MAX_CONSECUTIVE="3")
    walk(policy, fails(3))
    walk(policy, [OK])  # a success: run over
    assert policy.consecutive == 0
    walk(policy, fails(3))
    assert policy.consecutive == 3


def test_a_success_inside_a_batch_resets_the_run() -> None:
    policy = tolerant(DLQ_MAX_CONSECUTIVE="3")
    walk(policy, [*fails(3), OK, *fails(3, 3), OK, *fails(2, 6)])
    assert policy.consecutive == 2
    assert policy.failed_total == 8


def test_trailing_failures_carry_into_the_next_batch() -> None:
    policy = tolerant(DLQ_MAX_CONSECUTIVE="3")
    walk(policy, [*fails(3), *oks(10), *fails(2, 3)])  # ends with 2 failures after a success
    assert policy.consecutive == 2
    walk(policy, fails(1, 5))
    with pytest.raises(DeadLetterLimitError, match="4 records in a row"):
        walk(policy, fails(1, 6))


def test_batches_with_only_skipped_records_do_not_reset_the_run() -> None:
    policy = tolerant(DLQ_MAX_CONSECUTIVE="2")
    walk(policy, fails(2))
    walk(policy, [])
    assert policy.consecutive == 2
    with pytest.raises(DeadLetterLimitError):
        walk(policy, fails(1, 2))


# ------------------------------------------------------------------------ DLQ_MAX_RATIO


def test_ratio_waits_for_min_records_then_trips() -> None:
    policy = tolerant(DLQ_MAX_RATIO="0.1", DLQ_RATIO_MIN_RECORDS="10")
    walk(policy, [*fails(2), *oks(7)])  # 2/9 failed, but fewer than 10 records seen
    with pytest.raises(DeadLetterLimitError) as info:
        walk(policy, fails(1, 2))  # 3/10 = 30% > 10%
    msg = str(info.value)
    assert msg.startswith("test part: 3 of 10 records failed (30.0% > DLQ_MAX_RATIO=0.1)")


def test_ratio_equal_to_the_limit_does_not_trip() -> None:
    policy = tolerant(DLQ_MAX_RATIO="0.2", DLQ_RATIO_MIN_RECORDS="10")
    walk(policy, [*fails(2), *oks(8)])  # exactly 20%
    walk(policy, oks(10))
    assert (policy.seen, policy.failed_total) == (20, 2)
    with pytest.raises(DeadLetterLimitError, match=r"5 of 23 records failed \(21\.7%"):
        walk(policy, fails(3, 2))  # 5/23 = 21.7%


def test_ratio_below_the_limit_never_trips() -> None:
    policy = tolerant(DLQ_MAX_RATIO="0.5", DLQ_RATIO_MIN_RECORDS="1")
    for i in range(20):
        walk(policy, [dl(i), OK, OK])
    assert policy.failed_total == 20
    assert policy.seen == 60


# ------------------------------------------------------------ DeadLetterLimitError text


def letter_at(topic: str, partition: int, offset: int) -> DeadLetter:
    return DeadLetter(
        rec(offset, partition, topic), "index", "elasticsearch.mapper_parsing_exception", "bad"
    )


def test_consecutive_limit_error_names_the_last_record() -> None:
    policy = tolerant(DLQ_MAX_CONSECUTIVE="1")
    with pytest.raises(DeadLetterLimitError) as info:
        walk(policy, [letter_at("orders", 3, 41), letter_at("pay", 7, 99)])
    msg = str(info.value)
    assert "Last: pay/7@99 stage index: elasticsearch.mapper_parsing_exception: bad" in msg
    assert "orders/3@41" not in msg


def test_ratio_limit_error_names_the_last_record() -> None:
    policy = tolerant(DLQ_MAX_RATIO="0.1", DLQ_RATIO_MIN_RECORDS="1")
    with pytest.raises(DeadLetterLimitError) as info:
        walk(policy, [letter_at("orders", 3, 41), OK, letter_at("pay", 7, 99), OK])
    msg = str(info.value)
    assert msg.startswith("test part: 2 of 4 records failed (50.0% > DLQ_MAX_RATIO=0.1)")
    assert "Last: pay/7@99 stage index: elasticsearch.mapper_parsing_exception: bad" in msg
    assert "orders/3@41" not in msg
    back = pickle.loads(pickle.dumps(info.value))
    assert str(back) == msg


def test_policy_error_pickles_with_its_message() -> None:
    with pytest.raises(RecordFailedError) as info:
        walk(ErrorPolicy(tolerance(), "x"), [dl(9)])
    back = pickle.loads(pickle.dumps(info.value))
    assert str(back) == str(info.value)
    assert "orders/3@9" in str(back)


# ----------------------------------------------------- one policy shared by worker threads


def test_concurrent_batches_of_failures_extend_one_run() -> None:
    """Two worker threads share the processor's policy: A and B both start from a run of 0;
    A ends with 2 failures, then B with 3. Nothing succeeded in between: the run is 5 (it
    was B's 3 alone, A's failures overwritten)."""
    policy = tolerant(DLQ_MAX_CONSECUTIVE="5")
    read = threading.Barrier(2)
    a_done = threading.Event()

    def batch(failures: list[DeadLetter], after: threading.Event | None) -> None:
        run = policy.consecutive
        read.wait()
        if after is not None:
            assert after.wait(10)
        for f in failures:
            run += 1
            policy.failed(f, run)
        policy.end_batch(0, len(failures), run, failures[-1])

    a = threading.Thread(target=lambda: (batch(fails(2), None), a_done.set()))
    b = threading.Thread(target=batch, args=(fails(3, 2), a_done))
    a.start()
    b.start()
    a.join(10)
    b.join(10)
    assert policy.consecutive == 5
    assert (policy.seen, policy.failed_total) == (5, 5)
    with pytest.raises(DeadLetterLimitError, match="6 records in a row"):
        walk(policy, fails(1, 5))


def test_a_success_in_a_concurrent_batch_still_ends_the_run() -> None:
    policy = tolerant()
    assert policy.consecutive == 0  # this thread's batch starts from a run of 0 ...
    elsewhere = threading.Thread(target=walk, args=(policy, fails(4)))
    elsewhere.start()
    elsewhere.join(10)
    assert policy.consecutive == 4
    policy.end_batch(1, 1, 1, dl(9))  # ... and ends with a success, then one failure
    assert policy.consecutive == 1


def test_counters_of_a_shared_policy_add_up_across_threads() -> None:
    policy = tolerant()
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [
            threading.Thread(target=lambda: [walk(policy, [OK, OK, dl(1)]) for _ in range(2000)])
            for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(old)
    assert (policy.seen, policy.failed_total) == (8 * 2000 * 3, 8 * 2000)
