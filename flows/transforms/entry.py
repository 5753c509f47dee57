"""Typed, checked access to one `transforms:` entry; every error names `transforms[i]`.

Also the few helpers every family of built-ins shares.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from flows.errors import ConfigError
from flows.transforms.registry import BUILTINS
from sinks.model import MISSING, FieldPath

CACHE_LIMIT = 10_000
"""Entries a per-transform cache (by topic, by epoch second) holds before it starts over."""


def topic_matcher(pattern: re.Pattern[str]) -> Callable[[str], bool]:
    """Whether `pattern` fully matches a topic, cached per topic (a regex per record is the
    cost a filter or the debezium transform would otherwise add)."""
    cache: dict[str, bool] = {}

    def matches(topic: str) -> bool:
        hit = cache.get(topic)
        if hit is None:
            if len(cache) > CACHE_LIMIT:
                cache.clear()
            hit = cache[topic] = pattern.fullmatch(topic) is not None
        return hit

    return matches


def short(value: Any) -> str:
    """`repr(value)` cut at 80 characters, for error messages about a record's values."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Entry:
    """One configuration entry with typed, checked access; every error names `transforms[i]`."""

    def __init__(self, index: int, raw: Any) -> None:
        self.where = f"transforms[{index}]"
        if not isinstance(raw, Mapping):
            self.reject("", f"expected a mapping with a type: or python: key, got {raw!r}")
        self.raw = raw
        kind = raw.get("type")
        if kind is None and "python" in raw:
            kind = "python"
        if kind is None:
            self.reject("", "each entry needs a `type:` or a `python:` key")
        if not isinstance(kind, str) or kind not in BUILTINS:
            choices = ", ".join(sorted(BUILTINS))
            self.reject(".type", f"unknown transform type {kind!r} (expected one of {choices})")
        self.type = kind
        allowed = BUILTINS[kind].keys | {"type"}
        for key in raw:
            if key not in allowed:
                near = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                keys = ", ".join(sorted(allowed))
                self.reject(f".{key}", f"unknown key for type {kind} (allowed: {keys}){hint}")

    def reject(self, key: str, problem: str) -> NoReturn:
        """Raise ConfigError `transforms[i]<key>: <problem>` (key is `""` or `.name`)."""
        msg = f"{self.where}{key}: {problem}"
        raise ConfigError(msg) from None

    def has(self, key: str) -> bool:
        return key in self.raw

    def required(self, key: str) -> Any:
        if key not in self.raw or self.raw[key] is None:
            self.reject(f".{key}", f"required for type {self.type}")
        return self.raw[key]

    def text(self, key: str, default: str | None = None) -> str | None:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, str) or not value:
            self.reject(f".{key}", f"expected a non-empty string, got {value!r}")
        return value

    def req_text(self, key: str) -> str:
        self.required(key)
        value = self.text(key)
        assert value is not None
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.reject(f".{key}", f"expected true or false, got {value!r}")
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str | None = None) -> str:
        value = self.text(key, default)
        if value is None:
            self.reject(f".{key}", f"required for type {self.type}")
        if value not in choices:
            self.reject(f".{key}", f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    def path(self, key: str, value: Any = MISSING) -> FieldPath:
        if value is MISSING:
            value = self.required(key)
        if not isinstance(value, str) or not value or "" in value.split("."):
            self.reject(f".{key}", f"expected a dotted field path like a.b.c, got {value!r}")
        return FieldPath(value)

    def paths(self, key: str) -> list[FieldPath]:
        value = self.required(key)
        if not isinstance(value, list | tuple) or not value:
            self.reject(f".{key}", f"expected a non-empty list of field paths, got {value!r}")
        return [self.path(key, v) for v in value]

    def regex(self, key: str, value: Any = MISSING) -> re.Pattern[str]:
        if value is MISSING:
            value = self.required(key)
        if not isinstance(value, str):
            self.reject(f".{key}", f"expected a regular expression string, got {value!r}")
        try:
            return re.compile(value)
        except re.error as e:
            self.reject(f".{key}", f"invalid regular expression: {e}")

    def exactly_one(self, keys: tuple[str, ...]) -> str:
        given = [k for k in keys if k in self.raw]
        if len(given) != 1:
            which = " or ".join(keys)
            problem = f"give exactly one of {which}" + (f", not {len(given)}" if given else "")
            self.reject(f".{given[1] if len(given) > 1 else keys[0]}", problem)
        return given[0]
