"""The status and control API of a real flow process, against the real broker and node."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.flows import (
    Services,
    committed_offsets,
    count_docs,
    create_topic,
    numbered,
    produce,
    start_flow,
    wait_for,
)
from tests.support.paths import ROOT
from tools.chaos.flow import consecutive_ports, free_ports
from tools.chaos.proxy import Proxy
from tools.devkit.kafka import end_offsets

pytestmark = pytest.mark.integration

TOKEN = "api-t0ken-for-tests"


def call(method: str, url: str, token: str | None = None) -> tuple[int, Any]:
    """(status, JSON body or text) of one request."""
    req = urllib.request.Request(url, method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode()


@dataclass
class ApiFlow:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    topic: str
    group: str
    index: str

    def status(self) -> dict[str, Any]:
        code, body = call("GET", f"{self.url}/status")
        assert code == 200, body
        return body

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def api_flow(
    services: Services, names: Callable[[str], str], tmp_path: Path
) -> Iterator[Callable[..., ApiFlow]]:
    started: list[ApiFlow] = []

    def start(
        env: dict[str, str] | None = None,
        partitions: int = 2,
        args: tuple[str, ...] = (),
        topic: str | None = None,
        port: int | None = None,
        serves_on: int | None = None,
    ) -> ApiFlow:
        if topic is None:
            topic = names("api")
            create_topic(services.kafka, topic, partitions)
        port = port or free_ports(1)[0]
        settings = {
            "KAFKA_TOPICS": topic,
            "KAFKA_GROUP_ID": f"g-{topic}",
            "ES_INDEX": topic,
            "KAFKA_STOP_AT_END": "false",
            "API_PORT": str(port),
            **(env or {}),
        }
        log = tmp_path / f"flow-{len(started)}.log"
        proc = start_flow(services, settings, *args, log=log)
        url = f"http://127.0.0.1:{serves_on or port}"
        flow = ApiFlow(proc, url, log, topic, f"g-{topic}", topic)
        started.append(flow)
        wait_for(lambda: _answers(flow), 60, f"the status API at {flow.url}\n{flow.output()}")
        return flow

    yield start
    for flow in started:
        if flow.proc.poll() is None:
            flow.proc.send_signal(signal.SIGTERM)
    for flow in started:
        try:
            flow.proc.wait(40)
        except subprocess.TimeoutExpired:
            flow.proc.kill()


def _answers(flow: ApiFlow) -> bool:
    if flow.proc.poll() is not None:
        raise AssertionError(f"the flow exited {flow.proc.returncode}:\n{flow.output()}")
    try:
        return call("GET", f"{flow.url}/health/live")[0] == 200
    except OSError:
        return False


def committed_everything(services: Services, flow: ApiFlow) -> bool:
    return committed_offsets(services.kafka, flow.group, flow.topic) == end_offsets(
        services.kafka, flow.topic
    )


def test_status_reports_the_offsets_and_lag_kafka_reports(
    services: Services, api_flow: Callable[..., ApiFlow], es: Any
) -> None:
    flow = api_flow()
    produce(services.kafka, flow.topic, numbered(0, 200))
    wait_for(lambda: committed_everything(services, flow), 120, "the group to commit every record")
    committed = committed_offsets(services.kafka, flow.group, flow.topic)

    def answered_now() -> bool:  # the API asks Kafka at most every CACHE_S
        return all(p["committed"] == committed[p["partition"]] for p in flow.status()["partitions"])

    wait_for(answered_now, 10, "the status API to report the commits")
    status = flow.status()
    assert status["state"] == "running"
    assert status["process"]["id"] == 0 and status["process"]["workers"] == 1
    assert status["process"]["group"] == flow.group
    ends = end_offsets(services.kafka, flow.topic)
    got = {p["partition"]: p for p in status["partitions"]}
    assert sorted(got) == sorted(ends)
    for part, p in got.items():
        assert (p["topic"], p["end"], p["committed"], p["position"]) == (
            flow.topic, ends[part], committed[part], ends[part],
        )  # fmt: skip
        assert p["lag"] == 0 and p["last_error"] is None
    assert status["sink"]["buffered_docs"] == 0 and status["halted"] is None
    assert count_docs(es, flow.index) == 200
    code, text = call("GET", f"{flow.url}/metrics")
    assert code == 200 and 'es_sink_state{state="running"} 1.0' in text


def test_pause_holds_reading_while_what_was_read_is_written_and_committed(
    services: Services, api_flow: Callable[..., ApiFlow], es: Any
) -> None:
    flow = api_flow()
    produce(services.kafka, flow.topic, numbered(0, 3000))
    wait_for(lambda: count_docs(es, flow.index) > 0, 60, "the first documents")
    code, body = call("PUT", f"{flow.url}/pause")
    assert (code, body) == (200, {"state": "paused"})

    # Everything read before the pause is written and committed, and reading stops there.
    def settled() -> bool:
        parts = flow.status()["partitions"]
        read = sum(p["position"] for p in parts)
        return (
            all(p["committed"] == p["position"] for p in parts)
            and count_docs(es, flow.index) == read
        )

    wait_for(settled, 60, "what was read before the pause to be written and committed")
    held = {p["partition"]: p["position"] for p in flow.status()["partitions"]}
    indexed = count_docs(es, flow.index)
    produce(services.kafka, flow.topic, numbered(3000, 500))
    ends = end_offsets(services.kafka, flow.topic)

    def end_seen() -> bool:  # Kafka's offsets are cached for up to 2 s (flows.api.state)
        return {p["partition"]: p["end"] for p in flow.status()["partitions"]} == ends

    wait_for(end_seen, 10, "/status to show the new log end")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status = flow.status()
        assert status["state"] == "paused"
        for p in status["partitions"]:
            assert p["position"] == held[p["partition"]] == p["committed"]
            assert p["end"] == ends[p["partition"]]
            assert p["lag"] == ends[p["partition"]] - held[p["partition"]]
        assert count_docs(es, flow.index) == indexed
        time.sleep(2)
    assert committed_offsets(services.kafka, flow.group, flow.topic) == held
    _, text = call("GET", f"{flow.url}/metrics")
    assert "es_sink_paused 1.0" in text
    assert call("PUT", f"{flow.url}/resume") == (200, {"state": "running"})
    wait_for(lambda: committed_everything(services, flow), 60, "every record after resume")
    assert count_docs(es, flow.index) == 3500
    docs = es.search(
        index=flow.index,
        size=0,
        aggs={"n": {"cardinality": {"field": "n", "precision_threshold": 10000}}},
    )
    assert docs["aggregations"]["n"]["value"] == 3500


def test_a_pause_outlasting_retention_reads_on_from_the_log_start_not_its_end(
    services: Services, api_flow: Callable[..., ApiFlow], es: Any, names: Callable[[str], str]
) -> None:
    """Retention (here DeleteRecords) passes a paused partition's position. Under
    KAFKA_AUTO_OFFSET_RESET=latest librdkafka moved the position to the log end on resume:
    k1500..k1999, still in Kafka, were skipped and committed past without a word. Only
    what the broker deleted is gone now, and the flow says so."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = names("api-retention")
    create_topic(services.kafka, topic, 1)
    group = Consumer({"bootstrap.servers": services.kafka, "group.id": f"g-{topic}"})
    group.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)  # not a new group
    group.close()
    produce(services.kafka, topic, numbered(0, 1000))
    flow = api_flow({"KAFKA_AUTO_OFFSET_RESET": "latest"}, topic=topic)
    wait_for(lambda: committed_everything(services, flow), 120, "the first 1000 records")
    assert call("PUT", f"{flow.url}/pause") == (200, {"state": "paused"})
    wait_for(lambda: flow.status()["partitions"][0]["paused"], 10, "the partition to pause")
    produce(services.kafka, topic, numbered(1000, 1000))
    admin = AdminClient({"bootstrap.servers": services.kafka})
    for fut in admin.delete_records([TopicPartition(topic, 0, 1500)]).values():
        fut.result(30)
    assert call("PUT", f"{flow.url}/resume") == (200, {"state": "running"})
    produce(services.kafka, topic, numbered(2000, 10))
    wait_for(lambda: committed_everything(services, flow), 120, "every record after resume")
    wait_for(lambda: count_docs(es, flow.index) >= 1510, 30, "the documents after resume")
    assert count_docs(es, flow.index) == 1510, "skipped records the broker still held"
    assert not es.exists(index=flow.index, id="k1499") and es.exists(index=flow.index, id="k1500")
    out = flow.output()
    assert "offset 1000 (read position) is gone: the broker deleted offsets 1000 to 1499" in out
    _, text = call("GET", f"{flow.url}/metrics")
    assert f'es_sink_offsets_deleted_unread_total{{partition="0",topic="{topic}"}} 500.0' in text


