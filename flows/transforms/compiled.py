"""The configured chain as one generated function, compiled once at start.

Run one transform at a time, the chain would cost a loop, a call and a check of what each
transform returned per record, and each built-in's path helpers, more than the edits
themselves (docs/benchmarks.md). `compile_transforms` writes one Python function for the
whole chain instead: a built-in that carries its edit as source (`Inline`, attached by its
builder with `inline`) is pasted in, specialised to its configured fields; any other
transform (a user's function, or a built-in without inline source) is called, and only
what it returns is checked, inline, as the transform contract (flows.transforms) says. A
fan-out runs the rest of the chain, compiled the same way, on each Doc. This is the one
implementation of the chain: the flow and `apply_transforms` run it.

The generated source is built from trusted configuration only, the code each built-in
writes: a configured value (a field name, a pattern, a constant) never enters the source
as text; it is bound to a name in the function's namespace (`Inline.names`) and the source
reads that name.

The tests hold it to a plain interpreter of the chain (tests/support/transforms.py),
and each built-in to its closure, on every transform test and on random records.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from flows.record import Doc, Record
from flows.transforms.registry import Transform
from sinks.model import MISSING, FieldPath

_F = TypeVar("_F", bound=Callable[..., Any])

Compiled = Callable[[Doc], list[Doc]]
"""The whole chain: one Doc in, the Docs to index out (`[]` when dropped)."""


@dataclass(frozen=True, slots=True)
class Inline:
    """A built-in's edit as statements on `doc` (may `return []` to drop the record).

    Every `$name` in `code` becomes a name of this step alone: its locals, and the values
    in `names` (compiled patterns, paths, constants) the code reads."""

    code: str
    names: dict[str, Any] = field(default_factory=dict)


def inline(function: _F, code: str, **names: Any) -> _F:
    """Attach `code` (see `Inline`) to a built-in's closure; the closure stays the reference."""
    function.__inline__ = Inline(code, names)  # type: ignore[attr-defined]
    return function


def get_code(target: str, source: str, path: FieldPath, tag: str = "") -> str:
    """Statements setting `target` to `path.get(source)`, unrolled (MISSING when absent);
    they read the keys as `$k<tag>_<i>` (`path_names`)."""
    lines = [f"{target} = {source}"]
    for i in range(len(path.keys)):
        lines.append(
            f"{target} = {target}.get($k{tag}_{i}, _MISSING) if isinstance({target}, dict) "
            "else _MISSING"
        )
    return "\n".join(lines)


def parent_code(target: str, source: str, path: FieldPath, tag: str = "") -> str:
    """Statements setting `target` to `path.parent(source)`, unrolled (None when none)."""
    lines = [f"{target} = {source}"]
    for i in range(len(path.head)):
        lines.append(
            f"{target} = {target}.get($k{tag}_{i}) if isinstance({target}, dict) else None"
        )
    lines.append(f"if not isinstance({target}, dict):\n    {target} = None")
    return "\n".join(lines)


def set_code(source: str, value: str, path: FieldPath, tag: str = "") -> str:
    """Statements doing `path.set(source, value)`, unrolled; `value` is evaluated first."""
    if not path.head:
        return f"{source}[$k{tag}_0] = {value}"
    lines = [f"$value{tag} = {value}", f"$obj{tag} = {source}"]
    for i in range(len(path.head)):
        lines += [
            f"$child{tag} = $obj{tag}.get($k{tag}_{i})",
            f"if $child{tag} is None:",
            f"    $child{tag} = $obj{tag}[$k{tag}_{i}] = {{}}",
            f"elif not isinstance($child{tag}, dict):",
            f"    $path{tag}.set({source}, $value{tag})  # raises: holds something else",
            f"$obj{tag} = $child{tag}",
        ]
    lines.append(f"$obj{tag}[$k{tag}_{len(path.head)}] = $value{tag}")
    return "\n".join(lines)


def path_names(path: FieldPath, tag: str = "") -> dict[str, Any]:
    """The `$k<tag>_<i>` that `get_code` and `parent_code` read for `path`."""
    names: dict[str, Any] = {f"k{tag}_{i}": key for i, key in enumerate(path.keys)}
    names[f"path{tag}"] = path
    return names


def indent(code: str, levels: int = 1) -> str:
    """`code` nested `levels` blocks deeper."""
    pad = "    " * levels
    return "\n".join(pad + line for line in code.splitlines())


