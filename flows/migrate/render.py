"""A `Migration` as an ES_SINK_CONFIG file: a header that says what the file cannot (the
variables holding the connector's secrets, how to run it), then the settings."""

from __future__ import annotations

import textwrap
from typing import Any

import yaml

from flows.migrate.translate import Migration


def yaml_text(m: Migration) -> str:
    name = m.connector.name or "(unnamed)"
    lines = [
        f"# ES_SINK_CONFIG for the flow that takes over from Kafka Connect connector {name}",
        f"# (es-sink migrate config, from {m.connector.origin}).",
    ]
    if m.environment:
        lines.append("# Set in the environment, never in this file:")
        width = max(len(k) for k in m.environment)
        lines.extend(
            f"#   {env:<{width}}  the value of {opt}" for env, opt in m.environment.items()
        )
    for comment in m.comments:
        lines.extend(f"# {line}" for line in textwrap.wrap(comment, 96, subsequent_indent="  "))
    unsupported = m.unsupported()
    if unsupported:
        text = "Not carried over (see the table): " + ", ".join(r.option for r in unsupported)
        lines.extend(f"# {line}" for line in textwrap.wrap(text, 96, subsequent_indent="  "))
    for key in sorted(m.settings, key=_order):
        lines.append(_entry(key, m.settings[key]))
    return "\n".join(lines) + "\n"


def _order(key: str) -> int:
    """The settings in the order flows/config declares them (docs/configuration.md's), transforms
    last."""
    from flows.config import declared

    names = [n.lower() for n in declared()]
    if key == "transforms":
        return len(names) + 1
    return names.index(key) if key in names else len(names)


def _entry(key: str, value: Any) -> str:
    if key == "transforms":
        body = yaml.safe_dump(
            [value_ for value_ in value], default_flow_style=None, sort_keys=False, width=100
        )
        items = "".join(f"  {line}\n" for line in body.rstrip("\n").splitlines())
        return f"{key}:\n{items}".rstrip("\n")
    text = yaml.safe_dump({key: value}, default_flow_style=False, sort_keys=False, width=100)
    return text.rstrip("\n")