def test_ready_follows_elasticsearch(services: Services, api_flow: Callable[..., ApiFlow]) -> None:
    proxy = Proxy(services.es_url)  # a relay the test can take down, like a stopped node
    try:
        flow = api_flow({"ES_HOSTS": proxy.url})

        def ready() -> int:
            return call("GET", f"{flow.url}/health/ready")[0]

        wait_for(lambda: ready() == 200, 30, "ready")
        proxy.cut("refuse")
        wait_for(lambda: ready() == 503, 30, "not ready while Elasticsearch is down")
        _, body = call("GET", f"{flow.url}/health/ready")
        assert body == {"ready": False, "reasons": ["Elasticsearch does not answer"]}
        assert call("GET", f"{flow.url}/health/live")[0] == 200
        proxy.restore()
        wait_for(lambda: ready() == 200, 60, "ready again once Elasticsearch is back")
    finally:
        proxy.close()


def test_committed_lag_counts_what_was_read_but_not_written(
    services: Services, api_flow: Callable[..., ApiFlow]
) -> None:
    proxy = Proxy(services.es_url)  # Elasticsearch as the flow sees it: down, up, down
    try:
        proxy.cut("refuse")
        flow = api_flow({"ES_HOSTS": proxy.url}, partitions=1)
        produce(services.kafka, flow.topic, numbered(0, 50))

        def part() -> dict[str, Any]:
            parts = flow.status()["partitions"]
            return parts[0] if parts else {}

        def read(n: int) -> dict[str, Any]:
            wait_for(lambda: (part().get("position"), part().get("end")) == (n, n), 60, f"{n}")
            return part()

        p = read(50)  # everything read, nothing written: only the owner's announcement at 0
        assert (p["committed"], p["lag"], p["committed_lag"]) == (0, 0, 50)
        proxy.restore()
        wait_for(lambda: part()["committed"] == 50, 90, "a commit")
        assert part()["committed_lag"] == 0
        proxy.cut("refuse")
        produce(services.kafka, flow.topic, numbered(50, 30))
        p = read(80)
        assert (p["committed"], p["lag"], p["committed_lag"]) == (50, 0, 30)
        _, text = call("GET", f"{flow.url}/metrics")
        assert f'es_sink_committed_lag{{partition="0",topic="{flow.topic}"}} 30.0' in text
        assert f'es_sink_consumer_lag{{partition="0",topic="{flow.topic}"}} 0.0' in text
        proxy.restore()
        wait_for(lambda: part()["committed_lag"] == 0, 90, "caught up")
        # Two outages: a node-pool line for each (a minute apart at most), and one when
        # the node answers again; the sink's own lines say what it retries.
        pool = [ln for ln in flow.output().splitlines() if "elastic_transport.node_pool" in ln]
        assert len(pool) <= 4, "\n".join(pool)
    finally:
        proxy.close()


