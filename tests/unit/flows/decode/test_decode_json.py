"""flows.decode.json: the json and connect-json converters, good and bad records."""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

import orjson
import pytest

from flows.config import Settings
from flows.decode import DecodeError
from flows.decode.json import RAW_MAX_BYTES, RawObjects, json_ints_checked_later
from tests.support import fuzz_inputs
from tests.support.decode import (
    key_decoder,
    rec,
    value_decoder,
)

# -- json


def test_json_value_object() -> None:
    decode = value_decoder("json")
    doc = {"id": 1, "name": "Zoë ☃", "nested": {"a": [1, 2.5, None, True]}}
    assert decode(rec(orjson.dumps(doc))) == doc


def test_json_integer_and_digit_boundaries() -> None:
    decode = value_decoder("json")
    raw = (
        b'{"max": 18446744073709551615, "min": -9223372036854775808,'
        b' "as_text": "123456789012345678901234567890", "float": 0.12345678901234567890123,'
        b' "ns": 1718000000123456789, "neg": -922337203685477580}'
    )
    doc = decode(rec(raw))
    assert doc["max"] == 2**64 - 1
    assert doc["min"] == -(2**63)
    assert doc["as_text"] == "123456789012345678901234567890"
    assert isinstance(doc["float"], float)
    assert doc["ns"] == 1718000000123456789
    assert doc["neg"] == -922337203685477580


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b'{"a": "\xff"}', "UTF-8"),
        (b"\xef\xbb\xbf{}", "BOM"),
        (b'{"a": 1,}', "invalid JSON"),
        (b'{"a": 1} trailing', "after document"),
        (b'{"a": 1}{"b": 2}', "after document"),
        (b"", "invalid JSON"),
        (b"42", "must be an object, got number"),
        (b'"text"', "must be an object, got string"),
        (b"null", "must be an object, got null"),
        (b"[1, 2]", "must be an object, got array"),
        (b'{"a": NaN}', "invalid JSON"),
        (b'{"a": Infinity}', "invalid JSON"),
        (b'{"a": -Infinity}', "invalid JSON"),
        (b'{"a": 1e999}', "infinity"),
        (b'{"a": "\\ud800"}', "surrogate"),
        (b'{"a": 18446744073709551616}', "does not fit in 64 bits"),
        (b'{"a": -9223372036854775809}', "does not fit in 64 bits"),
        (b'{"a": [1, {"b": 123456789012345678901234567890}]}', "does not fit in 64 bits"),
        (b'{"a": ' + b"1" * 5000 + b"}", "infinity"),
        (b'{"a": ' * 2000 + b"1" + b"}" * 2000, "depth"),
        (b"[" * 2000 + b"]" * 2000, "depth"),
    ],
)
def test_json_value_rejects(raw: bytes, fragment: str) -> None:
    with pytest.raises(DecodeError, match="(?i)" + fragment.replace("(", r"\(")):
        value_decoder("json")(rec(raw))


@pytest.mark.parametrize(
    "number",
    [2**64, -(2**63) - 1, 10**30, -(10**25), 2**200, -(2**100), int("9" * 300)],
    ids=lambda n: f"{len(str(n))}-digits",
)
@pytest.mark.parametrize("where", ["%s", "[0, %s]", '{"deeper": {"v": %s}}'])
def test_an_integer_beyond_64_bits_leaves_a_plus_in_its_encoding(number: int, where: str) -> None:
    """`IntsChecked`'s premise: decoded without the check, such an integer is a float that
    orjson (and `json`, for what is too deep for orjson) encodes with `e+`; the late check
    then raises what the checked decoder raises."""
    raw = b'{"a": ' + (where % number).encode() + b"}"
    later = json_ints_checked_later(Settings.load({"KAFKA_TOPICS": "t"}))
    assert later is not None
    doc = later.decode(rec(raw))
    assert b"+" in orjson.dumps(doc)
    assert "+" in json.dumps(doc)
    with pytest.raises(DecodeError) as checked:
        value_decoder("json")(rec(raw))
    with pytest.raises(DecodeError) as late:
        later.check(raw)
    assert str(late.value) == str(checked.value)


