"""The layers point one way: `flows` may import `sinks`, never the reverse; inside `sinks`
the base modules come first, then the dead letters, then Elasticsearch.

Every import is read from the source (AST), function-level ones included, so a lazy
import cannot hide an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import ROOT

SINKS = ROOT / "sinks"

BASE = (
    "model",
    "errors",
    "secrets",
    "deep",
    "progress",
    "backoff",
    "metrics",
    "resources",
    "failing",
)
RANKS = {
    **{f"sinks.{m}": 0 for m in BASE},
    "sinks.partitioned": 1,
    "sinks.dead_letter": 2,
    "sinks.elasticsearch": 3,
    "sinks.actions": 4,  # the old name of sinks.elasticsearch.actions
    "sinks": 4,  # the package's public names
}
"""A sinks module may import only sinks modules of its rank or lower."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, here: str | None = None) -> list[tuple[int, str]]:
    """(line, imported module) for every import in `path` (module `here`); `from pkg import
    sub` counts as an import of `pkg.sub` when `sub` is a module."""
    tree = ast.parse(path.read_text(), str(path))
    here = here or module_name(path)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this package
                pkg = here.split(".")
                if path.name != "__init__.py":
                    pkg = pkg[:-1]
                pkg = pkg[: len(pkg) - node.level + 1]
                base = ".".join([*pkg, base] if base else pkg)
            for a in node.names:
                sub = f"{base}.{a.name}"
                is_module = (ROOT / Path(*sub.split("."))).with_suffix(".py").exists() or (
                    ROOT / Path(*sub.split(".")) / "__init__.py"
                ).exists()
                out.append((node.lineno, sub if is_module else base))
    return out


def rank(module: str) -> int | None:
    """The rank of the sinks module `module` (its longest ranked prefix)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        r = RANKS.get(".".join(parts[:n]))
        if r is not None:
            return r
    return None


SINK_FILES = sorted(SINKS.rglob("*.py"))


def test_every_sinks_module_has_a_rank() -> None:
    unranked = [module_name(p) for p in SINK_FILES if rank(module_name(p)) is None]
    assert unranked == []


@pytest.mark.parametrize("path", SINK_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_sinks_never_import_flows(path: Path) -> None:
    assert edges([path], "flows") == []


def edges(paths: list[Path], package: str) -> list[str]:
    """`path:line: imports module` for every import of `package` (or below) in `paths`."""
    return [
        f"{path.relative_to(ROOT)}:{line}: imports {mod}"
        for path in paths
        for line, mod in imports(path)
        if mod == package or mod.startswith(package + ".")
    ]


@pytest.mark.parametrize("path", SINK_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_sinks_modules_import_only_their_rank_or_lower(path: Path) -> None:
    own = rank(module_name(path))
    assert own is not None
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: imports {mod} (rank {rank(mod)} > {own})"
        for line, mod in imports(path)
        if (mod == "sinks" or mod.startswith("sinks.")) and (rank(mod) or 0) > own
    ]
    assert wrong == []


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Function-level, `from` and relative imports are all found (the test can fail)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f():\n    from flows.config import Settings\n    import flows.record\n"
        "from sinks import elasticsearch, failing\nfrom .model import Doc\n"
    )
    found = sorted(m for _, m in imports(probe, here="sinks.probe"))
    assert found == [
        "flows.config",
        "flows.record",
        "sinks.elasticsearch",
        "sinks.failing",
        "sinks.model",
    ]
    assert rank("sinks.elasticsearch.partition") == 3 and rank("sinks.model") == 0


FLOW_FILES = sorted(p for p in (ROOT / "flows").rglob("*.py") if "cli" not in p.parts)


@pytest.mark.parametrize("path", FLOW_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_flow_never_imports_the_command(path: Path) -> None:
    """flows/cli (the es-sink command) sits on top of the flow: the runtime never needs it."""
    assert edges([path], "flows.cli") == []


def test_the_command_never_imports_the_tools() -> None:
    """The installed command must run without the repository's test helpers."""
    assert edges(sorted((ROOT / "flows" / "cli").rglob("*.py")), "tools") == []
