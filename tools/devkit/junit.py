"""The time a test run took, from the JUnit XML files that scripts/test writes per tier.

    python -m tools.devkit.junit DIR [--slowest 30]

Prints each tier's wall time, test count and outcome (one file per tier: `<tier>.xml`, its
wall time in `<tier>.wall`), then the slowest tests of all tiers together. Standard library
only: it runs whatever the state of the virtualenv.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Case:
    tier: str
    name: str
    seconds: float


def parse(xml: Path) -> ET.Element:
    return ET.parse(xml).getroot()  # noqa: S314 (pytest's own output, written by this run)


def cases(xml: Path, root: ET.Element) -> list[Case]:
    """Every test case of one tier's file; setup and teardown are in the case's time."""
    tier = xml.stem
    out = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        out.append(Case(tier, name, float(case.get("time") or 0)))
    return out


def counts(root: ET.Element) -> tuple[int, int, int]:
    """(passed, failed, skipped) of one tier's file; errors count as failed."""
    total = failed = skipped = 0
    for suite in root.iter("testsuite"):
        total += int(suite.get("tests") or 0)
        failed += int(suite.get("failures") or 0) + int(suite.get("errors") or 0)
        skipped += int(suite.get("skipped") or 0)
    return total - failed - skipped, failed, skipped


def outcome(passed: int, failed: int, skipped: int) -> str:
    return f"{passed} passed, {failed} failed, {skipped} skipped"


def report(directory: Path, slowest: int) -> str:
    lines = ["tier                  wall   tests  outcome"]
    everything: list[Case] = []
    total = [0, 0, 0]
    for xml in sorted(directory.glob("*.xml")):
        root = parse(xml)
        found = cases(xml, root)
        everything += found
        tier_counts = counts(root)
        total = [a + b for a, b in zip(total, tier_counts, strict=True)]
        wall_file = xml.with_suffix(".wall")
        wall = f"{float(wall_file.read_text()):6.0f} s" if wall_file.exists() else "     ? s"
        lines.append(f"{xml.stem:<18} {wall} {len(found):>7}  {outcome(*tier_counts)}")
    lines.append(f"\n{slowest} slowest tests (setup, call and teardown):")
    for case in sorted(everything, key=lambda c: -c.seconds)[:slowest]:
        lines.append(f"{case.seconds:7.1f} s  {case.tier:<18} {case.name}")
    # Last and alone on its line: the suite's closing line across all tiers.
    lines.append(f"\nsuite: {outcome(*total)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.devkit.junit", description=__doc__)
    p.add_argument("directory", type=Path)
    p.add_argument("--slowest", type=int, default=30)
    args = p.parse_args(argv)
    if not any(args.directory.glob("*.xml")):
        print(f"tools.devkit.junit: no JUnit XML files in {args.directory}", file=sys.stderr)
        return 1
    print(report(args.directory, args.slowest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
