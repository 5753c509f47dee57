"""Transform settings: read by flows/transforms/ (build_transforms) at start."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator
from pydantic_core import PydanticCustomError

from flows.config.fields import Group, setting


def _entries(value: Any) -> Any:
    """A YAML list of entries, or `pkg.mod:func,...` from the environment (python entries)."""
    if isinstance(value, list | tuple):
        return value
    return [{"python": s} for s in (s.strip() for s in str(value).split(",")) if s]


def _entry(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    if "type" not in entry and "python" not in entry:
        raise PydanticCustomError("entry", "each entry needs a `type:` or a `python:` key")
    return entry


def _mapping(entry: Any) -> Any:
    if not isinstance(entry, dict):
        raise PydanticCustomError("entry", "each entry needs a `type:` or a `python:` key")
    return entry


Entry = Annotated[dict[str, Any], BeforeValidator(_mapping), AfterValidator(_entry)]


class TransformSettings(Group):
    """The transforms, in order: YAML entries (`type:` built-ins, `python:` functions)."""

    transforms: Annotated[
        tuple[Entry, ...],
        BeforeValidator(_entries, json_schema_input_type=str | list[dict[str, Any]]),
    ] = setting(
        "TRANSFORMS", (), "Python transforms `pkg.mod:func,...`, or the YAML `transforms:` list"
    )
