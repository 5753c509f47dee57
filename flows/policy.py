"""The error policy (ERRORS_TOLERANCE and the dead-letter circuit breaker) lives with the
dead letters it governs, in `sinks.dead_letter.policy`; re-exported here."""

from __future__ import annotations

from sinks.dead_letter.policy import ErrorPolicy

__all__ = ["ErrorPolicy"]
