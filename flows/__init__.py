"""The way in and through: settings, the Kafka source, decoding, transforms, the dataflow.

The public names below are what user code imports (`from flows import build_flow, Doc`); the
longer paths (`flows.pipeline.build_flow`, `flows.record.Doc`, ...) keep working, and
`flows.runtime.shutdown.install` stays where it is (its name says nothing outside its
module). They load on first use (PEP 562), so `import flows.config` does not pull in
Bytewax, the clients or the registries. `from flows import collector, shutdown`, which a
flow module of one's own used before they moved to `flows.runtime`, still gives them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flows.config import Settings
    from flows.pipeline import build_flow
    from flows.runtime.collector import collect_on_a_clock
    from flows.transforms import Transform, apply_transforms, build_transforms
    from sinks.errors import ConfigError, PipelineError
    from sinks.model import DeadLetter, Doc, Record

_HOMES = {
    "build_flow": "flows.pipeline",
    "Settings": "flows.config",
    "Transform": "flows.transforms",
    "apply_transforms": "flows.transforms",
    "build_transforms": "flows.transforms",
    "Doc": "sinks.model",
    "Record": "sinks.model",
    "DeadLetter": "sinks.model",
    "ConfigError": "sinks.errors",
    "PipelineError": "sinks.errors",
    "collect_on_a_clock": "flows.runtime.collector",
}

__all__ = [
    "ConfigError",
    "DeadLetter",
    "Doc",
    "PipelineError",
    "Record",
    "Settings",
    "Transform",
    "apply_transforms",
    "build_flow",
    "build_transforms",
    "collect_on_a_clock",
]


_MOVED_MODULES = {
    "collector": "flows.runtime.collector",
    "shutdown": "flows.runtime.shutdown",
}
"""Modules a user's flow module imports from `flows` by their old home."""


def __getattr__(name: str) -> Any:
    if name in _MOVED_MODULES:
        value = import_module(_MOVED_MODULES[name])
        globals()[name] = value
        return value
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'flows' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value
