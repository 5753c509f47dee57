"""`es-sink check` against the real broker and node: a good configuration passes with its
secrets masked; each broken setting is named on its own line (exit 1)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.es_proxy import EsProxy
from tests.support.flows import create_topic, run_cli

pytestmark = pytest.mark.integration


def _checks(run: Any) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in run.json()["checks"]}


def test_a_good_configuration_passes_with_secrets_masked(services, names) -> None:
    topic, dlq = names("chk"), names("chk-dlq")
    create_topic(services.kafka, topic, 2)
    create_topic(services.kafka, dlq)
    env = {
        "KAFKA_TOPICS": topic,
        "DLQ_TOPIC": dlq,
        "ERRORS_TOLERANCE": "all",
        "ES_USERNAME": "elastic",
        "ES_PASSWORD": "pw-not-to-print",
        "SCHEMA_REGISTRY_CONFIG_BASIC_AUTH_USER_INFO": "me:registry-secret",
    }
    run = run_cli(services, env, "check", "--json")
    assert run.exit_code == 0, run.stdout + run.stderr
    report = run.json()
    assert report["ok"] and report["problems"] == []
    checks = _checks(run)
    assert set(checks) == {
        "flow", "kafka", "topics", "group", "dead-letter topic", "elasticsearch", "privileges"
    }  # fmt: skip
    assert f"{topic} (2)" in checks["topics"]["detail"]
    assert "max.message.bytes=" in checks["dead-letter topic"]["detail"]
    assert report["settings"]["ES_PASSWORD"] == "***"
    assert report["settings"]["SCHEMA_REGISTRY_CONFIG"] == {"basic.auth.user.info": "***"}
    assert report["settings"]["KAFKA_TOPICS"] == [topic]
    text = run_cli(services, env, "check")
    assert text.exit_code == 0
    for out in (run.stdout, text.stdout):
        assert "pw-not-to-print" not in out and "registry-secret" not in out
    assert "ok       topics:" in text.stdout


def test_each_broken_setting_is_named(services, names) -> None:
    topic = names("chk-missing")
    env = {
        "KAFKA_TOPICS": topic,
        "DLQ_TOPIC": names("chk-nodlq"),
        "ERRORS_TOLERANCE": "all",
        "ES_PIPELINE": "no-such-pipeline",
    }
    run = run_cli(services, env, "check", "--json")
    assert run.exit_code == 1
    problems = run.json()["problems"]
    assert [p.split(":")[0] for p in problems] == ["KAFKA_TOPICS", "DLQ_TOPIC", "ES_PIPELINE"]
    assert f"no topic {topic}" in problems[0]
    text = run_cli(services, env, "check")
    assert text.exit_code == 1
    lines = [line for line in text.stdout.splitlines() if line.startswith("PROBLEM")]
    assert len(lines) == 3 and "ES_PIPELINE: no ingest pipeline no-such-pipeline" in lines[2]


def test_unreachable_hosts_are_named(services, names) -> None:
    env = {
        "KAFKA_TOPICS": "x",
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "ES_HOSTS": "http://127.0.0.1:1",
        "ES_REQUEST_TIMEOUT_S": "2",
    }
    run = run_cli(services, env, "check", "--json", "--timeout", "1")
    assert run.exit_code == 1
    problems = run.json()["problems"]
    assert len(problems) == 2
    assert problems[0].startswith("KAFKA_BOOTSTRAP_SERVERS: cannot reach Kafka at 127.0.0.1:1")
    assert problems[1].startswith("ES_HOSTS: cannot reach Elasticsearch at http://127.0.0.1:1")


class _Refusing(EsProxy):
    """The real node behind a proxy that refuses these credentials as a secured node would
    (the test node runs without security)."""

    def _handle(self, req: Any) -> None:
        if req.headers.get("Authorization"):
            body = json.dumps(
                {
                    "error": {"type": "security_exception", "reason": "unable to authenticate"},
                    "status": 401,
                }
            ).encode()
            req.send_response(401)
            req.send_header("Content-Type", "application/json")
            req.send_header("X-Elastic-Product", "Elasticsearch")
            req.send_header("Content-Length", str(len(body)))
            req.end_headers()
            req.wfile.write(body)
            return
        super()._handle(req)


def test_wrong_credentials_are_named(services, names) -> None:
    topic = names("chk-cred")
    create_topic(services.kafka, topic)
    with _Refusing(services.es_url) as proxy:
        env = {"KAFKA_TOPICS": topic, "ES_HOSTS": proxy.url, "ES_API_KEY": "wrong-key"}
        run = run_cli(services, env, "check", "--json")
    assert run.exit_code == 1
    (problem,) = run.json()["problems"]
    assert problem.startswith("ES_API_KEY: Elasticsearch refused the credentials with HTTP 401")
    assert "wrong-key" not in run.stdout


def test_every_invalid_setting_is_one_line(services) -> None:
    env = {"KAFKA_TOPICS": "x", "BULK_MAX_ACTIONS": "0", "ERRORS_TOLERANCE": "al"}
    run = run_cli(services, env, "check")
    assert run.exit_code == 1
    assert run.stdout.splitlines() == [
        "PROBLEM  settings: ERRORS_TOLERANCE: expected one of none, all, log, got 'al'",
        "PROBLEM  settings: BULK_MAX_ACTIONS: must be at least 1, got 0",
    ]


def test_version_offset_on_a_topic_of_two_partitions_is_a_problem(services, names) -> None:
    """The source refuses to start on it; `check` says so before."""
    topic = names("chk-ver")
    create_topic(services.kafka, topic, 2)
    env = {"KAFKA_TOPICS": topic, "VERSION": "offset"}
    run = run_cli(services, env, "check", "--json")
    assert run.exit_code == 1, run.stdout
    versions = _checks(run)["versions"]
    assert not versions["ok"]
    assert versions["detail"].startswith(f"VERSION: topic {topic} has 2 partitions")
    run = run_cli(services, {**env, "DOC_ID": "coordinates"}, "check", "--json")
    assert _checks(run)["versions"]["ok"], run.stdout


def test_the_flow_build_and_the_services_are_checked_in_one_run(services, names) -> None:
    topic = names("chk-build")
    create_topic(services.kafka, topic)
    env = {
        "KAFKA_TOPICS": topic,
        "TRANSFORMS": "no_such_module:enrich",
        "ES_PIPELINE": "no-such-pipeline",
    }
    run = run_cli(services, env, "check", "--json")
    assert run.exit_code == 1
    problems = run.json()["problems"]
    assert [p.split(":")[0] for p in problems] == ["transforms[0].python", "ES_PIPELINE"]
    assert run.json()["checks"][0]["check"] == "flow"


def test_a_regex_that_matches_nothing_is_named(services, names) -> None:
    env = {"KAFKA_TOPICS_REGEX": names("chk-none") + r"\..*"}
    run = run_cli(services, env, "check", "--json")
    assert run.exit_code == 1
    assert run.json()["problems"][0].startswith("KAFKA_TOPICS_REGEX: no topic matches")
    assert "privileges" not in {c["check"] for c in run.json()["checks"]}
