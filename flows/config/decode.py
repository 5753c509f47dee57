"""Decoding settings: read by flows/decode/ (the converters and the Schema Registry client)."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import model_validator

from flows.config.fields import SCHEMA_REGISTRY_CONFIG_PREFIX, Flag, Group, OneOf, Pairs, setting
from flows.decode import CONVERTERS, REGISTRY_FORMATS
from flows.errors import ConfigError

VALUE_FORMATS = tuple(CONVERTERS)  # the converter registry is the only list of formats

Format = Annotated[str, OneOf(VALUE_FORMATS)]


class DecodeSettings(Group):
    """How record keys and values become documents."""

    value_format: Format = setting("VALUE_FORMAT", "json", "converter of record values")
    key_format: Format = setting("KEY_FORMAT", "string", "converter of record keys")
    json_as_is: Flag = setting(
        "JSON_AS_IS",
        True,
        "`json` values that nothing reads go to Elasticsearch as they arrived, validated",
    )
    value_field: str = setting(
        "VALUE_FIELD", "message", "field that wraps `string` / `bytes` values"
    )
    schema_registry_url: str | None = setting(
        "SCHEMA_REGISTRY_URL", None, "Confluent Schema Registry, for avro, json-schema, protobuf"
    )
    schema_registry_config: Pairs = setting(
        "SCHEMA_REGISTRY_CONFIG",
        {},
        "schema-registry client settings: SCHEMA_REGISTRY_CONFIG_<NAME> variables, or a YAML map",
        prefix=SCHEMA_REGISTRY_CONFIG_PREFIX,
        repr=False,
    )
    schema_registry_retry_budget_s: float = setting(
        "SCHEMA_REGISTRY_RETRY_BUDGET_S",
        300.0,
        "how long a record waits for an unavailable registry before the flow stops; 0: forever",
        ge=0.0,
    )

    @model_validator(mode="after")
    def _registry_for_registry_formats(self) -> Self:
        for name, fmt in (("VALUE_FORMAT", self.value_format), ("KEY_FORMAT", self.key_format)):
            if fmt in REGISTRY_FORMATS and not self.schema_registry_url:
                raise ConfigError(f"SCHEMA_REGISTRY_URL: required when {name}={fmt}")
        return self
