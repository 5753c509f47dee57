"""The way out: the document model and everything that writes documents.

This is the lower layer: it imports nothing from `flows` (tests/unit/flows/test_layering.py).
Inside, the order is one-way too: `model, errors, secrets, deep, backoff, metrics,
resources, failing, partitioned` → `dead_letter` → `elasticsearch`.
"""

from __future__ import annotations

from sinks.backoff import Backoff, Clock
from sinks.dead_letter import DeadLetterConfig, DeadLetterSink, ErrorPolicy, ErrorTolerance
from sinks.elasticsearch import ElasticsearchSink, EsSinkConfig, check_credentials
from sinks.errors import (
    ConfigError,
    DeadLetterDeliveryError,
    DeadLetterLimitError,
    ElasticsearchUnavailableError,
    PipelineError,
    RecordFailedError,
)
from sinks.model import MISSING, Action, DeadLetter, Doc, FieldPath, Record
from sinks.secrets import Secret, redact

__all__ = [
    "MISSING",
    "Action",
    "Backoff",
    "Clock",
    "ConfigError",
    "DeadLetter",
    "DeadLetterConfig",
    "DeadLetterDeliveryError",
    "DeadLetterLimitError",
    "DeadLetterSink",
    "Doc",
    "ElasticsearchSink",
    "ElasticsearchUnavailableError",
    "ErrorPolicy",
    "ErrorTolerance",
    "EsSinkConfig",
    "FieldPath",
    "PipelineError",
    "Record",
    "RecordFailedError",
    "Secret",
    "check_credentials",
    "redact",
]
