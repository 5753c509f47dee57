"""The built-in transform registry: `@builtin(name, keys=..., doc=...)` on a builder.

A builder takes the checked configuration entry (`flows.transforms.entry.Entry`) and
returns the transform; it runs once at start, so everything that can be compiled (paths,
regexes, templates, imports) is compiled there. `build_transforms`, the key check of every
entry and the test that holds docs/transforms.md's table to the built-ins all read `BUILTINS`, so a
new built-in is one decorated function in its family's module (plus its tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from flows.record import Doc

if TYPE_CHECKING:
    from flows.transforms.entry import Entry

Transform: TypeAlias = Callable[[Doc], Doc | list[Doc] | None]
"""A callable that keeps (returns the Doc), drops (None) or fans out (list of Docs)."""

Builder: TypeAlias = Callable[["Entry"], Transform]


@dataclass(frozen=True, slots=True)
class Builtin:
    """One built-in transform type: `{type: <name>, ...}` in the `transforms:` list."""

    name: str
    keys: frozenset[str]
    """The keys an entry may have besides `type`; any other is a ConfigError."""
    doc: str
    """What it does and what its keys mean (the reference; docs/transforms.md's table sums it
    up)."""
    build: Builder
    label: bool = True
    """Name the transform after its entry (`transforms[i] (name)`) for error messages."""


BUILTINS: dict[str, Builtin] = {}
"""Every built-in by name, in registration order; filled as the family modules import."""


def builtin(
    name: str, *, keys: Iterable[str], doc: str, label: bool = True
) -> Callable[[Builder], Builder]:
    """Register the decorated builder as the built-in transform `name`."""

    def register(build: Builder) -> Builder:
        if name in BUILTINS:
            msg = f"built-in transform {name!r} registered twice"
            raise ValueError(msg)
        BUILTINS[name] = Builtin(name, frozenset(keys), " ".join(doc.split()), build, label)
        return build

    return register


def label(closure: Any, text: str) -> None:
    """Name a built-in's closure after its entry, so errors point at the configuration."""
    closure.__qualname__ = closure.__name__ = text
