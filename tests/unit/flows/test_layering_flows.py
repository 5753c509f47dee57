"""Inside `flows` the modules point one way too: the data path reads from the bottom up
(errors and runtime facts, decoding and transforms, settings, topic look-ups, the source
and the processor, the dataflow) and the entry point and operator tools sit on top, where
nothing below may import them. Imports under `if TYPE_CHECKING:` are types only and are
not edges.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.flows.test_layering import ROOT, module_name

RANKS = {
    "runtime.version": -1,  # read by the metrics, the API, the CLI and the entry point
    **dict.fromkeys(("errors", "record", "runtime.args", "metrics"), 0),
    **dict.fromkeys(
        (
            "halt",
            "runtime.recovery_store",
            "runtime.recovery_failure",
            "runtime.config_failure",
            "runtime.shutdown",
            "runtime.collector",
            "runtime.control",
        ),
        1,
    ),
    **dict.fromkeys(("decode", "transforms"), 2),
    "config": 3,  # with the sinks' configs each settings group builds
    **dict.fromkeys(("kafka.topics", "kafka.consumers", "kafka.fencing", "runtime.lifecycle"), 4),
    "kafka.discovery": 5,
    **dict.fromkeys(("kafka.source", "process"), 6),
    "pipeline": 7,
    **dict.fromkeys(
        ("es_sink", "api", "cli", "migrate", "", "kafka", "runtime"), 8
    ),  # "": flows/__init__.py; "kafka", "runtime": their package docstrings
}
"""The rank of each unit (module or subpackage directly under flows/)."""

FLOW_FILES = sorted((ROOT / "flows").rglob("*.py"))


SPLIT = ("kafka", "runtime")
"""Packages whose modules are units of their own: they sit on different layers."""


def unit(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in SPLIT:
        return f"{parts[1]}.{parts[2]}"
    return parts[1] if len(parts) > 1 else ""


def runtime_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every `flows` import that runs, function-level ones included."""
    tree = ast.parse(path.read_text(), str(path))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names)
    return [(line, m) for line, m in out if m.startswith("flows.")]


def test_every_unit_has_a_rank() -> None:
    assert sorted({unit(module_name(p)) for p in FLOW_FILES} - RANKS.keys()) == []


@pytest.mark.parametrize("path", FLOW_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_flows_modules_import_only_lower_units(path: Path) -> None:
    own = unit(module_name(path))
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: imports {mod} (rank {RANKS[unit(mod)]} >= {RANKS[own]})"
        for line, mod in runtime_imports(path)
        if unit(mod) != own and RANKS.get(unit(mod), 0) >= RANKS[own] and RANKS[own] < 8
    ]
    assert wrong == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from flows.config import S\n"
        "def f():\n    from flows.pipeline import build_flow\n"
    )
    assert runtime_imports(probe) == [(5, "flows.pipeline.build_flow")]
