"""Per-record transforms: change, drop, route or fan out documents before they are indexed.

A transform is any callable `transform(doc) -> Doc | list[Doc] | None`:

* return the `Doc` (changed in place, or a new one) to keep it;
* return `None` (or an empty list) to drop the record: nothing is indexed, its offset is
  still committed;
* return a list of Docs to fan out: every later transform runs on each of them.

A transform may set `doc.index`, `doc.id`, `doc.routing`, `doc.key`, `doc.delete`,
`doc.meta` and change or replace `doc.source`. It must not modify `doc.record`, and every Doc
it returns must carry the same `record` object: the record's offset is what gets committed
and its original bytes are what goes to the dead-letter topic, whatever the transforms did.
Fanned-out Docs may share a `source` dict; copy it when the copies must differ.

An exception raised by a transform dead-letters the record (stage `transform`), so a
transform should raise rather than guess when a record does not fit.

The configured chain (`transforms:` in YAML, or TRANSFORMS=pkg.mod:func,...) is compiled
once by `build_transforms`: dotted paths are split, regexes compiled and functions imported
at start, so a mistake (including an unknown type or key) fails the start with a
`ConfigError` naming `transforms[i]`, and the per-record work is only the transform itself.
`compile_transforms` then writes the whole chain as one function (flows.transforms.compiled):
the flow runs that, and `apply_transforms` compiles it too; the tests hold it to a plain
interpreter of the chain, which they keep as the reference.

Built-in types (`{type: <name>, ...}`, modelled on Kafka Connect SMTs) are registered with
`@builtin(name, keys=..., doc=...)` in their family's module: fields (insert_field, rename,
drop, keep, mask, extract), ids (key_from_field, id_from_field), timestamps
(timestamp_convert), filters (filter), route, cdc (debezium, unwrap), action, python. `BUILTINS`
holds each one's keys and doc; docs/transforms.md's table sums them up (a test holds the two
together).

Dotted paths (`a.b.c`, `sinks.model.FieldPath`) walk nested objects; they do not index into
lists, and a field whose name contains a dot cannot be addressed. A field that holds null is
there (its value is None); a missing one, or one under a null or a non-object, is not. A
tombstone (`source` None) passes unchanged through the body edits (insert_field, rename,
drop, keep, mask, extract, timestamp_convert); key_from_field, id_from_field and route's
timestamp_field/routing_field raise for it, as for any missing field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flows.errors import ConfigError
from flows.record import Doc

# The families register their built-ins on import.
from flows.transforms import (  # noqa: F401
    action,
    cdc,
    fields,
    filters,
    ids,
    python,
    route,
    timestamps,
)
from flows.transforms.compiled import Compiled, compile_transforms
from flows.transforms.entry import Entry
from flows.transforms.registry import BUILTINS, Builtin, Transform, builtin, label

__all__ = [
    "BUILTINS",
    "Builtin",
    "Compiled",
    "Transform",
    "apply_transforms",
    "build_transforms",
    "builtin",
    "compile_transforms",
]


def apply_transforms(transforms: Sequence[Transform], doc: Doc) -> list[Doc]:
    """Run `transforms` in order on `doc` and return the resulting Docs.

    It runs the compiled chain (`compile_transforms`, the one implementation of the
    chain), compiled the first time these transform objects are seen and remembered (up to
    CHAIN_CACHE_LIMIT chains), as callers run one chain on many Docs.

    Args:
        transforms: The compiled chain (`build_transforms`), plain functions, or both.
        doc: The document made from one Kafka record.

    Returns:
        The Docs to index: `[doc]` when nothing dropped or fanned out, `[]` when dropped.

    Raises:
        TypeError: A transform returned something other than a Doc, a list of Docs or None.
        ValueError: A transform returned a Doc that does not carry the input's `record`.
        Exception: Whatever a transform raised, unchanged (the caller dead-letters it).
    """
    key = tuple(map(id, transforms))
    entry = _chains.get(key)
    if entry is None:
        if len(_chains) >= CHAIN_CACHE_LIMIT:
            _chains.clear()
        kept = tuple(transforms)
        entry = _chains[key] = (kept, compile_transforms(kept))
    return entry[1](doc)


CHAIN_CACHE_LIMIT = 64
_chains: dict[tuple[int, ...], tuple[tuple[Transform, ...], Compiled]] = {}
"""`apply_transforms`' compiled chains, by the identity of their transforms: two transforms
that compare equal may still do different things. Each entry keeps its transforms alive,
so their ids are never reused for others while it is here."""


def build_transforms(specs: Sequence[Mapping[str, Any]]) -> list[Transform]:
    """Compile the configured transform entries, in order, once at start.

    Args:
        specs: Entries as in Settings.transforms: `{type: <name>, ...}` for a built-in, or
            `{python: "pkg.mod:func"}` (optionally with `config: {...}` for a factory).

    Returns:
        The transforms, ready for `apply_transforms`.

    Raises:
        ConfigError: An entry is invalid; the message starts with `transforms[i]`.
    """
    if isinstance(specs, str | bytes | Mapping):
        msg = f"transforms: expected a list of entries, got {type(specs).__name__}"
        raise ConfigError(msg)
    out: list[Transform] = []
    for i, entry in enumerate(specs):
        e = Entry(i, entry)
        kind = BUILTINS[e.type]
        transform = kind.build(e)
        if kind.label:
            label(transform, f"transforms[{i}] ({e.type})")
        out.append(transform)
    return out
