"""Kafka Connect-style error headers of a dead letter: size-bounded, secrets masked."""

from __future__ import annotations

from collections.abc import Sequence

from sinks.model import DeadLetter
from sinks.secrets import redact

MAX_MESSAGE_CHARS = 1000
MAX_STACKTRACE_CHARS = 8000
_P = "__connect.errors."
VALUE_OMITTED_HEADER = "__es_sink.value.omitted"
"""Set (saying where the original is) on a dead letter sent without its value: too large."""
TIMESTAMP_HEADER = "__es_sink.timestamp"
"""The original record's timestamp (epoch ms), so a replay gives the record the time the
flow saw without reading the source topic again; absent when the record had none."""


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
    if rec.timestamp is not None:
        headers.append((TIMESTAMP_HEADER, str(rec.timestamp).encode()))
    if dl.stacktrace:
        trace = _redact(dl.stacktrace, secrets, MAX_STACKTRACE_CHARS)
        headers.append((_P + "exception.stacktrace", trace.encode()))
    return headers


def _redact(text: str, secrets: Sequence[str], limit: int) -> str:
    text = redact(text, secrets)
    if len(text) > limit:
        text = text[: limit - 15] + "... (truncated)"
    return text.encode("utf-8", "replace").decode("utf-8")
