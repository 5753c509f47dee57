"""The es-sink version: `version` in pyproject.toml, the one place it is written.

An installed distribution (a wheel, `pip install -e .`, the image) answers from its
metadata. A checkout run without installing reads pyproject.toml beside the packages;
anything else says `0+unknown` rather than guess.
"""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["DISTRIBUTION", "VERSION"]

DISTRIBUTION = "es-sink"
UNKNOWN = "0+unknown"


def _version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        pass
    try:
        project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return UNKNOWN
    meta = project.get("project", {})
    return str(meta["version"]) if meta.get("name") == DISTRIBUTION else UNKNOWN


VERSION = _version()
"""This process's version, read once at import."""
