"""What `es-sink migrate config` found for each option: the rows of its table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAPPED = "mapped"
"""Carried over: the flow's setting(s) do what the option did."""
DEFAULT = "default"
"""The connector's default, or the flow's behaviour already: nothing to do."""
NO_EFFECT = "no effect"
"""Given, but the flow has no such knob and what it writes does not depend on it."""
UNSUPPORTED = "not supported"
"""Cannot be carried over faithfully: why, and the nearest equivalent."""
STATUSES = (MAPPED, DEFAULT, NO_EFFECT, UNSUPPORTED)


@dataclass
class Row:
    """One connector option (or a default the connector applied) and what became of it."""

    option: str
    value: str | None
    """The option's text as given (a secret as `***`); None: not given, its default applies."""
    status: str
    setting: str = ""
    """The flow's setting(s) it became, as `NAME=value` (empty: none)."""
    note: str = ""
    """Why, and for what is not supported the nearest equivalent."""

    def as_json(self) -> dict[str, Any]:
        return {
            "option": self.option,
            "value": self.value,
            "status": self.status,
            "setting": self.setting,
            "note": self.note,
        }
