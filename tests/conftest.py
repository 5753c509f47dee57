"""Shared fixtures. Integration fixtures talk to the real Kafka broker, Elasticsearch node and
Schema Registry that scripts/test starts (ES_SINK_TEST_KAFKA, ES_SINK_TEST_ES,
ES_SINK_TEST_REGISTRY); if those do not answer, the tests fail, they are never skipped.
"""

from __future__ import annotations

import os
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.flows import ES_URL, KAFKA, REGISTRY, Registry, Services, registry_api
from tests.support.paths import ROOT

LOG_TAIL_LINES = 80


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