def test_halted_shows_the_record_the_flow_stops_on(
    services: Services, api_flow: Callable[..., ApiFlow]
) -> None:
    flow = api_flow({"ERRORS_TOLERANCE": "none"}, partitions=1, args=("-s", "4"))
    good = numbered(0, 5)
    produce(services.kafka, flow.topic, [*good, (b"bad", b"{not json"), *numbered(5, 5)])
    seen: list[dict[str, Any]] = []
    while flow.proc.poll() is None:
        try:
            status = flow.status()
        except (OSError, AssertionError):
            break
        seen.append(status)
        if status["state"] == "halted":
            ready = call("GET", f"{flow.url}/health/ready")
            assert ready[0] == 503 and ready[1]["reasons"][0] == "the flow is halted"
            break
        time.sleep(0.05)
    halted = [s for s in seen if s["state"] == "halted"]
    assert halted, f"never halted: {[s['state'] for s in seen]}\n{flow.output()}"
    h = halted[0]["halted"]
    assert (h["topic"], h["partition"], h["offset"]) == (flow.topic, 0, 5)
    assert "deserialize" in h["reason"] or "JSON" in h["reason"], h
    assert flow.proc.wait(60) != 0


def test_writes_need_the_token_when_one_is_set(
    services: Services, api_flow: Callable[..., ApiFlow]
) -> None:
    flow = api_flow({"API_TOKEN": TOKEN})
    assert call("PUT", f"{flow.url}/pause")[0] == 401
    assert call("PUT", f"{flow.url}/pause", token="wrong")[0] == 401
    assert flow.status()["state"] == "running"
    assert call("PUT", f"{flow.url}/pause", token=TOKEN) == (200, {"state": "paused"})
    assert call("PUT", f"{flow.url}/resume", token="")[0] == 401
    assert call("PUT", f"{flow.url}/resume", token=TOKEN) == (200, {"state": "running"})
    assert call("GET", f"{flow.url}/status")[0] == 200  # reads need no token
    for path in ("/stop", "/restart"):
        assert call("PUT", f"{flow.url}{path}")[0] == 401
        assert call("PUT", f"{flow.url}{path}", token="wrong")[0] == 401
    assert flow.status()["state"] == "running"
    assert call("PUT", f"{flow.url}/stop", token=TOKEN) == (200, {"state": "stopping"})
    assert flow.proc.wait(40) == 0
    assert TOKEN not in flow.output()


