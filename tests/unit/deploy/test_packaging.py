"""The wheel installs `flows` and `sinks`, typed, and none of the tools beside them
(demo, bench, chaos, devkit run from a checkout)."""

from __future__ import annotations

import tomllib

from setuptools import find_namespace_packages

from tests.support.paths import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def packages() -> list[str]:
    """The packages the wheel installs, found as setuptools finds them for the build."""
    find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    return find_namespace_packages(str(ROOT), include=find["include"])


def test_the_wheel_installs_flows_and_sinks_only() -> None:
    assert {p.split(".")[0] for p in packages()} == {"flows", "sinks"}
    assert {"flows.api", "flows.config", "sinks.elasticsearch"} <= set(packages())


def test_the_wheel_marks_both_packages_typed() -> None:
    data = PYPROJECT["tool"]["setuptools"]["package-data"]
    for package in ("flows", "sinks"):
        assert "py.typed" in data[package]
        assert (ROOT / package / "py.typed").is_file()


def test_the_wheel_carries_the_license() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    for name in PYPROJECT["project"]["license-files"]:
        assert "Apache License" in (ROOT / name).read_text()
