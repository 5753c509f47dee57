"""Dead letters and the error policy: the policy of sinks/dead_letter/policy.py and the
dead-letter producer's config are built here; flows/process.py reads tombstones and null
keys."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Self

from pydantic import model_validator

from flows.config.fields import Flag, Group, OneOf, setting
from flows.errors import ConfigError
from sinks.dead_letter.config import DeadLetterConfig, ErrorTolerance
from sinks.secrets import Secret

if TYPE_CHECKING:
    from flows.config.kafka import ClientKind

TOLERANCES = ("none", "all", "log")
NULL_VALUE_POLICIES = ("ignore", "delete", "dlq", "fail")
NULL_KEY_POLICIES = ("coordinates", "dlq", "fail")


class DeadLetterSettings(Group):
    """Where failed records go, and when failures stop the flow."""

    dlq_topic: str | None = setting("DLQ_TOPIC", None, "dead-letter topic (must exist)")
    errors_tolerance: Annotated[str, OneOf(TOLERANCES)] = setting(
        "ERRORS_TOLERANCE",
        "none",
        "none: a failed record stops the flow; all: dead-letter it; log: log it and skip it",
    )
    errors_log_values: Flag = setting(
        "ERRORS_LOG_VALUES", False, "ERRORS_TOLERANCE=log: add the record's key and value"
    )
    dlq_stacktrace: Flag = setting(
        "DLQ_STACKTRACE", False, "add __connect.errors.exception.stacktrace"
    )
    dlq_max_consecutive: int = setting(
        "DLQ_MAX_CONSECUTIVE", 0, "stop when more records than this fail in a row (0: off)", ge=0
    )
    dlq_max_ratio: float = setting(
        "DLQ_MAX_RATIO", 0.0, "stop when the failed share exceeds this (0: off)", ge=0.0, le=1.0
    )
    dlq_ratio_min_records: int = setting(
        "DLQ_RATIO_MIN_RECORDS", 1000, "records seen before DLQ_MAX_RATIO applies", ge=1
    )
    on_null_value: Annotated[str, OneOf(NULL_VALUE_POLICIES)] = setting(
        "ON_NULL_VALUE", "ignore", "tombstones: ignore, delete (by document id), dlq or fail"
    )
    on_null_key: Annotated[str, OneOf(NULL_KEY_POLICIES)] = setting(
        "ON_NULL_KEY",
        "coordinates",
        "DOC_ID=key with a null key: use coordinates, or dlq; or fail, as Kafka Connect's "
        "sink: a failed record (ERRORS_TOLERANCE decides), and a tombstone under "
        "ON_NULL_VALUE=delete skipped (it names no document)",
    )
    dlq_retry_budget_s: float = setting(
        "DLQ_RETRY_BUDGET_S",
        0.0,
        "0 means retry the dead-letter topic forever on transient broker errors (the flow stalls)",
        ge=0.0,
    )

    @model_validator(mode="after")
    def _dead_letters_need_a_topic(self) -> Self:
        if self.errors_tolerance == "all" and not self.dlq_topic:
            msg = "DLQ_TOPIC: required when ERRORS_TOLERANCE=all (dead letters go there)"
            raise ConfigError(msg)
        if self.errors_tolerance == "log" and self.dlq_topic:
            msg = (
                "DLQ_TOPIC: not used with ERRORS_TOLERANCE=log (failed records are logged and "
                "skipped); unset it, or use ERRORS_TOLERANCE=all to dead-letter them"
            )
            raise ConfigError(msg)
        if self.errors_log_values and self.errors_tolerance != "log":
            msg = "ERRORS_LOG_VALUES: only with ERRORS_TOLERANCE=log (it logs skipped records)"
            raise ConfigError(msg)
        for name, policy in (
            ("ON_NULL_VALUE", self.on_null_value),
            ("ON_NULL_KEY", self.on_null_key),
        ):
            if policy == "dlq" and not self.dlq_topic:
                raise ConfigError(f"DLQ_TOPIC: required when {name}=dlq")
        return self

    if TYPE_CHECKING:  # the flat Settings's, which reads the other groups

        def secrets(self) -> list[str]: ...

        def librdkafka(
            self,
            client: ClientKind,
            defaults: Mapping[str, Any] | None = None,
            **overrides: Any,
        ) -> dict[str, Any]: ...

    @functools.cached_property
    def error_tolerance(self) -> ErrorTolerance:
        """ERRORS_TOLERANCE and the dead-letter circuit breaker."""
        return ErrorTolerance(
            tolerate=self.errors_tolerance != "none",
            max_consecutive=self.dlq_max_consecutive,
            max_ratio=self.dlq_max_ratio,
            min_records=self.dlq_ratio_min_records,
            secrets=tuple(Secret(v) for v in self.secrets()),
            log=self.errors_tolerance == "log",
            log_values=self.errors_log_values,
        )

    @functools.cached_property
    def dead_letter_config(self) -> DeadLetterConfig | None:
        """DLQ_TOPIC and how to reach it; None without one. One object per settings object,
        so the producer cached on it is shared."""
        if not self.dlq_topic:
            return None
        return DeadLetterConfig(
            topic=self.dlq_topic,
            kafka=self.librdkafka("producer"),
            retry_budget_s=self.dlq_retry_budget_s,
            secrets=tuple(Secret(v) for v in self.secrets()),
        )