def test_two_processes_on_one_host_serve_on_two_ports(
    services: Services, api_flow: Callable[..., ApiFlow]
) -> None:
    addresses = ";".join(f"127.0.0.1:{p}" for p in free_ports(2))
    base = consecutive_ports(2)
    first = api_flow(partitions=4, args=("-i", "0", "-a", addresses), port=base)
    # Process 1 is given the same API_PORT and serves on API_PORT + 1.
    second = api_flow(
        args=("-i", "1", "-a", addresses), topic=first.topic, port=base, serves_on=base + 1
    )
    wait_for(lambda: len(first.status()["partitions"]) + len(second.status()["partitions"]) == 4,
             60, "both processes to read their partitions")  # fmt: skip
    a, b = first.status(), second.status()
    assert (a["process"]["id"], b["process"]["id"]) == (0, 1)
    assert a["process"]["processes"] == b["process"]["processes"] == 2
    owned = [p["partition"] for s in (a, b) for p in s["partitions"]]
    assert sorted(owned) == [0, 1, 2, 3]


def test_the_api_survives_fuzzing_from_its_openapi_document(
    services: Services, api_flow: Callable[..., ApiFlow], tmp_path: Path
) -> None:
    """schemathesis generates requests from docs/openapi.json (the document the server
    serves, tests/unit/flows/api/test_api.py): no 5xx, every answer as documented, and its
    `ignored_auth` check sends each write without the token and expects a refusal. Not
    PUT /stop and /restart, which end the process that answers (their token:
    `test_writes_need_the_token_when_one_is_set`)."""
    flow = api_flow({"API_TOKEN": TOKEN})
    produce(services.kafka, flow.topic, numbered(0, 50))
    schemathesis = str(Path(sys.executable).parent / "schemathesis")
    cmd = [
        schemathesis, "run", str(ROOT / "docs" / "openapi.json"),
        "--url", flow.url, "-H", f"Authorization: Bearer {TOKEN}", "--checks", "all",
        "-n", "30", "--seed", "1", "--exclude-path", "/stop", "--exclude-path", "/restart",
    ]  # fmt: skip
    # In tmp_path: schemathesis keeps its example database in ./.schemathesis.
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path
    )
    summary = out.stdout[out.stdout.find("SUMMARY") :]
    assert out.returncode == 0, out.stdout[-3000:]
    assert "No issues found" in summary and "6 selected / 8 total" in out.stdout
    assert call("PUT", f"{flow.url}/pause")[0] == 401  # still refused after the fuzzing
