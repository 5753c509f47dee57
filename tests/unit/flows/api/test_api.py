"""The status API without a flow behind it: its settings, its state rules, its document."""

from __future__ import annotations

import json
import threading
import time

import pytest

from flows import halt
from flows.api.server import openapi_document
from flows.api.state import ProcessState
from flows.config import Settings
from flows.errors import ConfigError, RecordFailedError
from flows.runtime import control, shutdown
from flows.runtime.args import RunArgs
from sinks import failing, progress
from sinks.backoff import Backoff, under_way
from tests.support.paths import ROOT


def settings(**env: str) -> Settings:
    return Settings.load({"KAFKA_TOPICS": "t", **env})


def state(**env: str) -> ProcessState:
    return ProcessState(settings(**env), RunArgs(1, 1, False), 0)


def test_the_committed_openapi_document_is_the_api() -> None:
    committed = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert committed == json.loads(json.dumps(openapi_document())), (
        "regenerate: python -m flows.api --openapi > docs/openapi.json"
    )


def test_the_api_is_off_by_default_and_on_loopback() -> None:
    s = settings()
    assert s.api_port is None and s.api_host == "127.0.0.1" and s.api_liveness_s == 120


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "es-sink.example", "::"])
def test_a_reachable_api_needs_a_token(host: str) -> None:
    with pytest.raises(ConfigError, match=r"^API_TOKEN: required when API_HOST="):
        settings(API_PORT="8080", API_HOST=host)
    assert settings(API_PORT="8080", API_HOST=host, API_TOKEN="t0k3n").api_token is not None


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_needs_no_token(host: str) -> None:
    assert settings(API_PORT="8080", API_HOST=host).api_token is None


def test_the_token_is_a_secret() -> None:
    s = settings(API_PORT="8080", API_TOKEN="t0k3n-value")
    assert "t0k3n-value" in s.secrets()
    assert "t0k3n-value" not in repr(s)


@pytest.mark.parametrize("port", ["0", "70000", "http"])
def test_a_bad_port_names_the_setting(port: str) -> None:
    with pytest.raises(ConfigError, match=r"^API_PORT"):
        settings(API_PORT=port)


def _reset() -> None:
    control.resume()
    halt.clear()
    failing.clear()
    shutdown._requested.clear()


@pytest.fixture
def clean() -> object:
    """No process-wide state of an earlier test (a source test's failure marks the
    process failing), none left for a later one."""
    _reset()
    yield None
    _reset()


def test_the_state_names_why_the_process_stops(clean: object) -> None:
    st = state()
    assert st.state() == "running"
    control.pause()
    assert st.state() == "paused"
    err = RecordFailedError("t/0@5", "deserialize", "bad")
    halt.hold("t", 0, 5, err)
    assert st.state() == "halted"
    halted = st.halted()
    assert halted is not None and (halted.topic, halted.partition, halted.offset) == ("t", 0, 5)
    failing.mark()
    assert st.state() == "failed"


def test_a_worker_without_progress_is_not_live(clean: object) -> None:
    st = state(API_LIVENESS_S="1")
    done, beating = threading.Event(), threading.Event()

    @progress.tracked
    def bytewax_call() -> None:  # a worker inside one of our calls
        while not done.wait(0.05):
            if beating.is_set():
                progress.beat()

    t = threading.Thread(target=bytewax_call)
    t.start()
    try:
        time.sleep(0.1)
        assert st.live().live
        time.sleep(1.1)
        answer = st.live()
        assert not answer.live and "API_LIVENESS_S=1" in (answer.reason or "")
        beating.set()
        time.sleep(0.2)
        assert st.live().live, "a worker that beats while it waits is alive"
        beating.clear()
        time.sleep(1.1)
        control.pause()
        assert st.live().live, "a paused process is never wedged"
    finally:
        done.set()
        t.join()
    assert progress.stalest_s() is None, "a worker between our calls is not judged"


def test_a_retry_loop_is_listed_while_it_retries() -> None:
    class Clock:
        def monotonic(self) -> float:
            return 0.0

        def sleep(self, seconds: float) -> None:
            pass

    retries = Backoff(0.1, 1.0).start(Clock(), lambda: 0.5)
    retries.sleep(retries.next_delay(), "test-loop", "HTTP 429")
    retries.sleep(retries.next_delay(), "test-loop", "HTTP 503")
    mine = [u for u in under_way() if u.where == "test-loop"]
    assert [(u.reason, u.attempts) for u in mine] == [("HTTP 503", 2)]
    del retries
    assert [u for u in under_way() if u.where == "test-loop"] == []


def kafka_says(
    monkeypatch: pytest.MonkeyPatch, committed: int | None, end: int, position: int
) -> ProcessState:
    """A process reading t/0 at `position`, and Kafka answering `committed` and `end`."""
    from flows.api import state as state_module
    from flows.kafka.source import PartitionView

    view = PartitionView("t", 0, position, committed, False, None, None)
    monkeypatch.setattr(state_module, "partitions", lambda: [view])
    offsets = state_module._Offsets(committed={("t", 0): committed}, end={("t", 0): end})
    st = state()
    monkeypatch.setattr(st, "offsets", lambda views: offsets)
    return st


def test_records_read_but_never_committed_are_committed_lag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    st = kafka_says(monkeypatch, committed=None, end=50, position=50)
    (p,) = st.status().partitions
    assert (p.lag, p.committed_lag) == (0, None)  # all read; nothing written yet
    st = kafka_says(monkeypatch, committed=20, end=50, position=45)
    (p,) = st.status().partitions
    assert (p.lag, p.committed_lag) == (5, 30)


def test_committed_lag_is_a_gauge_once_the_group_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from flows.api.metrics import ProcessCollector

    registry = CollectorRegistry()
    registry.register(ProcessCollector(kafka_says(monkeypatch, None, end=50, position=50)))
    assert b"es_sink_committed_lag{" not in generate_latest(registry)
    registry = CollectorRegistry()
    registry.register(ProcessCollector(kafka_says(monkeypatch, 20, end=50, position=45)))
    text = generate_latest(registry).decode()
    assert 'es_sink_committed_lag{partition="0",topic="t"} 30.0' in text