RAW_EDGES = [
    b'{"a": 1}',
    b'{"a": 1}  ',
    b'{"a": 1}\r',
    b'{"a": 1}\n',
    b' {"a": 1}',
    b"\xef\xbb\xbf{}",
    b"{}",
    b"",
    b"[1]",
    b'{"a": 1,"a": 2}',
    b'{"a": 18446744073709551615, "b": -9223372036854775808}',
    b'{"a": 18446744073709551616}',
    b'{"a": -9223372036854775809}',
    b'{"a": 1e400}',
    b'{"a": 1e-400}',
    b'{"a": "\\ud800"}',
    b'{"a": "\\ud83d\\ude00"}',
    b'{"a": "\xed\xa0\x80"}',
    b'{"a": NaN}',
    b'{"a": 1} {"b": 2}',
    b'{"a": "\x01"}',
    b'{"a": ' + b"1" * 5000 + b"}",
    b'{"a": 0.' + b"1" * 5000 + b"}",
    *(b'{"a":' + b"[" * (d - 1) + b"1" + b"]" * (d - 1) + b"}" for d in (1023, 1024, 1025)),
    *(b'{"a":' * d + b"1" + b"}" * d for d in (1023, 1024, 1025)),
]


def test_raw_objects_accept_only_what_the_decoder_accepts() -> None:
    """`RawObjects`' promise: every value it accepts, the `json` decoder decodes to an
    object (so sending the bytes as they are dead-letters nothing the decoder would have
    let through, and lets through nothing it would have dead-lettered), over the fuzz
    inputs and the edges where simdjson's rules and the decoder's meet."""
    accepts = RawObjects().accepts()
    decode = value_decoder("json")
    values = [c.value for c in fuzz_inputs.generate(11, n_bad=3000) if c.value is not None]
    taken = 0
    for value in [*values, *RAW_EDGES]:
        if accepts(value):
            taken += 1
            assert type(decode(rec(value))) is dict, value[:80]
            assert value.startswith(b"{") and b"\n" not in value
    assert taken > len(values) * 0.6  # most of the fuzz mix is valid: it is taken as it is


@pytest.mark.parametrize(
    "value",
    [b'{"a": 1,"a": 2}', b'{"a": 1}  ', b'{"t": "\\u00e9", "n": 1E2}', b"{}"],
)
def test_raw_objects_take_valid_objects_the_decoder_would_rewrite(value: bytes) -> None:
    """Duplicate keys, whitespace, escapes and a number's spelling stay as produced."""
    assert RawObjects().accepts()(value)


def test_raw_objects_leave_values_over_raw_max_bytes_to_the_decoder() -> None:
    """A simdjson parser keeps the buffers of the largest document it read: none is larger
    than RAW_MAX_BYTES (an array of numbers costs ~13 times its size)."""
    accepts = RawObjects().accepts()

    def sized(n: int) -> bytes:
        return b'{"a": "' + b"x" * (n - 9) + b'"}'

    assert len(sized(RAW_MAX_BYTES)) == RAW_MAX_BYTES
    assert accepts(sized(RAW_MAX_BYTES))
    assert not accepts(sized(RAW_MAX_BYTES + 1))
    assert accepts(b'{"a": 1}')  # the parser still serves the next value


def test_raw_objects_give_each_thread_its_own_parser() -> None:
    """A simdjson parser serves one document at a time: worker threads must not share one."""
    raw = RawObjects()
    mine = raw.accepts()
    assert raw.accepts() is mine
    theirs: list[Any] = []
    t = threading.Thread(target=lambda: theirs.append(raw.accepts()))
    t.start()
    t.join()
    assert theirs[0] is not mine and theirs[0](b'{"a": 1}')


def test_other_formats_check_their_integers_themselves() -> None:
    s = Settings.load({"KAFKA_TOPICS": "t", "VALUE_FORMAT": "connect-json"})
    assert json_ints_checked_later(s) is None


def test_decode_error_message_is_short() -> None:
    raw = b'{"secret": "' + b"x" * 10_000 + b'"'  # unterminated
    with pytest.raises(DecodeError) as info:
        value_decoder("json")(rec(raw))
    message = str(info.value)
    assert len(message) < 300
    assert "x" * 65 not in message
    assert "10013 bytes" in message


def test_json_key_any_value() -> None:
    decode = key_decoder("json")
    assert decode(rec(key=b'"k-1"')) == "k-1"
    assert decode(rec(key=b"42")) == 42
    assert decode(rec(key=b"[1, 2]")) == [1, 2]
    assert decode(rec(key=b'{"id": 3}')) == {"id": 3}
    for bad in (b"nope", b"NaN", b"99999999999999999999999", b'"\\udc00"'):
        with pytest.raises(DecodeError):
            decode(rec(key=bad))


