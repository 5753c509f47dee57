"""Helpers shared by the tests/unit/test_decode_*.py files."""

from __future__ import annotations

from typing import Any

from confluent_kafka.serialization import MessageField, SerializationContext

from flows.config import Settings
from flows.decode import build_decoder
from flows.record import Record
from tests.support.schema_registry_stub import SchemaRegistryStub

TOPIC = "orders"


def settings(**env: str) -> Settings:
    return Settings.load({"KAFKA_TOPICS": TOPIC, **env})


def rec(
    value: bytes | None = None, key: bytes | None = None, headers: tuple[Any, ...] = ()
) -> Record:
    return Record(TOPIC, 0, 7, 1_700_000_000_000, key, value, headers)


def value_decoder(fmt: str, **env: str) -> Any:
    return build_decoder(settings(VALUE_FORMAT=fmt, **env), "value")


def key_decoder(fmt: str, **env: str) -> Any:
    return build_decoder(settings(KEY_FORMAT=fmt, **env), "key")


FAST_GIVE_UP = {"SCHEMA_REGISTRY_CONFIG_MAX_RETRIES": "0", "SCHEMA_REGISTRY_RETRY_BUDGET_S": "0.05"}
"""A client that does not retry, and a record that waits 0.05 s for an unavailable registry."""


def registry_env(registry: SchemaRegistryStub, **env: str) -> dict[str, str]:
    return {"SCHEMA_REGISTRY_URL": registry.url, **FAST_GIVE_UP, **env}


def ctx(field: MessageField = MessageField.VALUE, headers: Any = None) -> SerializationContext:
    return SerializationContext(TOPIC, field, headers)
