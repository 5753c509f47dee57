"""`es-sink status`, `pause`, `resume` and `offsets reset` through the flow processes'
status API (flows/api), against the real flow."""

from __future__ import annotations

import getpass
import re
import signal
import socket
import time
from unittest.mock import ANY

import pytest

from tests.support.flows import (
    committed_offsets,
    count_docs,
    create_topic,
    numbered,
    produce,
    run_cli,
    run_flow,
    start_flow,
    wait_for,
)
from tools.chaos.flow import consecutive_ports, free_ports

pytestmark = pytest.mark.integration


def test_status_pause_resume_and_reset_through_the_api(services, names, tmp_path) -> None:
    topic, group = names("api"), names("api-group")
    create_topic(services.kafka, topic)
    produce(services.kafka, topic, [(b"k", b'{"n": 1}')])
    env = {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": group, "KAFKA_STOP_AT_END": "false",
           "API_PORT": str(free_ports(1)[0])}  # fmt: skip
    flow = start_flow(services, env, log=tmp_path / "flow.log")
    try:
        deadline = time.monotonic() + 60
        while True:
            found = run_cli(services, env, "status", "--json").json()
            (process,) = found["processes"]
            if process["status"] is not None and process["status"]["state"] == "running":
                break
            assert time.monotonic() < deadline, (tmp_path / "flow.log").read_text()[-3000:]
            time.sleep(0.5)
        assert process["status"]["process"]["group"] == group
        refused = run_cli(services, env, "offsets", "reset", "--to", "earliest")
        assert refused.exit_code == 1
        # Its commit names it once the partition is built; the status API answers before.
        assert (
            f"{topic}/0 is held by instance " in refused.stderr
            and "its process runs on this host" in refused.stderr
        ) or "the flow process at http://127.0.0.1:" in refused.stderr, refused.stderr

        paused = run_cli(services, env, "pause", "--json")
        assert paused.exit_code == 0, paused.stdout + paused.stderr
        assert [p["status"]["state"] for p in paused.json()["processes"]] == ["paused"]
        state = run_cli(services, env, "status", "--json").json()["processes"][0]["status"]
        assert state["state"] == "paused"
        resumed = run_cli(services, env, "resume")
        assert resumed.exit_code == 0 and resumed.stdout.strip().endswith(": running")
    finally:
        flow.send_signal(signal.SIGTERM)
        flow.wait(60)
    gone = run_cli(services, env, "status", "--json").json()["processes"]
    assert gone[0]["status"] is None and gone[0]["error"].startswith("no answer")
    assert run_cli(services, env, "pause").exit_code == 1


# -- stop, restart and a pause that outlives the process


def _flow_env(topic: str, api_port: int, **more: str) -> dict[str, str]:
    return {"KAFKA_TOPICS": topic, "KAFKA_GROUP_ID": topic, "ES_INDEX": topic,
            "KAFKA_STOP_AT_END": "false", "API_PORT": str(api_port), **more}  # fmt: skip


def _answering(services, env) -> list[dict]:
    """Every process's /status once all of them answer (the flow started)."""
    found = run_cli(services, env, "status", "--json").json()["processes"]
    return [p["status"] for p in found] if all(p["status"] for p in found) else []


def _wait_answering(services, env, logs, processes: int = 1) -> list[dict]:
    deadline = time.monotonic() + 90
    while True:
        found = _answering(services, env)
        if len(found) == processes and all(s["partitions"] for s in found):
            return found
        tails = "\n".join(log.read_text()[-2000:] for log in logs if log.exists())
        assert time.monotonic() < deadline, tails
        time.sleep(0.5)


def _kill(*procs) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


STOPPED = re.compile(
    r"^(http://127\.0\.0\.1:\d+): stopped in \d+\.\ds \((?:process (\d) of 2, )?pid (\d+)\); "
    r"committed (.+)$"
)


def _committed_in(line: str) -> dict[str, int]:
    match = STOPPED.match(line)
    assert match is not None, line
    return {k: int(v) for k, v in (o.split("@") for o in match.group(4).split())}


