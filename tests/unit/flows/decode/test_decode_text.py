"""flows.decode.text: the string and bytes converters."""

from __future__ import annotations

import base64

import pytest

from flows.decode import DecodeError
from tests.support.decode import (
    key_decoder,
    rec,
    value_decoder,
)

# -- string and bytes


def test_string_value_and_key() -> None:
    assert value_decoder("string")(rec("héllo".encode())) == {"message": "héllo"}
    assert value_decoder("string", VALUE_FIELD="line")(rec(b"x")) == {"line": "x"}
    assert key_decoder("string")(rec(key=b"k-1")) == "k-1"


@pytest.mark.parametrize("raw", [b"\xff", b"ok \xc3", b"\xed\xa0\x80"])
def test_string_rejects_invalid_utf8(raw: bytes) -> None:
    with pytest.raises(DecodeError, match="invalid UTF-8"):
        value_decoder("string")(rec(raw))
    with pytest.raises(DecodeError, match="invalid UTF-8"):
        key_decoder("string")(rec(key=raw))


def test_bytes_value_and_key() -> None:
    raw = bytes(range(256))
    expected = base64.b64encode(raw).decode()
    assert value_decoder("bytes")(rec(raw)) == {"message": expected}
    assert key_decoder("bytes")(rec(key=raw)) == expected
    assert value_decoder("bytes")(rec(b"")) == {"message": ""}
