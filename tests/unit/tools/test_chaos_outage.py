"""`tools.chaos.outage.sigterm_during_outage`'s accounting, with a stand-in flow and proxy (no
processes, no network): what it counts as a false clean exit."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any, cast

import pytest

from tools.chaos import outage
from tools.chaos.outage import OutageStats, sigterm_during_outage


class _Flow:
    """Exits with `code` on the first SIGTERM; records what the harness did, in order."""

    def __init__(self, code: int, events: list[str], log: Path) -> None:
        self.code: int | None = None
        self._exit_code = code
        self.events = events
        self.logs = [log]

    def terminate(self) -> None:
        self.events.append("terminate")
        self.code = self._exit_code

    def wait(self, timeout_s: float) -> bool:
        self.events.append("wait")
        return self.code is not None

    def codes(self) -> list[int | None]:
        return [self.code]

    def kill_all(self) -> None:
        self.events.append("kill")


class _Proxy:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def cut(self, mode: str) -> None:
        self.events.append("cut")

    def restore(self) -> None:
        self.events.append("restore")


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outage.time, "sleep", lambda s: None)


IN_FLIGHT = (
    "WARNING sinks.elasticsearch.partition: sink partition es-0001: retrying 3 of 3 actions "
    "in 0.1s (attempt 1): ConnectionError\n"
)
"""A flow log with a request the cut made fail: something was in flight."""


def _run(
    code: int,
    idle: Any,
    twice: bool = False,
    events: list[str] | None = None,
    log_text: str = IN_FLIGHT,
) -> tuple[OutageStats, list[str], str]:
    events = [] if events is None else events
    stats = OutageStats()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "flow-p0.log"
        log.write_text(log_text)
        detail = sigterm_during_outage(
            cast(Any, _Flow(code, events, log)), cast(Any, _Proxy(events)), random.Random(1),
            twice=twice, shutdown_timeout_s=5, stats=stats, idle=idle,
        )  # fmt: skip
    return stats, events, detail


@pytest.mark.parametrize("twice", [False, True])
def test_exit_0_with_records_uncommitted_at_exit_is_counted(twice: bool) -> None:
    stats, _, _ = _run(0, lambda: False, twice)
    assert (stats.outages, stats.exit0, stats.hung) == (1, 1, 0)


def test_exit_0_of_a_process_with_nothing_in_flight_is_not_counted() -> None:
    """Still waiting to own its partitions (a dead owner's bulks, which the cut hides), or
    with no request it had to retry, it had nothing to flush: its exit 0 is a clean stop."""
    line = (
        "INFO flows.runtime.lifecycle: stopped (signal): indexed 0 documents, "
        "dead-lettered 0 records"
    )
    stats, _, _ = _run(0, lambda: False, log_text=f"{line}; committed t/0@5; exit status 0\n")
    assert (stats.outages, stats.exit0) == (1, 0)
    line = line.replace("indexed 0", "indexed 3")
    stats, _, _ = _run(0, lambda: False, log_text=f"{line}; committed t/0@5; exit status 0\n")
    assert (stats.outages, stats.exit0) == (1, 0)  # nothing it had to retry: nothing in flight
    stats, _, _ = _run(0, lambda: False, log_text=f"{IN_FLIGHT}{line}; exit status 0\n")
    assert (stats.outages, stats.exit0) == (1, 1)


def test_idleness_is_judged_once_the_flow_exited() -> None:
    """Everything became durable during the cut (a bulk answered before it, then its
    epoch's commit): exit 0 is right. Judged before the cut, it was counted (a CI run)."""
    events: list[str] = []
    seen: list[list[str]] = []

    def idle() -> bool:
        seen.append(list(events))
        return "wait" in events  # all committed only by the time the flow exited

    stats, _, detail = _run(0, idle, events=events)
    assert stats.exit0 == 0 and "(idle)" in detail
    assert len(seen) == 1 and "wait" in seen[0] and "terminate" in seen[0]


def test_a_non_zero_exit_is_never_counted() -> None:
    stats, events, _ = _run(1, lambda: False)
    assert stats.exit0 == 0
    assert events[0] == "cut" and events[-1] == "restore"