def test_stop_drains_commits_exits_0_and_says_what_was_committed(services, es, names, tmp_path):
    topic = names("stop")
    create_topic(services.kafka, topic, 2)
    produce(services.kafka, topic, numbered(0, 40))
    env = _flow_env(topic, free_ports(1)[0])
    log = tmp_path / "flow.log"
    flow = start_flow(services, env, "-s", "3", log=log)
    try:
        (first,) = _wait_answering(services, env, [log])
        wait_for(lambda: count_docs(es, topic) == 40, 90, "every record indexed")
        stopped = run_cli(services, env, "stop", "--timeout", "60")
        assert stopped.exit_code == 0, stopped.stdout + stopped.stderr
        (line,) = stopped.stdout.splitlines()
        assert flow.poll() == 0, log.read_text()[-3000:]  # gone once the command returns
    finally:
        _kill(flow)
    assert _committed_in(line) == {f"{topic}/0": ANY, f"{topic}/1": ANY}
    assert sum(_committed_in(line).values()) == 40
    assert f"pid {first['process']['pid']})" in line
    by_partition = committed_offsets(services.kafka, topic, topic)
    assert {f"{topic}/{p}": o for p, o in by_partition.items()} == _committed_in(line)
    last = log.read_text().strip().splitlines()[-1]
    assert last.endswith(
        f"INFO flows.runtime.lifecycle: stopped (PUT /stop): indexed 40 documents, dead-lettered 0 "
        f"records; committed {' '.join(f'{k}@{v}' for k, v in sorted(_committed_in(line).items()))}"
        f"; exit status 0"
    ), last
    gone = run_cli(services, env, "stop")
    assert gone.exit_code == 1 and "stopping nothing" in gone.stderr


def test_restart_drains_and_executes_the_flow_again_which_reads_on(services, es, names, tmp_path):
    topic = names("restart")
    create_topic(services.kafka, topic, 1)
    produce(services.kafka, topic, numbered(0, 20))
    env = _flow_env(topic, free_ports(1)[0])
    log = tmp_path / "flow.log"
    flow = start_flow(services, env, log=log)
    try:
        (before,) = _wait_answering(services, env, [log])
        wait_for(lambda: count_docs(es, topic) == 20, 90, "the first 20 documents")
        restarted = run_cli(services, env, "restart", "--timeout", "90")
        assert restarted.exit_code == 0, restarted.stdout + restarted.stderr + log.read_text()
        (line,) = restarted.stdout.splitlines()
        match = re.match(
            r"^http://127\.0\.0\.1:\d+: restarted in \d+\.\ds \(pid (\d+), started (\S+)\); "
            r"running$",
            line,
        )
        assert match is not None, line
        assert int(match.group(1)) == flow.pid == before["process"]["pid"]  # executed again
        assert match.group(2) > before["process"]["started_at"]
        assert flow.poll() is None
        text = log.read_text()
        assert (
            f"stopped (PUT /restart): indexed 20 documents, dead-lettered 0 records; committed "
            f"{topic}/0@20; restarting"
        ) in text
        assert "restarting the flow with the same command line" in text
        (after,) = _wait_answering(services, env, [log])
        assert after["process"]["started_at"] == match.group(2)
        produce(services.kafka, topic, numbered(20, 10))
        wait_for(lambda: count_docs(es, topic) == 30, 90, "the records produced after it")
        stopped = run_cli(services, env, "stop")
        assert stopped.exit_code == 0, stopped.stdout + stopped.stderr
        assert flow.wait(30) == 0
    finally:
        _kill(flow)
    assert committed_offsets(services.kafka, topic, topic) == {0: 30}


