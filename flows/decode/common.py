"""What every converter shares: the two errors, payload snippets and strict JSON parsing.

Errors: `DecodeError` is a bad record (dead-lettered or fatal per ERRORS_TOLERANCE): the
bytes are not in the configured format, the schema id is unknown to the registry (error
codes 40401/40402/40403), the magic byte is wrong, the payload fails schema validation.
`RegistryUnavailableError` is NOT a record error: the registry could not be reached, timed
out, answered 5xx/429, refused the credentials (401/403) or answered something that is not
a Schema Registry error (such as a 404 page from a wrong URL). Every record would fail the
same way, so the caller must stop or retry, never dead-letter. The registry client already
retries a request `max.retries` times (SCHEMA_REGISTRY_CONFIG_MAX_RETRIES, default 3) before
this is raised. Configuration problems found on first use raise `ConfigError`.

Both errors keep `flows.decode` as their module: their class name is what dead letters
carry (`exception.class.name: flows.decode.DecodeError`) and what pickle looks up.

Strict JSON (`loads`): invalid UTF-8 (a byte order mark included), invalid JSON, trailing
garbage, NaN/Infinity, lone surrogates, nesting deeper than 1024, and integer literals
outside [-2**63, 2**64 - 1] (orjson would silently turn them into floats and lose digits)
are a `DecodeError`.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import orjson

from flows.errors import PipelineError
from sinks.deep import deep_recursion

if TYPE_CHECKING:
    from flows.record import Record

Role = Literal["value", "key"]
Decoder = Callable[["Record"], Any]


class DecodeError(PipelineError):
    """A record's bytes cannot be decoded in the configured format (a bad record).

    The message says what was wrong and quotes at most the first 64 bytes of the payload.
    """


class RegistryUnavailableError(PipelineError):
    """The Schema Registry could not answer (unreachable, 5xx, 429, auth refused).

    Not a record error: every record would fail the same way, so the flow must stop or
    retry rather than dead-letter records that are fine.
    """


DecodeError.__module__ = RegistryUnavailableError.__module__ = "flows.decode"

SNIPPET = 64
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1
# A JSON integer outside [-2**63, 2**64 - 1] has at least 20 digits, or is negative with
# 19. Mapping digits and "-" to "0" and searching for twenty in a row is a C-speed
# pre-check (no hit for 19-digit positive numbers such as nanosecond timestamps); only a
# hit (rare; digits in strings may also cause one) runs the exact, slower check.
DIGITS_TO_ZERO = bytes.maketrans(b"-123456789", b"0000000000")
TWENTY_DIGITS = b"0" * 20


def snippet(data: bytes) -> str:
    """The first 64 bytes of `data`, repr'd, with the total length when cut."""
    if len(data) <= SNIPPET:
        return repr(data)
    return f"{data[:SNIPPET]!r}... ({len(data)} bytes)"


def short(text: str, limit: int = 200) -> str:
    """`text` on one line (whitespace collapsed), cut at `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def b64(data: bytes) -> str:
    """Standard base64 without a newline."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def invalid_json(data: bytes, e: orjson.JSONDecodeError) -> DecodeError:
    return DecodeError(f"invalid JSON: {e}; payload starts {snippet(data)}")


def not_object(data: bytes, doc: Any, what: str = "JSON") -> DecodeError:
    return DecodeError(
        f"{what} value must be an object, got {type_name(doc)}; payload starts {snippet(data)}"
    )


def type_name(value: Any) -> str:
    """The JSON name of a decoded value's type (`null`, `number`, `object`, ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _parse_int_checked(text: str) -> int:
    try:
        value = int(text)
    except ValueError:  # more digits than int() accepts (4300)
        value = _INT_MAX + 1
    if not _INT_MIN <= value <= _INT_MAX:
        shown = text if len(text) <= 30 else f"{text[:30]}... ({len(text)} digits)"
        msg = f"integer {shown} does not fit in 64 bits"
        raise DecodeError(msg)
    return value


def check_big_ints(data: bytes) -> None:
    """Raise DecodeError if valid JSON `data` has an integer outside 64 bits (slow path)."""
    try:
        with deep_recursion():
            json.loads(data, parse_int=_parse_int_checked)
    except RecursionError:
        msg = f"JSON nested too deeply to check its integers; payload starts {snippet(data)}"
        raise DecodeError(msg) from None


def check_ints(data: bytes) -> None:
    """Raise DecodeError if valid JSON `data` has an integer outside 64 bits."""
    if TWENTY_DIGITS in data.translate(DIGITS_TO_ZERO):
        check_big_ints(data)


def loads(data: bytes) -> Any:
    """`orjson.loads` with the extra integer check; any failure is a DecodeError."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise invalid_json(data, e) from None
    check_ints(data)
    return doc
