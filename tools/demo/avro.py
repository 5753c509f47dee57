"""The demo's events as Avro, through a Schema Registry (`scripts/demo --format avro`).

The JSON events of `tools.demo.generator` are written with confluent-kafka's `AvroSerializer`,
which registers EVENT_SCHEMA under the topic's `-value` subject (TopicNameStrategy) and
frames each record with the schema id; the flow reads them with VALUE_FORMAT=avro.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping

import orjson

CCOMPAT_PATH = "/apis/ccompat/v7"
"""Where `scripts/stack up registry` (Apicurio Registry) serves the Confluent API."""

_ITEM = {
    "type": "record",
    "name": "Item",
    "fields": [
        {"name": "sku", "type": "string"},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": "double"},
    ],
}
EVENT_SCHEMA = {
    "type": "record",
    "name": "Event",
    "namespace": "tools.demo.shop",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "type", "type": "string"},
        {"name": "ts", "type": "long"},
        {
            "name": "user",
            "type": {
                "type": "record",
                "name": "User",
                "fields": [
                    {"name": "id", "type": "string"},
                    {"name": "country", "type": "string"},
                ],
            },
        },
        {"name": "session", "type": "string"},
        {"name": "device", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "query", "type": ["null", "string"], "default": None},
        {"name": "items", "type": ["null", {"type": "array", "items": _ITEM}], "default": None},
        {"name": "total", "type": ["null", "double"], "default": None},
    ],
}


def registry_url(env: Mapping[str, str]) -> str:
    """SCHEMA_REGISTRY_URL when set, else the registry `scripts/stack` serves (STACK_HOST,
    REGISTRY_PORT)."""
    host = env.get("STACK_HOST", "127.0.0.1")
    default = f"http://{host}:{env.get('REGISTRY_PORT', '8081')}{CCOMPAT_PATH}"
    return env.get("SCHEMA_REGISTRY_URL") or default


def as_avro(
    pairs: Iterable[tuple[bytes, bytes]], url: str, topic: str
) -> Iterator[tuple[bytes, bytes]]:
    """The (key, JSON event) pairs with each event Avro-encoded, Confluent-framed."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(EVENT_SCHEMA))
    ctx = SerializationContext(topic, MessageField.VALUE)
    for key, value in pairs:
        yield key, serialize(orjson.loads(value), ctx)
