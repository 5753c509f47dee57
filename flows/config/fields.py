"""The vocabulary settings are declared in: `setting()` and the value types that the
environment (text) and a YAML file (text, numbers, lists, maps) both have to be read into.

A declaration says everything once: the environment name (also the YAML key, in lower case),
the default, bounds (`ge`, `le`) or choices (`OneOf`), secrecy (`SecretValue`) and a one-line
doc. The loader, the error messages, `python -m flows.config` and the docs' tables
(`tools.devkit.docs`) read it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
)
from pydantic import ValidationError as ValidationError
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from flows.errors import ConfigError
from sinks.secrets import Secret

KAFKA_CONFIG_PREFIX = "KAFKA_CONFIG_"
SCHEMA_REGISTRY_CONFIG_PREFIX = "SCHEMA_REGISTRY_CONFIG_"


class Group(BaseModel):
    """Settings read by one part of the program; `Settings` composes the groups into one flat
    model, so a group's own validation schema is never built (defer_build)."""

    model_config = ConfigDict(defer_build=True)


def setting(
    env: str,
    default: Any,
    doc: str,
    *,
    shown: str | None = None,
    prefix: str | None = None,
    **constraints: Any,
) -> Any:
    """One setting: read from the environment variable `env` (and the YAML key `env.lower()`).

    `shown` is the default as the docs write it when it is not the value itself (a
    computed default); `prefix` names the pass-through variables that fill a YAML-only map."""
    extra: dict[str, Any] = {}
    if shown is not None:
        extra["x-default"] = shown
    if prefix is not None:
        extra["x-env-prefix"] = prefix
    return Field(
        default,
        validation_alias=env,
        description=doc,
        json_schema_extra=extra or None,
        **constraints,
    )


@dataclass(frozen=True)
class OneOf:
    """Choices, case-insensitive (the value is lowered); often a registry's names."""

    choices: tuple[str, ...]

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = handler(schema)
        out["enum"] = list(self.choices)
        return out

    def _check(self, value: Any) -> str:
        text = str(value).lower()
        if text not in self.choices:
            raise PydanticCustomError(
                "choice",
                "expected one of {choices}, got {got}",
                {"choices": ", ".join(self.choices), "got": repr(text)},
            )
        return text


def _flag(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise PydanticCustomError("flag", "expected true or false, got {got}", {"got": repr(value)})


def _items(value: Any) -> Any:
    """`a, b,,c` from the environment or a YAML list: the non-empty stripped items."""
    if isinstance(value, tuple):
        return value
    items = value if isinstance(value, list) else str(value).split(",")
    return tuple(s for s in (str(i).strip() for i in items) if s)


def pairs(value: Any) -> Any:
    """A YAML map, or `a:b,c:d` from the environment."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    out = {}
    for pair in str(value).split(","):
        k, sep, v = pair.partition(":")
        if not sep or not k.strip() or not v.strip():
            raise PydanticCustomError(
                "pairs",
                "expected topic:index pairs separated by commas, got {got}",
                {"got": repr(pair)},
            )
        out[k.strip()] = v.strip()
    return out


def _secret(value: Any) -> Secret:
    return value if isinstance(value, Secret) else Secret(str(value))


Flag = Annotated[bool, BeforeValidator(_flag, json_schema_input_type=bool | str)]


def _compiles(value: str) -> str:
    try:
        re.compile(value)
    except re.error as e:
        raise ValueError(f"invalid regular expression: {e}") from None
    return value


Regex = Annotated[str, AfterValidator(_compiles)]
"""A regular expression, kept as text; one that does not compile is refused at start."""
"""true/false, 1/0, yes/no, on/off (any case), or a YAML boolean."""
Items = Annotated[tuple[str, ...], BeforeValidator(_items, json_schema_input_type=str | list[str])]
"""Comma-separated from the environment, or a YAML list."""
PairsInput = str | dict[str, str | int | float | bool]
Pairs = Annotated[dict[str, str], BeforeValidator(pairs, json_schema_input_type=PairsInput)]
"""`key:value,key:value` from the environment, or a YAML map."""


class _SecretText:
    """Any text, kept as a `Secret`; the JSON Schema marks it a write-only password."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(_secret)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "string", "format": "password", "writeOnly": True}


SecretValue = Annotated[Secret, _SecretText()]
"""Never shown: repr, str and format give `***` (see sinks.secrets)."""


# ------------------------------------------------------------------ one-line errors


_MESSAGES = {
    "int_parsing": "expected a whole number, got {input!r}",
    "int_from_float": "expected a whole number, got {input!r}",
    "int_type": "expected a whole number, got {input!r}",
    "float_parsing": "expected a number, got {input!r}",
    "float_type": "expected a number, got {input!r}",
    "greater_than_equal": "must be at least {ge}, got {input}",
    "less_than_equal": "must be at most {le}, got {input}",
    "string_type": "expected text, got {input!r}",
    "dict_type": "expected a map, got {input!r}",
}


class SettingsError(ConfigError):
    """Every invalid setting found in one reading; its message is the first of them (the
    flow's one line), `problems` all of them (what `es-sink check` lists)."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(self.problems[0])

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problems,))


def config_error(error: ValidationError) -> SettingsError:
    """pydantic's report as one line per setting, in declaration order: `BULK_MAX_ACTIONS:
    must be at least 1, got 0`."""
    return SettingsError([_line(e) for e in error.errors(include_url=False)])


def _line(error: Any) -> str:
    ctx = error.get("ctx") or {}
    template = _MESSAGES.get(error["type"])
    if error["type"] == "value_error":
        text = str(ctx.get("error", error["msg"]))
    elif template is not None:
        text = template.format(input=error.get("input"), **ctx)
    else:
        text = error["msg"]
    return f"{location(error['loc'])}: {_one_line(text)}"


def location(loc: tuple[int | str, ...]) -> str:
    """`ES_INDEX_MAP[orders]`; entries of the YAML-only list read `transforms[0]`."""
    if not loc:
        return "ES_SINK_CONFIG"
    name, *rest = loc
    if rest and name == "TRANSFORMS":
        name = "transforms"
    return str(name) + "".join(f"[{part}]" for part in rest)


def _one_line(text: str) -> str:
    return re.sub(r"\s*\n\s*", " ", text).strip()