_counter = itertools.count()


def compile_transforms(transforms: Sequence[Transform]) -> Compiled:
    """One function for `transforms`: one Doc in, the Docs to index out (see the module)."""
    return _compile(tuple(transforms), 0, {})


def _compile(
    transforms: tuple[Transform, ...], start: int, suffixes: dict[int, Compiled]
) -> Compiled:
    """The chain of `transforms[start:]`. A step that is called, not pasted in, needs the
    rest of the chain for a fan-out: each rest is compiled once (`suffixes`, by its start),
    not again inside every earlier rest, which would take 2^n compiles for n such steps."""
    if start == len(transforms):
        return _unchanged
    done = suffixes.get(start)
    if done is not None:
        return done
    namespace: dict[str, Any] = {
        "_MISSING": MISSING,
        "_Doc": Doc,
        "_fan_out": _fan_out,
        "_replaced": _replaced,
        "_returned": _returned,
    }
    lines = ["def chain(doc):", "    record = doc.record"]
    for i, transform in enumerate(transforms[start:], start):
        spec = getattr(transform, "__inline__", None)
        if isinstance(spec, Inline):  # not whatever a user object's __getattr__ makes up
            prefix = f"_{i}_"
            code = spec.code.replace("$", prefix)
            lines.extend("    " + line for line in code.splitlines())
            for name, value in spec.names.items():
                namespace[prefix + name] = value
            continue
        t, rest = f"_t{i}", f"_rest{i}"
        namespace[t] = transform
        namespace[rest] = _compile(transforms, i + 1, suffixes)
        lines += [
            f"    out = {t}(doc)",
            "    if out is not doc:",
            "        if out is None:",
            "            return []",
            "        if isinstance(out, _Doc):",
            f"            doc = _replaced({t}, out, record)",
            "        elif isinstance(out, list):",
            f"            return _fan_out({rest}, {t}, out, record)",
            "        else:",
            f"            raise _returned({t}, out)",
        ]
    lines.append("    return [doc]")
    source = "\n".join(lines) + "\n"
    filename = f"<transforms {next(_counter)}>"
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own source
    chain: Compiled = namespace["chain"]
    chain.__source__ = source  # type: ignore[attr-defined]
    suffixes[start] = chain
    return chain


def _unchanged(doc: Doc) -> list[Doc]:
    return [doc]


def _replaced(transform: Transform, out: Doc, record: Record) -> Doc:
    if out.record is not record:
        raise foreign_record(transform)
    return out


def _returned(transform: Transform, out: Any) -> TypeError:
    return TypeError(
        f"transform {transform_name(transform)} returned {type(out).__name__}; "
        "expected a Doc, a list of Docs or None"
    )


def _fan_out(rest: Compiled, transform: Transform, docs: list[Any], record: Record) -> list[Doc]:
    check_fan_out(transform, docs, record)
    if rest is _unchanged:
        return list(docs)
    out: list[Doc] = []
    for d in docs:
        out.extend(rest(d))
    return out


def check_fan_out(transform: Transform, docs: list[Any], record: Record) -> None:
    """Raise unless `docs` (what `transform` returned) are distinct Docs of `record`."""
    seen: set[int] = set()
    for d in docs:
        if not isinstance(d, Doc):
            msg = (
                f"transform {transform_name(transform)} returned a list holding "
                f"{type(d).__name__}; expected a Doc, a list of Docs or None"
            )
            raise TypeError(msg)
        if d.record is not record:
            raise foreign_record(transform)
        if id(d) in seen:
            msg = f"transform {transform_name(transform)} returned the same Doc object twice"
            raise ValueError(msg)
        seen.add(id(d))


def foreign_record(transform: Transform) -> ValueError:
    """The error for a Doc returned with another record than the input's."""
    return ValueError(
        f"transform {transform_name(transform)} returned a Doc with a different record; "
        "every Doc must keep the input's `record` object (offsets and dead letters use it)"
    )


_OWN_MODULES = "flows.transforms"


def transform_name(transform: Transform) -> str:
    """A transform's name in errors: its entry for a built-in, module.name for a user's."""
    name = getattr(transform, "__qualname__", None)
    if not isinstance(name, str):
        return repr(transform)[:100]
    module = getattr(transform, "__module__", None)
    if not module or module == _OWN_MODULES or module.startswith(_OWN_MODULES + "."):
        return name
    return f"{module}.{name}"
