"""The soak's schedule and its verdict on resources (chaos.soak, chaos.soak_report)."""

from __future__ import annotations

from chaos.soak import Plan
from chaos.soak_report import per_run, unflat, windows
from chaos.soak_watch import Sample

FULL = Plan(
    minutes=30, restart_every_s=600, slow_every_s=600, slow_s=60, sample_s=60, window_s=300,
    load=0.5, calibrate=100_000, keys=50_000, layout="2p",
)  # fmt: skip


def test_the_full_schedule_restarts_every_ten_minutes_and_disturbs_in_between() -> None:
    assert FULL.events() == [
        (300, "slow"),
        (360, "fast"),
        (600, "restart"),
        (900, "es-restart"),
        (1200, "restart"),
        (1500, "slow"),
        (1560, "fast"),
    ]


def test_a_slow_phase_never_outlasts_the_run() -> None:
    plan = Plan(**{**FULL.__dict__, "minutes": 5.5, "slow_s": 120})
    assert (330, "fast") in plan.events()


def _run(run: int, rss: list[float], fds: int = 40, threads: int = 30) -> list[Sample]:
    return [Sample(float(t * 10), run, 0, r, fds, threads) for t, r in enumerate(rss)]


def test_memory_that_settles_is_flat_and_memory_that_climbs_is_not() -> None:
    settles = per_run(_run(1, [50, 120, 130, 131, 130, 132]), live_t0=0, warmup_s=15)
    assert settles[0]["rss_mib"] == [130, 132, 132]
    assert unflat(settles) == []
    climbs = per_run(_run(1, [50, 120, 140, 170, 200, 230]), live_t0=0, warmup_s=15)
    assert unflat(climbs) == ["run 1 process 0: RSS 140 -> 230 MiB"]


def test_threads_that_pile_up_are_not_flat() -> None:
    samples = [*_run(1, [100] * 4), Sample(40.0, 1, 0, 100, 40, 45)]
    assert unflat(per_run(samples, live_t0=0, warmup_s=5)) == [
        "run 1 process 0: threads 30 -> peak 45"
    ]


def test_a_run_too_short_to_judge_is_not_taken_for_flat() -> None:
    assert unflat(per_run(_run(1, [100, 100]), live_t0=0, warmup_s=60)) == [
        "no run lasted long enough to judge its resources"
    ]


def test_latency_windows_count_from_the_live_phase() -> None:
    seen = [(5.0, 1.0), (15.0, 10.0), (16.0, 20.0), (44.0, 30.0)]
    got = windows(seen, live_t0=10, width=30)
    assert [(w["from_s"], w["samples"], w["max_ms"]) for w in got] == [(0, 2, 20.0), (30, 1, 30.0)]
