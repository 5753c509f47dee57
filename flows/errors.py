"""The pipeline's exceptions: one root (`sinks.errors`, re-exported here), data on each,
picklable across Bytewax processes. The flow's own errors subclass `PipelineError`."""

from __future__ import annotations

from sinks.errors import (
    ConfigError,
    DeadLetterDeliveryError,
    DeadLetterLimitError,
    ElasticsearchUnavailableError,
    PipelineError,
    RecordFailedError,
)

__all__ = [
    "ConfigError",
    "DeadLetterDeliveryError",
    "DeadLetterLimitError",
    "ElasticsearchUnavailableError",
    "PipelineError",
    "RecordFailedError",
]