# -- connect-json


def _b64_unscaled(unscaled: int, length: int = 4) -> str:
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def _decimal_schema(field: str, scale: int) -> dict[str, Any]:
    return {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": str(scale), "connect.decimal.precision": "10"},
        "field": field,
    }


def test_connect_json_envelope_with_logical_types() -> None:
    schema = {
        "type": "struct",
        "optional": False,
        "name": "shop.Order",
        "fields": [
            {"type": "int64", "optional": False, "field": "id"},
            _decimal_schema("price", 2),
            _decimal_schema("refund", 3),
            {
                "type": "int64",
                "optional": False,
                "name": "org.apache.kafka.connect.data.Timestamp",
                "version": 1,
                "field": "created",
            },
            {
                "type": "int32",
                "optional": True,
                "name": "org.apache.kafka.connect.data.Date",
                "version": 1,
                "field": "day",
            },
            {"type": "bytes", "optional": True, "field": "blob"},
            {"type": "array", "items": _decimal_schema("", 1), "field": "history"},
            {
                "type": "map",
                "keys": {"type": "string"},
                "values": _decimal_schema("", 0),
                "field": "by_region",
            },
            {
                "type": "struct",
                "field": "inner",
                "fields": [_decimal_schema("cost", 2)],
            },
            _decimal_schema("missing", 2),
        ],
    }
    payload = {
        "id": 9,
        "price": _b64_unscaled(1230),
        "refund": _b64_unscaled(-1, 1),
        "created": 1_700_000_000_123,
        "day": 19_000,
        "blob": base64.b64encode(b"\x00\xff").decode(),
        "history": [_b64_unscaled(5), None],
        "by_region": {"eu": _b64_unscaled(7)},
        "inner": {"cost": _b64_unscaled(0)},
        "missing": None,
    }
    doc = value_decoder("connect-json")(rec(orjson.dumps({"schema": schema, "payload": payload})))
    assert doc == {
        "id": 9,
        "price": "12.30",
        "refund": "-0.001",
        "created": 1_700_000_000_123,
        "day": "2022-01-08",
        "blob": "AP8=",
        "history": ["0.5", None],
        "by_region": {"eu": "7"},
        "inner": {"cost": "0.00"},
        "missing": None,
    }


def test_connect_json_numeric_decimal_and_null_schema() -> None:
    decode = value_decoder("connect-json")
    schema = {"type": "struct", "fields": [_decimal_schema("p", 2)]}
    raw = orjson.dumps({"schema": schema, "payload": {"p": 12.3}})
    assert decode(rec(raw)) == {"p": 12.3}
    assert decode(rec(b'{"schema": null, "payload": {"a": 1}}')) == {"a": 1}


def test_connect_json_without_envelope() -> None:
    decode = value_decoder("connect-json")
    assert decode(rec(b'{"a": 1}')) == {"a": 1}
    # Not exactly {schema, payload}: a plain document that happens to use those names.
    raw = b'{"schema": "v2", "payload": {"a": 1}, "extra": true}'
    assert decode(rec(raw)) == {"schema": "v2", "payload": {"a": 1}, "extra": True}


@pytest.mark.parametrize(
    "raw",
    [
        b'{"schema": {"type": "string"}, "payload": "text"}',
        b'{"schema": {"type": "array"}, "payload": [1]}',
        b'{"schema": null, "payload": null}',
        b"[1, 2]",
        b"not json",
        b'{"schema": null, "payload": {"a": NaN}}',
    ],
)
def test_connect_json_value_rejects(raw: bytes) -> None:
    with pytest.raises(DecodeError):
        value_decoder("connect-json")(rec(raw))


def test_connect_json_bad_decimal() -> None:
    schema = {"type": "struct", "fields": [_decimal_schema("p", 2)]}
    raw = orjson.dumps({"schema": schema, "payload": {"p": "not base64!"}})
    with pytest.raises(DecodeError, match="Decimal"):
        value_decoder("connect-json")(rec(raw))


def test_connect_json_key_may_be_scalar() -> None:
    decode = key_decoder("connect-json")
    assert decode(rec(key=b'{"schema": {"type": "string"}, "payload": "k1"}')) == "k1"
    assert decode(rec(key=b"17")) == 17
