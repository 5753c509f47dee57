"""Where settings come from: the environment, over a YAML file named by ES_SINK_CONFIG.

Both are pydantic-settings sources keyed by environment name, so the settings class merges
them (the environment wins; the pass-through maps merge key by key) and one validation
reports every problem under the name the user wrote. Blank values count as unset.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic.fields import FieldInfo
from pydantic_settings import PydanticBaseSettingsSource

from flows.errors import ConfigError

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings


def env_name(field: FieldInfo) -> str | None:
    """The environment name of a declared setting (None for values derived at load)."""
    alias = field.validation_alias
    return alias if isinstance(alias, str) else None


def env_prefix(field: FieldInfo) -> str | None:
    """`KAFKA_CONFIG_` for a map that `KAFKA_CONFIG_<NAME>` variables fill."""
    extra = field.json_schema_extra
    prefix = extra.get("x-env-prefix") if isinstance(extra, dict) else None
    return prefix if isinstance(prefix, str) else None


def env_names(settings_cls: type[BaseSettings]) -> dict[str, str]:
    """Environment name -> field name, for every declared setting."""
    return {
        name: field_name
        for field_name, field in settings_cls.model_fields.items()
        if (name := env_name(field)) is not None
    }


def _given(value: Any) -> Any:
    """Stripped text, or None for a blank value (which counts as unset)."""
    if isinstance(value, str):
        value = value.strip()
        return value or None
    return value


class _Source(PydanticBaseSettingsSource):
    """A source that has already read its values (keyed by environment name)."""

    values: dict[str, Any]

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        name = env_name(field) or field_name
        return self.values.get(name), name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.values)


class EnvironmentSource(_Source):
    """The declared variables, plus `<PREFIX><NAME>` pass-through variables collected into
    their map (`KAFKA_CONFIG_SECURITY_PROTOCOL=x` -> `kafka_config["security.protocol"]`);
    other variables are ignored."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self.values = {}
        for field in settings_cls.model_fields.values():
            name = env_name(field)
            if name is None:
                continue
            if (prefix := env_prefix(field)) is not None:
                passed = {
                    key[len(prefix) :].lower().replace("_", "."): str(value)
                    for key, value in environ.items()
                    if key.startswith(prefix)
                }
                if passed:
                    self.values[name] = passed
            elif (value := _given(environ.get(name))) is not None:
                self.values[name] = value

    def __repr__(self) -> str:  # never the values: they hold secrets
        return f"EnvironmentSource({sorted(self.values)})"


class YamlFileSource(_Source):
    """ES_SINK_CONFIG: the same names in lower case; an unknown key is refused by name."""

    def __init__(self, settings_cls: type[BaseSettings], path: str | None) -> None:
        super().__init__(settings_cls)
        self.path = path
        self.values = {}
        if not path:
            return
        known = env_names(settings_cls)
        for key, value in _read_yaml(path).items():
            name = str(key).upper()
            if name not in known:
                msg = f"{key}: unknown setting in {path}"
                raise ConfigError(msg)
            if (value := _given(value)) is not None:
                self.values[name] = value

    def __repr__(self) -> str:
        return f"YamlFileSource({self.path!r})"


def _read_yaml(path: str) -> dict[Any, Any]:
    import yaml

    try:
        text = Path(path).read_text()
    except OSError as e:
        msg = f"ES_SINK_CONFIG: cannot read {path}: {e.strerror}"
        raise ConfigError(msg) from None
    try:
        data = yaml.load(text, Loader=_safe_loader()) or {}  # noqa: S506 (a safe loader)
    except yaml.YAMLError as e:
        msg = f"ES_SINK_CONFIG: {path} is not valid YAML: {e}"
        raise ConfigError(msg) from None
    if not isinstance(data, dict):
        msg = f"ES_SINK_CONFIG: {path} must hold a mapping of settings"
        raise ConfigError(msg)
    return data


def _safe_loader() -> Any:
    """libyaml's safe loader when PyYAML was built with it (about 10x faster), else Python's."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)
