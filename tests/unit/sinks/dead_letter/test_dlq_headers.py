"""sinks.dead_letter.headers: Kafka Connect-style error headers, size-bounded, secrets
masked; and what a dead letter says about its exception."""

from __future__ import annotations

from flows.config import Settings
from sinks.dead_letter.headers import MAX_MESSAGE_CHARS, MAX_STACKTRACE_CHARS, error_headers
from sinks.model import DeadLetter, Record

P = "__connect.errors."


def settings(**env: str) -> Settings:
    return Settings.load({"KAFKA_TOPICS": "orders", **env})


def rec(offset: int = 42, partition: int = 3, topic: str = "orders") -> Record:
    return Record(topic, partition, offset, 1_700_000_000_000, b"k", b"v", (("h", b"1"),))


def dl(
    offset: int = 42,
    stage: str = "transform",
    message: str = "boom",
    stacktrace: str | None = None,
) -> DeadLetter:
    return DeadLetter(rec(offset), stage, "builtins.RuntimeError", message, stacktrace)  # type: ignore[arg-type]


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
        ("__es_sink.timestamp", b"1700000000000"),  # the record's own, for replays
    ]


def test_stacktrace_header_only_when_present() -> None:
    assert P + "exception.stacktrace" not in header_dict(error_headers(dl(stacktrace=None)))
    assert P + "exception.stacktrace" not in header_dict(error_headers(dl(stacktrace="")))
    headers = error_headers(dl(stacktrace="Traceback ...\nRuntimeError: boom\n"))
    assert len(headers) == 8
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


def test_configured_secrets_masked_in_the_exception_message() -> None:
    s = settings(
        ES_USERNAME="elastic",
        ES_PASSWORD="es-pw-s3cr3t",
        KAFKA_CONFIG_SASL_PASSWORD="kafka-pw-s3cr3t",
        KAFKA_CONFIG_CLIENT_ID="client-abc",
        SCHEMA_REGISTRY_CONFIG_BASIC_AUTH_USER_INFO="sr-user:sr-pw-s3cr3t",
    )
    try:
        msg = "login kafka-pw-s3cr3t, registry sr-user:sr-pw-s3cr3t, es es-pw-s3cr3t, client-abc"
        raise RuntimeError(msg)
    except RuntimeError as e:
        letter = DeadLetter.from_exception(rec(), "transform", e, with_trace=True)
    assert "kafka-pw-s3cr3t" in letter.message  # masked on the way out, not in the record
    headers = header_dict(error_headers(letter, s.secrets()))
    assert headers[P + "exception.message"] == b"login ***, registry ***, es ***, client-abc"
    for v in headers.values():
        assert b"s3cr3t" not in v


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
