"""Record decoders: Kafka key/value bytes to documents, one decoder per role, built at start.

`build_decoder(settings, "value")` returns a callable `Record -> dict` (the document);
`build_decoder(settings, "key")` returns a callable `Record -> Any` (the decoded key). The
callables are never given a null key or value: the caller handles tombstones and null keys.

`CONVERTERS` is the only list of formats (VALUE_FORMAT / KEY_FORMAT): each names the
function that builds its decoder, imported on use so that optional dependencies stay
optional, and whether it needs SCHEMA_REGISTRY_URL. A converter's behaviour is documented
in its module: `json` and `connect-json` in flows.decode.json, `string` and `bytes` in
flows.decode.text, `json-schema` in flows.decode.registry (with the lazy Schema Registry
client it shares with `avro` in flows.decode.avro and `protobuf` in flows.decode.protobuf);
the errors and the strict JSON rules in flows.decode.common.

A new converter is one module with `build(settings, is_value) -> Decoder` plus one line in
`CONVERTERS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from flows.decode.common import DecodeError, Decoder, RegistryUnavailableError, Role
from flows.errors import ConfigError

if TYPE_CHECKING:
    from flows.config import Settings

__all__ = [
    "CONVERTERS",
    "REGISTRY_FORMATS",
    "Converter",
    "DecodeError",
    "Decoder",
    "RegistryUnavailableError",
    "Role",
    "build_decoder",
]


@dataclass(frozen=True, slots=True)
class Converter:
    """One VALUE_FORMAT / KEY_FORMAT choice."""

    builder: str
    """`module:function`, `function(settings, is_value) -> Decoder`, imported on first use."""
    needs_registry: bool = False
    """The format needs SCHEMA_REGISTRY_URL."""

    def build(self, settings: Settings, is_value: bool) -> Decoder:
        """Import the builder and build the decoder."""
        module, _, name = self.builder.partition(":")
        builder: Callable[[Settings, bool], Decoder] = getattr(
            importlib.import_module(module), name
        )
        return builder(settings, is_value)


CONVERTERS: Mapping[str, Converter] = MappingProxyType(
    {
        "json": Converter("flows.decode.json:build_json"),
        "connect-json": Converter("flows.decode.json:build_connect_json"),
        "string": Converter("flows.decode.text:build_string"),
        "bytes": Converter("flows.decode.text:build_bytes"),
        "avro": Converter("flows.decode.avro:build_avro", needs_registry=True),
        "json-schema": Converter("flows.decode.registry:build_json_schema", needs_registry=True),
        "protobuf": Converter("flows.decode.protobuf:build_protobuf", needs_registry=True),
    }
)
"""The formats, in the order docs/converters.md lists them: the only list of them."""

REGISTRY_FORMATS: tuple[str, ...] = tuple(n for n, c in CONVERTERS.items() if c.needs_registry)
"""The formats that need SCHEMA_REGISTRY_URL (derived from CONVERTERS)."""


def build_decoder(settings: Settings, role: Role) -> Decoder:
    """Build the decoder for record values or keys, as configured.

    Args:
        settings: The flow settings (`value_format`/`key_format`, `value_field`, registry).
        role: `"value"` for documents (must decode to a JSON object) or `"key"`.

    Returns:
        A callable taking a `Record` whose value (or key) is not None, returning a `dict`
        for role value and any JSON-compatible value for role key.

    Raises:
        ConfigError: The format is unknown or the registry settings are invalid.
        ValueError: `role` is neither "value" nor "key".
    """
    if role not in ("value", "key"):
        msg = f"role must be 'value' or 'key', got {role!r}"
        raise ValueError(msg)
    is_value = role == "value"
    fmt = settings.value_format if is_value else settings.key_format
    setting = "VALUE_FORMAT" if is_value else "KEY_FORMAT"
    converter = CONVERTERS.get(fmt)
    if converter is None:
        msg = f"{setting}: unknown format {fmt!r}"
        raise ConfigError(msg)
    if converter.needs_registry and not settings.schema_registry_url:
        msg = f"SCHEMA_REGISTRY_URL: required when {setting}={fmt}"
        raise ConfigError(msg)
    return converter.build(settings, is_value)
