"""The `string` and `bytes` converters.

- `string`: strict UTF-8; a value becomes `{VALUE_FIELD: text}`, a key the text.
- `bytes`: base64; a value becomes `{VALUE_FIELD: "<base64>"}`, a key the base64 string.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flows.decode.common import DecodeError, Decoder, b64, snippet

if TYPE_CHECKING:
    from flows.config import Settings
    from flows.record import Record


def build_string(settings: Settings, is_value: bool) -> Decoder:
    """The `string` converter: strict UTF-8, a value wrapped as `{VALUE_FIELD: text}`."""
    value_field = settings.value_field

    def text_of(data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            msg = f"invalid UTF-8 at byte {e.start}: {e.reason}; payload starts {snippet(data)}"
            raise DecodeError(msg) from None

    # The decoders call `bytes.decode` themselves (one call per record, not two) and leave
    # the error message to `text_of`, which fails the same way again.
    if is_value:

        def decode_string_value(record: Record) -> dict[str, Any]:
            data: bytes = record.value  # type: ignore[assignment]  # never None
            try:
                return {value_field: data.decode("utf-8")}
            except UnicodeDecodeError:
                return {value_field: text_of(data)}

        return decode_string_value

    def decode_string_key(record: Record) -> Any:
        data: bytes = record.key  # type: ignore[assignment]  # never None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return text_of(data)

    return decode_string_key


def build_bytes(settings: Settings, is_value: bool) -> Decoder:
    """The `bytes` converter: base64, a value wrapped as `{VALUE_FIELD: base64}`."""
    value_field = settings.value_field
    if is_value:

        def decode_bytes_value(record: Record) -> dict[str, Any]:
            return {value_field: b64(record.value)}  # type: ignore[arg-type]

        return decode_bytes_value

    def decode_bytes_key(record: Record) -> Any:
        return b64(record.key)  # type: ignore[arg-type]

    return decode_bytes_key
