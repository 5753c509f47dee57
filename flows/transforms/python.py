"""The `python` built-in: your own transform, imported at start (or made by a factory)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from flows.transforms.entry import Entry
from flows.transforms.registry import Transform, builtin


@builtin(
    "python",
    keys=("python", "config"),
    doc="""`pkg.mod:func` imported at start; with config: {...}, `func(**config)` is called
    once and must return the transform. `{python: pkg.mod:func}` is short for
    `{type: python, python: pkg.mod:func}`; TRANSFORMS=pkg.mod:func,... adds such entries.""",
    label=False,
)
def python(e: Entry) -> Transform:
    target = e.req_text("python")
    func = _import(e, target)
    if not e.has("config"):
        return func
    config = e.raw["config"]
    if not isinstance(config, Mapping) or not all(isinstance(k, str) for k in config):
        e.reject(".config", f"expected a map of keyword arguments, got {config!r}")
    try:
        transform = func(**config)
    except Exception as exc:
        msg = f"{target}(**config) failed: {type(exc).__name__}: {exc}"
        e.reject(".config", msg)
    if not callable(transform):
        e.reject(
            ".config", f"{target}(**config) returned {type(transform).__name__}, not a transform"
        )
    return transform


def _import(e: Entry, target: str) -> Callable[..., Any]:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        e.reject(".python", f"cannot import {target!r}: expected package.module:function")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        e.reject(".python", f"cannot import {target!r}: {type(exc).__name__}: {exc}")
    if not callable(obj):
        e.reject(".python", f"cannot import {target!r}: {type(obj).__name__} is not callable")
    return obj
