"""`es-sink check --offline`: every start-time check of the flow, every settings error at
once, warnings for variables that look like settings, and settings as the operator writes
them; `check` against an unreachable broker says so in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flows.cli import app

try:
    from flows.cli.check import shown
except ImportError:
    shown = None
from flows.config import declared


def _check(env: dict[str, str], *args: str) -> Any:
    unset: dict[str, str | None] = {k: None for k in os.environ if k not in env}
    return CliRunner().invoke(app, ["check", *args], env={**unset, **env, "COLUMNS": "200"})


def test_every_settings_error_is_reported_at_once() -> None:
    env = {"KAFKA_TOPICS": "t", "BULK_MAX_ACTIONS": "abc", "ERRORS_TOLERANCE": "al"}
    run = _check(env, "--offline", "--json")
    assert run.exit_code == 1
    problems = json.loads(run.stdout)["problems"]
    assert sorted(p.split(":")[0] for p in problems) == ["BULK_MAX_ACTIONS", "ERRORS_TOLERANCE"]


def test_a_variable_like_a_setting_is_warned_about_with_the_nearest_name() -> None:
    env = {"KAFKA_TOPICS": "t", "BULK_MAX_ACTION": "10", "KAFKA_PORT": "29092"}
    run = _check(env, "--offline")
    assert run.exit_code == 0, run.stdout
    warnings = [line for line in run.stdout.splitlines() if line.startswith("WARNING")]
    assert warnings == [
        "WARNING  BULK_MAX_ACTION: not a setting, ignored; did you mean BULK_MAX_ACTIONS?"
    ]


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("{type: rename, fileds: {a: b}}", "transforms[0].fileds: unknown key for type rename"),
        ("{python: 'mycompany.transforms:enrich'}", "cannot import 'mycompany.transforms"),
        ("{type: renam, fields: {a: b}}", "unknown transform type 'renam'"),
    ],
)
def test_offline_check_refuses_what_the_flow_refuses_at_start(
    tmp_path: Path, entry: str, words: str
) -> None:
    config = tmp_path / "es-sink.yaml"
    config.write_text(f"kafka_topics: t\ntransforms: [{entry}]\n")
    run = _check({"ES_SINK_CONFIG": str(config)}, "--offline", "--json")
    assert run.exit_code == 1
    (problem,) = json.loads(run.stdout)["problems"]
    assert words in problem


def test_offline_check_of_a_good_configuration_reaches_nothing() -> None:
    env = {"KAFKA_TOPICS": "t", "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "WRITE_METHOD": "upsert"}
    run = _check(env, "--offline", "--json")
    assert run.exit_code == 0, run.stdout
    assert [c["check"] for c in json.loads(run.stdout)["checks"]] == ["flow"]


def test_write_method_combinations_are_checked_offline() -> None:
    env = {"KAFKA_TOPICS": "t", "WRITE_METHOD": "upsert", "DOC_ID": "none"}
    run = _check(env, "--offline", "--json")
    assert run.exit_code == 1
    assert "WRITE_METHOD" in json.loads(run.stdout)["problems"][0]


def test_settings_read_as_the_operator_writes_them() -> None:
    fields = declared()
    assert shown(["a", "b"], fields["KAFKA_TOPICS"]) == "a,b"
    assert shown([], fields["KAFKA_TOPICS"]) == ""
    assert shown(False, fields["KAFKA_STOP_AT_END"]) == "false"
    assert shown(0, fields["ES_SINK_PARTITIONS"]) == "max(8, workers)"
    assert shown(12, fields["ES_SINK_PARTITIONS"]) == "12"
    assert shown({"orders": "o-idx"}, fields["ES_INDEX_MAP"]) == "orders:o-idx"


def test_an_unreachable_broker_is_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "ES_"))}
    env |= {
        "KAFKA_TOPICS": "t",
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "ES_HOSTS": "http://127.0.0.1:1",
    }
    run = subprocess.run(
        [sys.executable, "-m", "flows.cli", "check", "--timeout", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert run.stderr == ""
    (kafka,) = [line for line in run.stdout.splitlines() if "kafka:" in line]
    assert "cannot reach Kafka at 127.0.0.1:1: " in kafka
    assert "Connection refused" in kafka
