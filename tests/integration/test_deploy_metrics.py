"""Every metric the Grafana dashboard and the Prometheus rules query is one a really running
flow exports: a flow reads a topic (one record cannot be decoded, so a dead letter is
counted), its status API's /metrics is scraped, and the metric families it declares (HELP and
TYPE lines: a labelled family with no sample yet still prints them) are compared with the
names in every expression of deploy/grafana/es-sink.json and deploy/prometheus/alerts.yml.
"""

from __future__ import annotations

import json
import re
import signal
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from tests.support import deploy
from tests.support.flows import Services, count_docs, create_topic, produce, start_flow, wait_for
from tools.chaos.flow import free_ports

pytestmark = pytest.mark.integration

# Series Prometheus makes itself for every target, not the flow.
SCRAPE_SERIES = frozenset({"up"})

_DECLARED = re.compile(r"^# (?:HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*)", re.MULTILINE)
_TYPE = re.compile(r"^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)", re.MULTILINE)
# The series Prometheus stores for a family, by its type (counters print their _total name).
_SERIES = {
    "counter": ("", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}


def exported_names(text: str) -> set[str]:
    """The series names a scrape of `text` can hold: every family declared by a HELP or
    TYPE line, as Prometheus stores its samples (a histogram's _bucket, _sum, _count)."""
    types = dict(_TYPE.findall(text))
    names = set()
    for family in set(_DECLARED.findall(text)):
        kind = types.get(family, "gauge")
        base = family.removesuffix("_total") if kind == "counter" else family
        names |= {(family if s == "" else base + s) for s in _SERIES.get(kind, ("",))}
    return names


def test_exported_names_follow_the_family_types() -> None:
    text = (
        "# HELP a_total x\n# TYPE a_total counter\na_total 1.0\n"
        "# HELP h x\n# TYPE h histogram\n"
        "# HELP g x\n# TYPE g gauge\n"
        "# HELP u x\n"
    )
    assert exported_names(text) == {
        "a_total", "a_created", "h_bucket", "h_sum", "h_count", "h_created", "g", "u"
    }  # fmt: skip


def queried_names() -> dict[str, set[str]]:
    """metric name -> where the dashboard or the rules query it."""
    out: dict[str, set[str]] = {}
    for where, expr in deploy.dashboard_exprs() + deploy.rule_exprs():
        for name in deploy.metric_names(expr):
            out.setdefault(name, set()).add(where)
    for name in deploy.recorded_names() | SCRAPE_SERIES:
        out.pop(name, None)
    return out


def test_dashboard_and_rules_query_only_metrics_the_flow_exports(
    services: Services, names: Callable[[str], str], es: Elasticsearch, tmp_path: Path
) -> None:
    topic, dlq = names("deploy-metrics"), names("deploy-dlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)  # the flow refuses a missing DLQ_TOPIC at start
    good = [(f"k{i}".encode(), json.dumps({"i": i}).encode()) for i in range(20)]
    produce(services.kafka, topic, [*good, (b"bad", b"{not json")])
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}/metrics"
    env = {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "KAFKA_STOP_AT_END": "false",
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": dlq,
        "API_PORT": str(port),  # the endpoint deploy/prometheus/prometheus.yml scrapes
        "BYTEWAX_DATAFLOW_API_ENABLED": "",
    }
    log = tmp_path / "flow.log"
    proc = start_flow(services, env, log=log)

    def scrape() -> str:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return str(r.read().decode())
        except OSError:
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            return ""

    try:
        wait_for(lambda: count_docs(es, topic) == len(good), 90, "every good record indexed")
        wait_for(lambda: "es_sink_dead_letters_total{" in scrape(), 30, "the dead letter")
        text = scrape()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text(errors="replace")[-3000:]

    exported = exported_names(text)
    queried = queried_names()
    assert len(queried) >= 15, f"the name extraction lost names: {sorted(queried)}"
    missing = {name: sorted(where) for name, where in queried.items() if name not in exported}
    assert not missing, (
        "the dashboard or the rules query metrics the flow does not export:\n"
        + "\n".join(f"  {name}: {', '.join(where)}" for name, where in sorted(missing.items()))
        + "\nexported: "
        + " ".join(sorted(n for n in exported if n.startswith("es_sink")))
    )
