"""What the integration tiers share: where the suite's real Kafka, Elasticsearch and Schema
Registry listen (ES_SINK_TEST_KAFKA, ES_SINK_TEST_ES, ES_SINK_TEST_REGISTRY, set by
scripts/test), and how a test runs the flow and the `es-sink` command against them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.support.paths import ROOT
from tools.devkit.es import count_docs, search_all
from tools.devkit.kafka import Message, committed_offsets, consume_all, create_topic, produce
from tools.devkit.wait import wait_for

__all__ = [
    "ROOT",
    "Message",
    "committed_offsets",
    "consume_all",
    "count_docs",
    "create_topic",
    "numbered",
    "produce",
    "search_all",
    "wait_for",
]

KAFKA = os.environ.get("ES_SINK_TEST_KAFKA", "127.0.0.1:19092")
ES_URL = os.environ.get("ES_SINK_TEST_ES", "http://127.0.0.1:19200")
# The registry's address; its Confluent-compatible API is under CCOMPAT_PATH there, unless
# the variable names a path of its own (a Confluent Schema Registry's is the root).
REGISTRY = os.environ.get("ES_SINK_TEST_REGISTRY", "http://127.0.0.1:19081")
CCOMPAT_PATH = "/apis/ccompat/v7"


def numbered(start: int, n: int) -> list[Message]:
    """Records k<start>.. with JSON values {"n": i}: distinct keys, each value its number."""
    return [(f"k{i}".encode(), b'{"n": %d}' % i) for i in range(start, start + n)]


@dataclass
class Services:
    """Where the real Kafka and Elasticsearch of this test run listen."""

    kafka: str
    es_url: str


# Bytewax's epoch (-s) for test flows that do not pass their own: the shortest that
# `bytewax.run` takes (whole seconds); tests about epochs pass -s themselves.
EPOCH_S = "1"


@dataclass
class Registry:
    """The suite's Schema Registry (scripts/stack's Apicurio Registry)."""

    url: str
    """Its Confluent-compatible API: what SCHEMA_REGISTRY_URL is set to."""

    def client(self) -> Any:
        """A confluent-kafka `SchemaRegistryClient` of it."""
        from confluent_kafka.schema_registry import SchemaRegistryClient

        return SchemaRegistryClient({"url": self.url})


def registry_api(address: str) -> str:
    """The Confluent-compatible API of a registry at `address` (kept if it has a path)."""
    address = address.rstrip("/")
    return address if urlsplit(address).path else address + CCOMPAT_PATH


@dataclass
class FlowRun:
    """A finished flow process."""

    returncode: int
    output: str


def flow_command(
    services: Services, env: dict[str, str], *args: str, module: str = "flows.es_sink"
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a flow run (hermetic: host settings dropped)."""
    full_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "ES_", "DLQ_"))},
        "KAFKA_BOOTSTRAP_SERVERS": services.kafka,
        "ES_HOSTS": services.es_url,
        "KAFKA_STOP_AT_END": "true",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    if "-s" not in args:
        args = ("-s", EPOCH_S, *args)
    return [sys.executable, "-m", "bytewax.run", module, *args], full_env


def run_flow(
    services: Services,
    env: dict[str, str],
    *args: str,
    timeout: float = 180.0,
    module: str = "flows.es_sink",
) -> FlowRun:
    """Run `python -m bytewax.run <module> <args>` to completion with the given settings."""
    cmd, full_env = flow_command(services, env, *args, module=module)
    proc = subprocess.run(
        cmd, env=full_env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    return FlowRun(proc.returncode, proc.stdout + proc.stderr)


def start_flow(
    services: Services, env: dict[str, str], *args: str, log: Path, module: str = "flows.es_sink"
) -> subprocess.Popen[bytes]:
    """Start a flow in the background, its output going to `log`."""
    cmd, full_env = flow_command(services, env, *args, module=module)
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, env=full_env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


@dataclass
class CliRun:
    """A finished `es-sink` command (run in-process through typer's CliRunner)."""

    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_cli(services: Services, env: dict[str, str], *args: str) -> CliRun:
    """Run `es-sink <args>` with a flow's settings (the same hermetic environment as
    `run_flow`, so the command talks about that flow)."""
    from typer.testing import CliRunner

    from flows.cli import app

    _, full_env = flow_command(services, env)
    unset: dict[str, str | None] = {k: None for k in os.environ if k not in full_env}
    result = CliRunner().invoke(app, list(args), env={**unset, **full_env, "COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return CliRun(result.exit_code, result.stdout, result.stderr)