def test_a_pause_outlives_a_stop_and_holds_the_next_start_until_resumed(
    services, es, names, tmp_path
):
    topic = names("durable")
    create_topic(services.kafka, topic, 2)
    produce(services.kafka, topic, numbered(0, 20))
    env = _flow_env(topic, free_ports(1)[0])
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    flow = start_flow(services, env, log=logs[0])
    try:
        _wait_answering(services, env, logs[:1])
        wait_for(lambda: count_docs(es, topic) == 20, 90, "the first 20 documents")
        paused = run_cli(services, env, "pause")
        assert paused.exit_code == 0 and paused.stdout.strip().endswith(": paused")
        produce(services.kafka, topic, numbered(20, 10))
        stopped = run_cli(services, env, "stop")
        assert stopped.exit_code == 0, stopped.stdout + stopped.stderr
        assert sum(_committed_in(stopped.stdout.strip()).values()) == 20
        assert flow.wait(30) == 0

        flow = start_flow(services, env, log=logs[1])
        (status,) = _wait_answering(services, env, logs)
        assert status["state"] == "paused" and status["paused"] is True
        assert status["paused_by"] == f"{getpass.getuser()}@{socket.gethostname()}"
        assert status["paused_since"] is not None
        starting = [ln for ln in logs[1].read_text().splitlines() if "starting paused" in ln]
        assert len(starting) == 1 and f"group {topic} was paused since" in starting[0]
        assert "`es-sink resume`" in starting[0]
        time.sleep(5)  # five epochs (-s 1) in which nothing may be read
        assert count_docs(es, topic) == 20
        assert sum(committed_offsets(services.kafka, topic, topic).values()) == 20
        assert all(
            p["position"] == p["committed"] for p in _answering(services, env)[0]["partitions"]
        )

        resumed = run_cli(services, env, "resume")
        assert resumed.exit_code == 0 and resumed.stdout.strip().endswith(": running")
        wait_for(lambda: count_docs(es, topic) == 30, 90, "the records produced while paused")
        (status,) = _answering(services, env)
        assert status["paused"] is False and status["paused_by"] is None
        stopped = run_cli(services, env, "stop")
        assert stopped.exit_code == 0, stopped.stdout + stopped.stderr
        assert flow.wait(30) == 0
    finally:
        _kill(flow)
    assert sum(committed_offsets(services.kafka, topic, topic).values()) == 30
    third = run_flow(services, {**env, "KAFKA_STOP_AT_END": "true"}, timeout=120)
    assert third.returncode == 0 and "starting paused" not in third.output, third.output[-3000:]


def test_a_cluster_stops_restarts_and_stays_paused_as_one(services, es, names, tmp_path):
    """Two processes (-i/-a): Bytewax ends a cluster whose process exits, so stop and
    restart act on every process, refuse a list that leaves one out, and every process
    honours a pause recorded before the restart."""
    topic = names("cluster")
    create_topic(services.kafka, topic, 2)
    produce(services.kafka, topic, numbered(0, 20))
    base = consecutive_ports(2)
    env = _flow_env(topic, base)
    addresses = ";".join(f"127.0.0.1:{p}" for p in free_ports(2))
    logs = [tmp_path / f"p{i}.log" for i in range(2)]
    procs = [
        start_flow(services, env, "-i", str(i), "-a", addresses, log=logs[i]) for i in range(2)
    ]
    try:
        before = _wait_answering(services, env, logs, processes=2)
        wait_for(lambda: count_docs(es, topic) == 20, 90, "the first 20 documents")
        one = run_cli(services, env, "stop", "--api", f"http://127.0.0.1:{base + 1}")
        assert one.exit_code == 2, one.stdout + one.stderr
        assert "names no process 0 of the cluster of 2" in one.stderr
        assert all(p.poll() is None for p in procs)

        assert run_cli(services, env, "pause").exit_code == 0
        restarted = run_cli(services, env, "restart", "--timeout", "120")
        assert restarted.exit_code == 0, restarted.stdout + restarted.stderr
        lines = restarted.stdout.splitlines()
        assert len(lines) == 2 and all(ln.endswith("); paused") for ln in lines), lines
        for proc, status, log in zip(procs, before, logs, strict=True):
            assert proc.poll() is None and proc.pid == status["process"]["pid"]
            assert log.read_text().count("starting paused: group") == 1, log.read_text()[-3000:]
        produce(services.kafka, topic, numbered(20, 10))
        time.sleep(5)
        assert count_docs(es, topic) == 20
        assert all(s["paused"] for s in _answering(services, env))

        assert run_cli(services, env, "resume").exit_code == 0
        wait_for(lambda: count_docs(es, topic) == 30, 90, "the records produced while paused")
        stopped = run_cli(services, env, "stop")
        assert stopped.exit_code == 0, stopped.stdout + stopped.stderr
        lines = stopped.stdout.splitlines()
        assert [STOPPED.match(ln).group(2) for ln in lines] == ["0", "1"], lines
        assert [p.wait(30) for p in procs] == [0, 0]
    finally:
        _kill(*procs)
    assert sum(committed_offsets(services.kafka, topic, topic).values()) == 30
