"""The declarations as documentation: a Markdown table per group, the defaults as the
docs write them, and the JSON Schema of an ES_SINK_CONFIG file."""

from __future__ import annotations

from typing import Any

from pydantic.fields import FieldInfo

from flows.config import Settings
from flows.config.fields import Group
from flows.config.sources import env_name, env_prefix

MIB = 1024 * 1024


def groups() -> list[tuple[type[Group], dict[str, FieldInfo]]]:
    """Each group of `Settings` in the docs' order, with its settings by environment name."""
    out = []
    for group in reversed(Settings.__bases__):
        if issubclass(group, Group):
            own = {
                name: Settings.model_fields[field]
                for field in group.model_fields
                if (name := env_name(Settings.model_fields[field])) is not None
            }
            out.append((group, own))
    return out


def variable(field: FieldInfo) -> str:
    """`KAFKA_CONFIG_<NAME>` for a pass-through map, else the environment name."""
    prefix = env_prefix(field)
    return f"{prefix}<NAME>" if prefix else str(env_name(field))


def shown_default(field: FieldInfo) -> str:
    """The default as the docs' tables write it: `` `text` ``, a number, 8 MiB, or blank."""
    extra = field.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("x-default"), str):
        return str(extra["x-default"])
    value = field.default
    if value is None or value == () or value == {}:
        return ""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int) and value >= MIB and value % MIB == 0:
        return f"{value // MIB} MiB"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, tuple):
        return f"`{','.join(value)}`"
    return f"`{value}`"


def markdown() -> str:
    """Every setting, a table per group (`python -m flows.config --markdown`)."""
    lines: list[str] = []
    for group, fields in groups():
        title = (group.__doc__ or group.__name__).strip().splitlines()[0]
        lines += [f"### {group.__name__}: {title}", ""]
        lines += ["| variable | default | meaning |", "| --- | --- | --- |"]
        for field in fields.values():
            doc = (field.description or "").replace("|", "\\|")
            lines.append(f"| `{variable(field)}` | {shown_default(field)} | {doc} |")
        lines.append("")
    return "\n".join(lines)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of an ES_SINK_CONFIG file: the same settings, keys in lower case."""
    schema = Settings.model_json_schema(by_alias=True)
    schema["properties"] = {k.lower(): v for k, v in schema["properties"].items()}
    schema["title"] = "es-sink settings (ES_SINK_CONFIG)"
    schema["description"] = (
        "The environment variables of the same names (upper case) override these keys."
    )
    return schema
