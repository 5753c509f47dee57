"""`es-sink status`, `pause`, `resume` and `offsets reset` through the flow processes'
status API (flows/api), against the real flow."""

from __future__ import annotations

import signal
import time

import pytest

from chaos.flow import free_ports
from tests.conftest import create_topic, produce, run_cli, start_flow

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
