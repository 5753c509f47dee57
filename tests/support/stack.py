"""`scripts/stack` for the system tests that run nodes of their own (faults, outages, the
secure stack): each names its ports and directory in environment variables."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

from tests.support.paths import ROOT


def stack(action: str, env: Mapping[str, str], *which: str) -> str:
    """Run `scripts/stack ACTION [WHICH...]` with `env` over this environment and return its
    output; a failure fails the test with that output."""
    cmd = [str(ROOT / "scripts" / "stack"), action, *which]
    proc = subprocess.run(
        cmd, env={**os.environ, **env}, capture_output=True, text=True, check=False
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"scripts/stack {action} {' '.join(which)}:\n{out}"
    return out
