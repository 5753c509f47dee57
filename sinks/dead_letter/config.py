"""What the dead-letter side needs from the configuration: frozen, built once at start.

Compared and hashed by identity (`eq=False`): one producer per process and config
(`shared_producer`), as for the settings they are built from (`flows.config.dead_letters`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sinks.secrets import Secret


@dataclass(frozen=True, eq=False)
class ErrorTolerance:
    """ERRORS_TOLERANCE and the dead-letter circuit breaker (see `sinks.dead_letter.policy`)."""

    tolerate: bool
    """ERRORS_TOLERANCE=all or log: failed records become dead letters, or are logged and
    skipped (none: the flow stops)."""
    max_consecutive: int
    """DLQ_MAX_CONSECUTIVE; 0: no limit."""
    max_ratio: float
    """DLQ_MAX_RATIO; 0: no limit."""
    min_records: int
    """DLQ_RATIO_MIN_RECORDS: records seen before the ratio applies."""
    secrets: tuple[Secret, ...] = field(default=(), repr=False)
    """Configured secret values, masked in the errors that stop the flow."""
    log: bool = False
    """ERRORS_TOLERANCE=log: a failed record is logged (one line) and skipped, not sent to a
    dead-letter topic; the breaker applies as for dead letters."""
    log_values: bool = False
    """ERRORS_LOG_VALUES: those lines also show the record's key and value."""


@dataclass(frozen=True, eq=False)
class DeadLetterConfig:
    """DLQ_TOPIC and how to reach it."""

    topic: str
    kafka: Mapping[str, Any] = field(repr=False)
    """librdkafka settings: bootstrap.servers and the KAFKA_CONFIG_* pass-through."""
    retry_budget_s: float
    """DLQ_RETRY_BUDGET_S: seconds of failed deliveries before the flow stops; 0: forever."""
    secrets: tuple[Secret, ...] = field(default=(), repr=False)
    """Configured secret values, masked in the dead letters' error headers."""
