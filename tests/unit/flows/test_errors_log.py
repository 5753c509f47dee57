"""ERRORS_TOLERANCE=log: the settings, the policy's one line per skipped record and its
counter, the breaker, and each stage that skips (processor: deserialize, transform, index;
the Elasticsearch sink partition: refused items) with no dead-letter topic."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from prometheus_client import REGISTRY

from flows.config import Settings
from flows.errors import ConfigError
from flows.process import Processor, is_documents
from sinks.dead_letter.policy import LOGGED_VALUE_CHARS, PAYLOAD_QUOTE, ErrorPolicy
from sinks.elasticsearch.partition import EsSinkPartition
from sinks.errors import DeadLetterLimitError
from sinks.model import DeadLetter, Record
from tests.unit.sinks.elasticsearch.test_es_partition import (
    MAPPER_ERROR,
    FakeClient,
    FakeClock,
    make_actions,
)

SECRET = "s3cr3t-api-key"
POLICY_LOG = "sinks.dead_letter.policy"


def load(**env: str) -> Settings:
    return Settings.load({"KAFKA_TOPICS": "orders", "ES_API_KEY": SECRET, **env})


def logging_policy(**env: str) -> ErrorPolicy:
    return ErrorPolicy(load(ERRORS_TOLERANCE="log", **env).error_tolerance, "test")


def skipped(stage: str) -> float:
    labels = {"reason": f"failed_{stage}"}
    return REGISTRY.get_sample_value("es_sink_records_skipped_total", labels) or 0.0


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == POLICY_LOG]


def letter(offset: int, stage: str = "transform", message: str = "boom") -> DeadLetter:
    rec = Record("orders", 2, offset, 1, b"the-key", b'{"the": "value"}', (("h", b"x"),))
    return DeadLetter(rec, stage, "builtins.ValueError", message)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ settings


def test_log_needs_no_dead_letter_topic() -> None:
    s = load(ERRORS_TOLERANCE="log")
    t = s.error_tolerance
    assert (t.tolerate, t.log, t.log_values) == (True, True, False)
    assert s.dead_letter_config is None
    assert load(ERRORS_TOLERANCE="log", ERRORS_LOG_VALUES="true").error_tolerance.log_values


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"ERRORS_TOLERANCE": "log", "DLQ_TOPIC": "dead"}, "DLQ_TOPIC: not used with ERRORS_TO"),
        ({"ERRORS_LOG_VALUES": "true"}, "ERRORS_LOG_VALUES: only with ERRORS_TOLERANCE=log"),
        ({"ERRORS_TOLERANCE": "all"}, "DLQ_TOPIC: required when ERRORS_TOLERANCE=all"),
        ({"ERRORS_TOLERANCE": "log", "ON_NULL_VALUE": "dlq"}, "DLQ_TOPIC: required when ON_NULL"),
        ({"ERRORS_TOLERANCE": "skip"}, "ERRORS_TOLERANCE"),
    ],
)
def test_refused_combinations_are_one_line(env: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(**env)
    assert str(info.value).startswith(words) and "\n" not in str(info.value)


# ------------------------------------------------------------------------------ the policy


def test_one_warning_line_per_record_with_coordinates_stage_and_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = logging_policy()
    before = skipped("transform")
    with caplog.at_level(logging.WARNING, POLICY_LOG):
        policy.failed(letter(7, message=f"bad\nsecret {SECRET}"), 1)
        policy.end_batch(0, 1, 1, None)
    (line,) = lines(caplog)
    assert line == (
        "skipped a failed record (ERRORS_TOLERANCE=log): topic=orders partition=2 offset=7 "
        "stage=transform error=builtins.ValueError: bad\\nsecret ***"
    )
    assert caplog.records[0].levelno == logging.WARNING
    assert skipped("transform") - before == 1


def test_values_only_with_errors_log_values(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, POLICY_LOG):
        logging_policy().failed(letter(1), 1)
        logging_policy(ERRORS_LOG_VALUES="true").failed(letter(2), 1)
    quiet, loud = lines(caplog)
    assert "the-key" not in quiet and "value" not in quiet.split("error=")[1]
    assert loud.endswith(" key=b'the-key' value=b'{\"the\": \"value\"}'")


def test_long_values_are_cut_and_secrets_masked_before_the_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    value = b"x" * (LOGGED_VALUE_CHARS - 20) + SECRET.encode() + b"y" * 100  # across the cut
    rec = Record("orders", 0, 1, 1, None, value)
    dl = DeadLetter(rec, "deserialize", "flows.decode.DecodeError", "m" * 5000)
    with caplog.at_level(logging.WARNING, POLICY_LOG):
        logging_policy(ERRORS_LOG_VALUES="true").failed(dl, 1)
    (line,) = lines(caplog)
    assert SECRET not in line and "s3c" not in line
    assert " key=None value=b'xxx" in line
    assert line.count("... (truncated)") == 2
    assert len(line) < 1000 + LOGGED_VALUE_CHARS + 300


def test_the_breaker_still_stops_and_the_tripping_record_is_not_logged_as_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = logging_policy(DLQ_MAX_CONSECUTIVE="2")
    with caplog.at_level(logging.WARNING, POLICY_LOG):
        policy.failed(letter(1), 1)
        policy.failed(letter(2), 2)
        with pytest.raises(DeadLetterLimitError, match="3 records in a row failed"):
            policy.failed(letter(3), 3)
    skips = [line for line in lines(caplog) if line.startswith("skipped")]
    assert [line.split("offset=")[1].split()[0] for line in skips] == ["1", "2"]


def test_the_ratio_breaker_still_stops() -> None:
    policy = logging_policy(DLQ_MAX_RATIO="0.5", DLQ_RATIO_MIN_RECORDS="4")
    policy.failed(letter(1), 1)
    policy.end_batch(1, 1, 1, letter(1))
    with pytest.raises(DeadLetterLimitError, match="DLQ_MAX_RATIO"):
        for i in (2, 3):
            policy.failed(letter(i), i - 1)
        policy.end_batch(0, 2, 3, letter(3))


# ------------------------------------------------------------------------------ the processor


def _msg(value: bytes | None, key: bytes | None, offset: int) -> Message:
    return Message(
        topic="orders",
        partition=0,
        offset=offset,
        key=key,
        value=value,
        timestamp=(TIMESTAMP_CREATE_TIME, 1714564800123),
    )


def test_processor_skips_each_stage_and_emits_no_dead_letters(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "sink.yaml"
    config.write_text("transforms:\n  - {type: extract, field: body}\n")
    s = load(ERRORS_TOLERANCE="log", ES_SINK_CONFIG=str(config), DOC_ID="field:id")
    batch = [
        _msg(b'{"body": {"id": "a"}}', b"k0", 0),
        _msg(b'{"body": ', b"k1", 1),  # deserialize
        _msg(b'{"nobody": 1}', b"k2", 2),  # transform: extract finds nothing
        _msg(b'{"body": {"n": 1}}', b"k3", 3),  # index: no id field
        _msg(b'{"body": {"id": "b"}}', b"k4", 4),
    ]
    before = {stage: skipped(stage) for stage in ("deserialize", "transform", "index")}
    with caplog.at_level(logging.WARNING, POLICY_LOG):
        out = Processor(s, [], 4)(batch)
    assert [item for _, item in out if isinstance(item, DeadLetter)] == []
    ids = [a.id for p, chunk in out if is_documents((p, chunk)) for a in chunk]
    assert sorted(ids) == ["a", "b"]
    stages = [
        (line.split("offset=")[1].split()[0], line.split("stage=")[1].split()[0])
        for line in lines(caplog)
    ]
    assert stages == [("1", "deserialize"), ("2", "transform"), ("3", "index")]
    assert {k: skipped(k) - v for k, v in before.items()} == dict.fromkeys(before, 1)


# ------------------------------------------------------------------------------ the sink


def _partition(client: FakeClient, **env: str) -> tuple[EsSinkPartition, Settings]:
    s = load(ERRORS_TOLERANCE="log", **env)
    part = EsSinkPartition(
        s.es_sink_config,
        "es-0000",
        client,  # type: ignore[arg-type]
        None,  # no dead-letter producer: there is no DLQ_TOPIC
        clock=FakeClock(),
    )
    return part, s


def test_refused_items_are_logged_and_the_rest_indexed(caplog: pytest.LogCaptureFixture) -> None:
    client = FakeClient({"b": (400, MAPPER_ERROR), "d": (400, MAPPER_ERROR)})
    part, s = _partition(client)
    before = skipped("index")
    with caplog.at_level(logging.WARNING, POLICY_LOG):
        part.write_batch([make_actions(s, "a", "b", "c", "d")])
        part.snapshot()  # no "rejected documents but no DLQ_TOPIC"
    found = lines(caplog)
    assert [line.split("offset=")[1].split()[0] for line in found] == ["1", "3"]
    assert all("stage=index error=elasticsearch.mapper_parsing_exception" in x for x in found)
    assert skipped("index") - before == 2
    assert len(client.requests) == 1


def test_refused_items_still_trip_the_breaker() -> None:
    refuse: dict[str, Any] = {k: (400, MAPPER_ERROR) for k in "abc"}
    part, s = _partition(FakeClient(refuse), DLQ_MAX_CONSECUTIVE="2")
    part.write_batch([make_actions(s, "a", "b", "c")])
    with pytest.raises(DeadLetterLimitError, match="DLQ_MAX_CONSECUTIVE=2"):
        part.snapshot()


def test_the_document_bytes_are_unchanged_by_the_mode() -> None:
    """The mode changes what happens to failures only: actions are built the same."""
    logged = make_actions(load(ERRORS_TOLERANCE="log"), "a")
    strict = make_actions(load(), "a")
    assert [orjson.loads(x) for x in logged[0].data.split(b"\n")[:-1]] == [
        orjson.loads(x) for x in strict[0].data.split(b"\n")[:-1]
    ]


def test_a_decode_errors_quote_of_the_payload_is_left_out_without_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from flows.decode import DecodeError, build_decoder

    rec = Record("orders", 0, 9, 1, b"k", b'{"ssn": "123-45-6789"')
    with pytest.raises(DecodeError) as info:
        build_decoder(load(), "value")(rec)
    assert PAYLOAD_QUOTE in str(info.value)  # the convention the policy relies on
    dl = DeadLetter.from_exception(rec, "deserialize", info.value)
    with caplog.at_level(logging.WARNING, POLICY_LOG):
        logging_policy().failed(dl, 1)
        logging_policy(ERRORS_LOG_VALUES="true").failed(dl, 1)
    quiet, loud = lines(caplog)
    assert "123-45-6789" not in quiet and quiet.endswith("; payload not shown")
    assert quiet.startswith("skipped a failed record") and "invalid JSON" in quiet
    assert loud.count("123-45-6789") == 2  # the quote, and the value itself
