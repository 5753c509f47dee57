"""Where the repository and the tests' data files are, wherever a test module sits."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root."""

DATA = Path(__file__).resolve().parent / "data"
"""Recorded answers and connector configurations the unit tests read."""
