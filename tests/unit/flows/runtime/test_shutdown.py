"""The graceful stop's bound (flows.runtime.shutdown), without sending real signals."""

from __future__ import annotations

import signal
import threading

import pytest

from flows.runtime import shutdown


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float]]:
    """A stop state of its own, and the timeouts armed instead of threads that exit."""
    armed: list[tuple[float, float]] = []
    monkeypatch.setattr(shutdown, "_requested", threading.Event())
    monkeypatch.setattr(shutdown, "_signals_seen", 0)
    monkeypatch.setattr(shutdown, "_timeout_s", 30.0)
    monkeypatch.setattr(
        shutdown, "_arm_timeout", lambda grace_s: armed.append((shutdown._timeout_s, grace_s))
    )
    return armed


def test_a_signal_arms_the_timeout(fresh: list[tuple[float, float]]) -> None:
    shutdown._on_signal(signal.SIGTERM)
    assert shutdown.requested() and shutdown.signalled()
    assert fresh == [(30.0, 0.0)]


def test_a_restart_drain_gets_its_grace(fresh: list[tuple[float, float]]) -> None:
    shutdown.request("restart", grace_s=300.0)
    assert fresh == [(30.0, 300.0)]
    assert not shutdown.signalled()


def test_a_signal_during_a_restart_drain_is_bounded_by_the_timeout_alone(
    fresh: list[tuple[float, float]],
) -> None:
    """Review: SIGTERM during a drain for a restart waited SHUTDOWN_TIMEOUT_S plus the
    metadata refresh period (330 s instead of 30 with KAFKA_METADATA_REFRESH_S=300)."""
    shutdown.request("restart", grace_s=300.0)
    shutdown._on_signal(signal.SIGTERM)
    assert fresh == [(30.0, 300.0), (30.0, 0.0)]
    assert shutdown.signalled()


@pytest.mark.parametrize("returned", [True, False])
def test_the_stop_timeout_spares_a_process_whose_dataflow_returned(
    monkeypatch: pytest.MonkeyPatch, returned: bool
) -> None:
    """A drain that ended close to SHUTDOWN_TIMEOUT_S exited 1 while its exit hooks asked
    Kafka for the stop line's offsets, and a restart then never executed."""
    exits: list[int] = []
    monkeypatch.setattr(shutdown, "exit_now", exits.append)
    monkeypatch.setattr(shutdown, "_returned", threading.Event())
    timer = threading.Thread(target=shutdown._exit_after, args=(0.3, 0.0))
    timer.start()
    if returned:
        shutdown.returned()
    timer.join(5)
    assert exits == ([] if returned else [shutdown.TIMEOUT_EXIT_STATUS])
