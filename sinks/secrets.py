"""Secret values: never shown in repr, logs or tracebacks, and masked in messages."""

from __future__ import annotations

from collections.abc import Sequence


def redact(text: str, secrets: Sequence[str]) -> str:
    """`text` with every secret value replaced by `***` (messages that may quote them)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


class Secret(str):
    """A string that never shows itself in repr, logs or tracebacks."""

    def __repr__(self) -> str:
        return "Secret('***')"

    def reveal(self) -> str:
        """The value, for the one place that sends it to a server."""
        return str.__str__(self)

    def __str__(self) -> str:
        return "***"

    def __format__(self, spec: str) -> str:
        return "***"
