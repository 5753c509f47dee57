"""Shared fixtures. Integration fixtures talk to the real Kafka broker, Elasticsearch node and
Schema Registry that scripts/test starts (ES_SINK_TEST_KAFKA, ES_SINK_TEST_ES,
ES_SINK_TEST_REGISTRY); if those do not answer, the tests fail, they are never skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tools.devkit.es import count_docs, search_all
from tools.devkit.kafka import Message, committed_offsets, consume_all, create_topic, produce
from tools.devkit.wait import wait_for

__all__ = [
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

ROOT = Path(__file__).resolve().parent.parent
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


LOG_TAIL_LINES = 80
# Bytewax's epoch (-s) for test flows that do not pass their own: the shortest that
# `bytewax.run` takes (whole seconds); tests about epochs pass -s themselves.
EPOCH_S = "1"


TIERS = ("unit", "integration", "system")


def pytest_configure(config: pytest.Config) -> None:
    """Bare `pytest` (no path, no -m) runs the unit tier, which needs no service."""
    if not config.option.markexpr and config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        config.option.markexpr = "unit"


# The kind of server a compat run talks to (scripts/test sets it per compatibility node).
COMPAT_KIND = os.environ.get("ES_SINK_TEST_COMPAT_KIND")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test is in exactly one tier: tests/unit is `unit` unless it says otherwise, and a
    test under tests/integration declares `integration` or `system`. `compat` is an
    integration test run again against the other servers: every kind, or only the kinds it
    names (`compat("opensearch")`); a compat run leaves out the tests not for its kind."""
    other_kind = []
    for item in items:
        tiers = [t for t in TIERS if item.get_closest_marker(t)]
        if not tiers and "unit" in item.path.relative_to(ROOT).parts[:2]:
            item.add_marker(pytest.mark.unit)
            tiers = ["unit"]
        compat = item.get_closest_marker("compat")
        if compat and "integration" not in tiers:
            tiers.append("compat without integration")
        if len(tiers) != 1:
            msg = f"{item.nodeid}: declares tiers {tiers}; exactly one of {TIERS} is expected"
            raise pytest.UsageError(msg)
        if COMPAT_KIND and compat and compat.args and COMPAT_KIND not in compat.args:
            other_kind.append(item)
    if other_kind:
        config.hook.pytest_deselected(items=other_kind)
        items[:] = [i for i in items if i not in other_kind]
    # The longest tests start first: a tier on several workers then ends with short ones.
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test shows the tail of every flow log it wrote under `tmp_path` (the fixtures
    that start flows write `*.log` there): a timeout in CI says why the flow was slow."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    tmp = getattr(item, "funcargs", {}).get("tmp_path")
    if report.when != "call" or not report.failed or not isinstance(tmp, Path):
        return
    for log in sorted(tmp.rglob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        report.sections.append((f"flow log {log.name} (last {len(lines)} lines)", "\n".join(lines)))


@pytest.fixture(scope="session")
def services() -> Services:
    from confluent_kafka.admin import AdminClient

    from sinks.elasticsearch.client import connect

    try:
        AdminClient({"bootstrap.servers": KAFKA}).list_topics(timeout=20)
    except Exception as e:
        pytest.fail(f"Kafka at {KAFKA} does not answer ({e}); run the tests with scripts/test")
    try:
        connect(ES_URL).cluster.health(wait_for_status="yellow", timeout="30s")
    except Exception as e:
        pytest.fail(
            f"Elasticsearch at {ES_URL} does not answer ({e}); run the tests with scripts/test"
        )
    return Services(KAFKA, ES_URL)


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


@pytest.fixture(scope="session")
def registry(services: Services) -> Registry:
    """The suite's Schema Registry; the test fails if it does not answer."""
    url = registry_api(REGISTRY)
    try:
        with urllib.request.urlopen(f"{url}/subjects", timeout=20) as r:
            r.read()
    except OSError as e:
        pytest.fail(
            f"the Schema Registry at {url} does not answer ({e}); run the tests with "
            "scripts/test, or start one with `scripts/stack up registry`"
        )
    return Registry(url)


@pytest.fixture
def es(services: Services) -> Iterator[object]:
    from sinks.elasticsearch.client import connect

    client = connect(services.es_url)
    yield client
    client.close()


@pytest.fixture
def names(services: Services) -> Iterator[Callable[[str], str]]:
    """Unique lower-case names for topics and indices; all of them are deleted afterwards."""
    from confluent_kafka.admin import AdminClient

    from sinks.elasticsearch.client import connect

    made: list[str] = []
    run = uuid.uuid4().hex[:8]

    def make(prefix: str) -> str:
        name = f"t-{prefix}-{run}-{len(made)}"
        made.append(name)
        return name

    yield make
    admin = AdminClient({"bootstrap.servers": services.kafka})
    existing = admin.list_topics(timeout=20).topics
    doomed = [n for n in made if n in existing]
    if doomed:
        for fut in admin.delete_topics(doomed).values():
            fut.result(30)
    client = connect(services.es_url)
    client.options(ignore_status=404).indices.delete(index=f"t-*-{run}-*")
    client.close()


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
