"""The pipeline's exceptions: one root, data on each, picklable across Bytewax processes.

The root and the errors the sinks raise live here, at the bottom of the stack; the flow's
own errors (decoding, the Kafka source) subclass the root in `flows`.
"""

from __future__ import annotations


class PipelineError(Exception):
    """Root of every error this project raises on purpose."""


class ConfigError(PipelineError):
    """A setting is missing or invalid; the message names the setting."""


class RecordFailedError(PipelineError):
    """A record failed and ERRORS_TOLERANCE=none (or a dead-letter policy) stops the flow."""

    def __init__(self, where: str, stage: str, reason: str) -> None:
        self.where = where
        self.stage = stage
        self.reason = reason
        super().__init__(
            f"record {where} failed at stage {stage}: {reason} "
            "(ERRORS_TOLERANCE=none stops the flow; nothing past this record is committed)"
        )

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return (type(self), (self.where, self.stage, self.reason))


class DeadLetterLimitError(PipelineError):
    """Too many records in a row, or too large a share, went to the dead-letter topic."""


class DeadLetterDeliveryError(PipelineError):
    """The dead-letter topic did not confirm a record within the retry budget."""


class ElasticsearchUnavailableError(PipelineError):
    """Elasticsearch stayed unreachable or overloaded past ES_RETRY_BUDGET_S."""
