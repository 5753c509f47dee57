"""Paths the repository's files name exist in it: a module moved into a package, or a
pointer to a file outside the repository, leaves a reader nowhere to go."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = ("flows", "sinks", "scripts", "tests", "docs", "deploy", "examples", "bench", "chaos",
       "demo", "devkit")  # fmt: skip
REFERENCE = re.compile(rf"(?<![\w./-])(?:{'|'.join(TOP)})/[\w./-]*\w(\*)?")
ABSOLUTE = re.compile(r"(?<![\w.-])/(?:work|home|Users|root)/[\w.-]+")
RECORDS = ("docs/bench/", "docs/benchmarks.md", "docs/soak/")
"""Measurement records and their notebook: what a past run wrote, kept as it was."""
NOT_PATHS = {"docs/s"}  # documents per second


def tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    names = [n for n in out.split("\0") if n and not n.startswith(RECORDS)]
    return [ROOT / n for n in names if (ROOT / n).is_file()]


def text_of(path: Path) -> str | None:
    try:
        return path.read_text()
    except (UnicodeDecodeError, OSError):
        return None


def test_every_named_path_exists() -> None:
    missing = []
    for path in tracked():
        text = text_of(path)
        if text is None:
            continue
        for m in REFERENCE.finditer(text):
            name = m.group(0).rstrip(".")
            if name in NOT_PATHS:
                continue
            if m.group(1):  # a glob: tests/unit/test_decode_*.py
                if not list(ROOT.glob(name.rstrip("*") + "*")):
                    missing.append(f"{path.relative_to(ROOT)}: {name}")
            elif not (ROOT / name).exists():
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert missing == []


def test_no_file_points_outside_the_repository() -> None:
    found = []
    for path in tracked():
        text = text_of(path)
        if text is not None:
            found += [f"{path.relative_to(ROOT)}: {m}" for m in ABSOLUTE.findall(text)]
    assert found == []
