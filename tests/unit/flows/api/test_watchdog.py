"""The cluster watchdog's verdict (flows.api.watchdog), with the peers' answers, the retry
loops and the epoch clock faked; the real frozen peer is tests/integration/test_watchdog.py."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from flows.api import watchdog
from flows.config import Settings
from flows.runtime.args import RunArgs
from sinks.backoff import UnderWay

THREE = RunArgs(1, 3, False, epoch_s=1.0, process_id=0, addresses=("a:1", "b:1", "c:1"))


@pytest.fixture(params=[THREE])
def watch(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Any:
    """`watch(up={1, 2}, retrying=False)`: a Watch of process 0 whose epochs stalled 99 s,
    each call's answers and retries as given (the peers answered once before)."""
    state: dict[str, Any] = {"up": {1, 2}, "retrying": [], "since": 99.0}
    monkeypatch.setattr(watchdog, "answers", lambda url: int(url[-1]) - 1 in state["up"])
    monkeypatch.setattr(watchdog, "under_way", lambda: state["retrying"])
    monkeypatch.setattr(watchdog.progress, "since_epoch_s", lambda: state["since"])
    w = watchdog.Watch(Settings.load({"KAFKA_TOPICS": "t", "API_PORT": "8080"}), request.param)
    w.peers = [(1, "http://h:2"), (2, "http://h:3")]
    w.reached = {1, 2}

    def step(up: set[int], retrying: bool = False, since: float = 99.0) -> str | None:
        state["up"], state["since"] = up, since
        state["retrying"] = [UnderWay("bulk", "HTTP 503", 0.0, 3)] if retrying else []
        return w.verdict()

    step.watch = w  # type: ignore[attr-defined]
    return step


def test_a_silent_peer_ends_the_process_when_nothing_here_retries(watch: Any) -> None:
    assert watch({1, 2}) is None
    assert watch({2}) is None  # one slow answer proves nothing
    assert watch({2}) is None
    why = watch({2})  # the third check in a row
    assert why is not None and "nothing here retries" in why
    assert "process 1 (http://h:2) does not answer" in why


def test_a_retry_here_holds_the_exit_while_another_peer_answers(watch: Any) -> None:
    for _ in range(5):  # an Elasticsearch outage: peer 2, on another host, is alive
        assert watch({2}, retrying=True) is None


def test_a_retrying_process_that_no_peer_answers_is_the_one_cut_off(watch: Any) -> None:
    assert watch(set(), retrying=True) is None  # one slow round proves nothing
    assert watch({1, 2}, retrying=True) is None  # the peers answer again: count anew
    assert watch(set(), retrying=True) is None
    assert watch(set(), retrying=True) is None
    why = watch(set(), retrying=True)  # the third round in a row
    assert why is not None
    assert "this process retries (bulk: HTTP 503) but no peer on another host answers" in why
    assert "process 1 (http://h:2), process 2 (http://h:3) do not answer" in why


def test_a_peer_never_reached_is_not_held_against_the_cluster(
    watch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    watch.watch.reached = {1}  # peer 2 never answered (a network policy, a slow start)
    with caplog.at_level(logging.WARNING, logger="flows.api.watchdog"):
        assert watch({1}) is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert "process 2 (http://h:3) never answered, so its silence is not held" in line


def test_a_peer_counts_as_gone_only_after_misses_in_a_row(watch: Any) -> None:
    assert watch(set(), retrying=True) is None
    assert watch(set(), retrying=True) is None  # two misses, then epochs close again
    assert watch({1, 2}, retrying=True, since=0.5) is None  # both answer: counts restart
    assert watch(set(), retrying=True) is None  # the next stall's first miss
    assert watch(set(), retrying=True) is None
    assert watch(set(), retrying=True) is not None  # its third


def test_misses_while_epochs_still_close_do_not_count_toward_a_later_stall(
    watch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A peer whose status API alone is unreachable, while the cluster's epochs close, is
    alive: when an Elasticsearch outage then stalls them, only its misses since the last
    closed epoch count (before, the ten misses before the stall ended it at once)."""
    clock = {"now": 1000.0}
    monkeypatch.setattr(watchdog.time, "monotonic", lambda: clock["now"])

    def check(after_s: float, up: set[int], since: float) -> str | None:
        clock["now"] += after_s
        return watch(up, retrying=True, since=since)

    for _ in range(10):
        assert check(10, {2}, since=0.5) is None  # peer 1's API is silent; epochs close
    assert check(61, set(), since=61.0) is None  # the stall's second miss of peer 1
    assert check(10, set(), since=71.0) is not None  # its third


SAME_HOST = RunArgs(1, 3, False, epoch_s=1.0, process_id=0, addresses=("a:1", "a:2", "b:1"))
# one machine spelled two ways: `-a localhost:2101;127.0.0.1:2102;...`
SPELLED = RunArgs(
    1, 3, False, epoch_s=1.0, process_id=0, addresses=("localhost:1", "127.0.0.1:2", "b:1")
)


def test_host_spellings_of_one_machine_are_one_host() -> None:
    assert watchdog.host_key("localhost") == watchdog.host_key("127.0.0.1") == "loopback"
    assert watchdog.host_key("[::1]") == watchdog.host_key("LOCALHOST") == "loopback"
    assert watchdog.host_key("no-such-host.invalid") == "no-such-host.invalid"
    assert watchdog.host_key("No-Such-Host.invalid") == "no-such-host.invalid"
    assert watchdog.host_key("10.1.2.3") == "10.1.2.3" != watchdog.host_key("10.1.2.4")
    # not host names (an empty or 64-character label): compared as written, no crash
    assert watchdog.host_key("es-sink-0.es-sink..svc") == "es-sink-0.es-sink..svc"
    assert watchdog.host_key("a" * 64) == "a" * 64


@pytest.mark.parametrize("watch", [SAME_HOST, SPELLED], indirect=True)
def test_a_peer_on_this_host_does_not_hold_up_a_host_cut_off(watch: Any) -> None:
    for _ in range(2):
        assert watch({1}, retrying=True) is None
    why = watch({1}, retrying=True)  # peer 1 shares this host; peer 2, across the link, is gone
    assert why is not None and "no peer on another host answers" in why
    assert "process 2 (http://h:3) does not answer" in why
