"""The soak's schedule and its verdict on resources (tools.chaos.soak, tools.chaos.soak_report)."""

from __future__ import annotations

from tools.chaos.soak import Plan
from tools.chaos.soak_report import per_run, store_grew, unflat, windows
from tools.chaos.soak_watch import Sample

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
    settles = per_run(_run(1, [50, 120, 130, 131, 130, 132]), 0, 15, busy=[])
    assert settles[0]["rss_mib"] == [130, 132, 132]
    assert unflat(settles) == []
    climbs = per_run(_run(1, [50, 120, 140, 170, 200, 230]), 0, 15, busy=[])
    assert unflat(climbs) == ["run 1 process 0: RSS 140 -> 230 MiB while nothing happened"]


def test_memory_raised_by_an_outage_is_a_high_water_mark_not_a_leak() -> None:
    rss = [100, 100, 100, 100, 140, 160, 160, 160, 161, 160, 160, 160]
    runs = per_run(_run(1, rss), 0, 5, busy=[(35.0, 50.0)])  # quiet again from t=80
    assert runs[0]["quiet_rss_mib"] == [161, 160, 160, 160]
    assert unflat(runs) == []
    still_growing = per_run(_run(1, [*rss[:8], 170, 180, 190, 200]), 0, 5, busy=[(35.0, 50.0)])
    assert unflat(still_growing) == ["run 1 process 0: RSS 170 -> 200 MiB while nothing happened"]


def test_a_short_soak_need_not_judge_memory_but_a_long_one_must() -> None:
    runs = per_run(_run(1, [100, 100, 100]), 0, 5, busy=[(0.0, 20.0)])
    assert unflat(runs, need_memory=False) == []
    assert unflat(runs) == ["no run had 3 quiet samples to judge its memory on"]


def test_threads_that_pile_up_are_not_flat() -> None:
    samples = [*_run(1, [100] * 4), Sample(40.0, 1, 0, 100, 40, 45)]
    assert unflat(per_run(samples, 0, 5, busy=[])) == ["run 1 process 0: threads 30 -> peak 45"]


def test_a_run_too_short_to_judge_is_not_taken_for_flat() -> None:
    assert unflat(per_run(_run(1, [100, 100]), 0, 60, busy=[])) == [
        "no run lasted long enough to judge its resources"
    ]


def test_latency_windows_count_from_the_live_phase() -> None:
    seen = [(5.0, 1.0), (15.0, 10.0), (16.0, 20.0), (44.0, 30.0)]
    got = windows(seen, live_t0=10, width=30)
    assert [(w["from_s"], w["samples"], w["max_ms"]) for w in got] == [(0, 2, 20.0), (30, 1, 30.0)]


def test_a_recovery_store_that_levels_off_passes_and_one_that_keeps_growing_does_not() -> None:
    assert store_grew([(t, 2.0 + (t % 3) * 0.1) for t in range(9)]) == []
    assert store_grew([(t, 2.0 + t) for t in range(9)]) == [
        "the recovery store grew: 4.0 -> 10.0 MiB"
    ]
