"""Settings: environment variables, optionally on top of a YAML file (ES_SINK_CONFIG).

The environment variable names are a public contract. A YAML file uses the same names in
lower case plus `transforms:` (a list) and `kafka_config:` / `schema_registry_config:` /
`es_index_map:` (maps); the environment overrides the file. Every invalid value raises
`ConfigError` naming the setting, in one line.

Each setting is declared once (pydantic-settings), in the group of the part of the program
that reads it, with the rules across settings on the group they govern:

- `kafka.KafkaSettings`: topics, cluster, consumer group, librdkafka pass-through;
- `decode.DecodeSettings`: key and value formats, the Schema Registry;
- `transforms.TransformSettings`: the transform list;
- `dead_letters.DeadLetterSettings`: the dead-letter topic and the error policy;
- `document.DocumentSettings`: index, id, version, routing, write method;
- `elasticsearch.ConnectionSettings`, `elasticsearch.BulkSettings`: the cluster, `_bulk`;
- `runtime.RuntimeSettings`: graceful stop, garbage collector, metadata refresh.
- `fencing.FencingSettings`: taking partitions over from an older instance of the group.
- `api.ApiSettings`: the status and control API of each process.

`Settings` is all of them as one flat model (`settings.bulk_max_actions`). Each group also
builds the frozen config of the part it serves, beside its declarations and cached per
settings object (`settings.es_connection`, `settings.es_documents`, `settings.es_bulk`,
`settings.error_tolerance`, ..., composed by `settings.es_sink_config`): a new sink setting
is its declaration and its line in that builder, plus the sink's field.
`python -m flows.config --markdown` lists them; `--json-schema` prints the YAML file's schema.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any, Self

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from flows.config.api import ApiSettings
from flows.config.dead_letters import NULL_KEY_POLICIES, NULL_VALUE_POLICIES, DeadLetterSettings
from flows.config.decode import REGISTRY_FORMATS, VALUE_FORMATS, DecodeSettings
from flows.config.document import WRITE_METHODS, DocumentSettings
from flows.config.elasticsearch import BulkSettings, ConnectionSettings
from flows.config.fencing import FencingSettings
from flows.config.fields import (
    KAFKA_CONFIG_PREFIX,
    SCHEMA_REGISTRY_CONFIG_PREFIX,
    ValidationError,
    config_error,
)
from flows.config.kafka import KafkaSettings
from flows.config.runtime import RuntimeSettings
from flows.config.sources import EnvironmentSource, YamlFileSource, env_names, env_prefix
from flows.config.transforms import TransformSettings
from sinks.elasticsearch.config import EsSinkConfig
from sinks.secrets import Secret, redact

__all__ = [
    "KAFKA_CONFIG_PREFIX",
    "NULL_KEY_POLICIES",
    "NULL_VALUE_POLICIES",
    "REGISTRY_FORMATS",
    "SCHEMA_REGISTRY_CONFIG_PREFIX",
    "VALUE_FORMATS",
    "WRITE_METHODS",
    "Secret",
    "Settings",
    "redact",
]

# Pass-through keys whose values are credentials (masked wherever text leaves the process).
_SENSITIVE = re.compile(
    r"password|secret|user\.info|sasl\.jaas|token|credential|key\.pem|key$", re.IGNORECASE
)


# The groups in reverse: pydantic collects fields and runs validators from the last base to
# the first, so this order reads (and checks) Kafka first, as docs/configuration.md lists them.
class Settings(
    ApiSettings,
    FencingSettings,
    RuntimeSettings,
    BulkSettings,
    ConnectionSettings,
    DocumentSettings,
    DeadLetterSettings,
    TransformSettings,
    DecodeSettings,
    KafkaSettings,
    BaseSettings,
):
    """Everything the flow needs, parsed and checked once at start.

    Compared and hashed by identity, so per-process resources (one Elasticsearch client,
    one dead-letter producer) can be cached per settings object.
    """

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        validate_by_name=True,
        validate_by_alias=True,
        coerce_numbers_to_str=True,
        validate_default=True,
        defer_build=False,
    )

    def __eq__(self, other: object) -> bool:
        return self is other

    def __copy__(self) -> Self:
        """A copy (`model_copy(update=...)` makes one) builds its own parts: the ones cached
        on this object describe this object's values."""
        return super().__copy__()._without_parts()

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Self:
        return super().__deepcopy__(memo)._without_parts()

    def _without_parts(self) -> Self:
        """This copy, its cached parts dropped: they describe the object it was copied from."""
        for name in _PARTS:
            self.__dict__.pop(name, None)
        return self

    def __hash__(self) -> int:
        return object.__hash__(self)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """`Settings(...)` takes only its arguments; `load()` reads the environment and file."""
        return (init_settings,)

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ES_SINK_CONFIG (if set) and the environment; raise ConfigError if invalid."""
        env = os.environ if environ is None else environ
        path = (env.get("ES_SINK_CONFIG") or "").strip() or None
        sources = (EnvironmentSource(cls, env), YamlFileSource(cls, path))
        try:
            return cls(_build_sources=(sources, {}))  # type: ignore[call-arg]
        except ValidationError as e:
            raise config_error(e) from None

    @functools.cached_property
    def es_sink_config(self) -> EsSinkConfig:
        """What the Elasticsearch sink reads: the parts each group builds beside its
        declarations (the sinks never see `Settings`)."""
        return EsSinkConfig(
            connection=self.es_connection,
            documents=self.es_documents,
            bulk=self.es_bulk,
            retry=self.es_retry,
            template=self.es_template,
            tolerance=self.error_tolerance,
            dead_letters=self.dead_letter_config,
        )

    def secrets(self) -> list[str]:
        """Every configured secret value, to mask wherever text leaves the process."""
        out = [
            value.reveal()
            for name in type(self).model_fields
            if isinstance(value := getattr(self, name), Secret) and value.reveal()
        ]
        for conf in (self.kafka_config, self.schema_registry_config):
            out.extend(v for k, v in conf.items() if _SENSITIVE.search(k) and v)
        return out


_PARTS = tuple(
    name
    for klass in Settings.__mro__
    for name, value in vars(klass).items()
    if isinstance(value, functools.cached_property)
)
"""The parts the groups build and cache on a settings object (`es_connection`, ...)."""


def declared() -> dict[str, Any]:
    """Environment name -> FieldInfo of every setting, in declaration order."""
    fields = Settings.model_fields
    return {name: fields[field] for name, field in env_names(Settings).items()}


# Settings read from the environment, by name (the YAML file uses them in lower case); the
# maps only YAML can express are filled from the environment by their prefix.
_ENV_NAMES = frozenset(name for name, field in declared().items() if env_prefix(field) is None)


# A variable that starts as two or more settings do (`BULK_`, `DLQ_`, `ES_`, ...) and is none
# of them is likely a typo; the local stack's and the tests' own variables are not.
_PREFIXES = tuple(
    sorted(
        f"{word}_"
        for word, n in Counter(name.split("_")[0] for name in _ENV_NAMES if "_" in name).items()
        if n > 1
    )
)
_NOT_SETTINGS = re.compile(
    r"ES_SINK_CONFIG|ES_SINK_TEST_\w*|(KAFKA|ES)_(\w*_)?(PORT|DIR|VERSION|HEAP|URL)"
    r"|ES_JAVA_\w+|ES_DISTRIBUTION|ES_PATH_CONF"
)


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """One warning line per environment variable that looks like a setting and is not one
    (the flow ignores it), naming the nearest setting."""
    env = os.environ if environ is None else environ
    known = sorted(declared())
    passthrough = tuple(p for f in declared().values() if (p := env_prefix(f)) is not None)
    out = []
    for name in sorted(env):
        if (
            name in known
            or not name.startswith(_PREFIXES)
            or name.startswith(passthrough)
            or _NOT_SETTINGS.fullmatch(name)
        ):
            continue
        near = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        out.append(f"{name}: not a setting, ignored{hint}")
    return out
