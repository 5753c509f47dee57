"""The chaos harness's choice of how to interrupt the flow (no services)."""

from __future__ import annotations

import random
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tools.chaos.runner import RANDOM_PLANS, Chaos


class Tails(random.Random):
    """A coin that never says yes."""

    def random(self) -> float:
        return 0.99


def chaos(tmp_path: Path, **kw: Any) -> Chaos:
    nothing: Any = None
    return Chaos(
        mode="late", layouts=["1w"], kills=4, offsets=lambda: 0, run_args=[], env={},
        logdir=tmp_path, monitor=nothing, invariants=nothing, proxy=nothing, epoch_s=1.0,
        rng=Tails(0), deadline=time.monotonic() + 60, say=print, complete=lambda: False, **kw,
    )  # fmt: skip


def test_the_late_road_is_taken_until_a_kill_landed_while_a_bulk_was_held(
    tmp_path: Path,
) -> None:
    """A coin per kill, with two of four kills forced outages, skipped the road one run in
    four: the CI run then failed on late_kills=0."""
    run = chaos(tmp_path, faults=SimpleNamespace(late=True))
    assert [run._plan() for _ in range(3)] == ["late"] * 3
    run.stats.late_held = 1
    assert run._plan() in RANDOM_PLANS
