"""The names users import from `flows` and `sinks` resolve, and `flows` loads them lazily."""

from __future__ import annotations

import subprocess
import sys

import flows
import sinks


def test_every_public_name_resolves() -> None:
    for package in (flows, sinks):
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"


def test_the_top_level_names_are_the_documented_ones() -> None:
    from flows.pipeline import build_flow
    from flows.record import Doc
    from flows.transforms import Transform

    assert flows.build_flow is build_flow
    assert flows.Doc is Doc
    assert flows.Transform is Transform


def test_a_flow_module_of_ones_own_imports_the_moved_modules_by_their_old_home() -> None:
    """`from flows import collector, shutdown`, as user flow modules wrote it, still works."""
    code = (
        "from flows import collector, shutdown; import flows.runtime.shutdown as s;"
        "import flows.runtime.collector as c; print(shutdown is s and collector is c)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        _ = flows.no_such_name  # type: ignore[attr-defined]
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("flows.no_such_name resolved")


def test_importing_flows_loads_nothing_else() -> None:
    code = "import sys, flows; print(sorted(m for m in sys.modules if m.startswith('flows.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
