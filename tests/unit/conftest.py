"""Fixtures shared by unit test modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from tests.support.schema_registry_stub import SchemaRegistryStub


@pytest.fixture(autouse=True)
def _fast_registry_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record waiting for an unavailable registry retries every few milliseconds."""
    from flows.decode import registry as decode_registry
    from sinks.backoff import Backoff

    monkeypatch.setattr(decode_registry, "RETRY_BACKOFF", Backoff(initial_s=0.005, max_s=0.02))


@pytest.fixture(scope="module")
def registry() -> Iterator[SchemaRegistryStub]:
    """A Schema Registry stand-in on 127.0.0.1 (the decoders' converters talk to it)."""
    with SchemaRegistryStub() as stub:
        yield stub


@pytest.fixture(scope="module")
def client(registry: SchemaRegistryStub) -> Iterator[SchemaRegistryClient]:
    """A client of the stand-in, to register schemas and serialize test records."""
    with SchemaRegistryClient({"url": registry.url}) as c:
        yield c
