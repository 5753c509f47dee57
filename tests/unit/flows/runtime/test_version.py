"""The version is written once, in pyproject.toml, and every place that shows it agrees."""

from __future__ import annotations

import tomllib

import pytest
from prometheus_client import REGISTRY, generate_latest
from typer.testing import CliRunner

from flows.api import state as state_module
from flows.api.state import ProcessState
from flows.cli import app
from flows.config import Settings
from flows.runtime.args import RunArgs
from flows.runtime.version import VERSION
from tests.support.paths import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_is_pyprojects() -> None:
    assert PYPROJECT["project"]["version"] == VERSION


def test_the_command_prints_its_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert (result.exit_code, result.stdout) == (0, f"es-sink {VERSION}\n")


def test_the_status_names_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    st = ProcessState(Settings.load({"KAFKA_TOPICS": "t"}), RunArgs(1, 1, False), 0)
    monkeypatch.setattr(state_module, "partitions", list)
    monkeypatch.setattr(st, "offsets", lambda views: state_module._Offsets())
    assert st.status().version == VERSION
    assert "version" in st.status().model_dump(mode="json")


def test_the_metrics_name_the_version() -> None:
    import flows.metrics  # noqa: F401  (declares the metric at import)

    text = generate_latest(REGISTRY).decode()
    assert f'es_sink_build_info{{version="{VERSION}"}} 1.0' in text.splitlines()


def test_a_checkout_never_installed_reads_pyproject(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import PackageNotFoundError

    from flows.runtime import version

    def not_installed(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(version, "version", not_installed)
    assert version._version() == PYPROJECT["project"]["version"]
