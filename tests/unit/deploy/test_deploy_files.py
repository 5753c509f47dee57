"""Static checks of deploy/: the Grafana dashboard, the Prometheus rules and their unit tests,
the scrape config, the Kubernetes probes, and the PromQL name extraction that
tests/integration/test_deploy_metrics.py holds against a running flow.

promtool checks the PromQL itself (tests/integration/test_deploy_rules.py); these tests need
nothing but the files.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.support import deploy

# ---------------------------------------------------------------- PromQL names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        ('up{job="es-sink"} == 0', {"up"}),
        ('absent(up{job="es-sink"})', {"up"}),
        (
            "histogram_quantile(0.99, sum by (le) (rate(es_sink_bulk_seconds_bucket[5m])))",
            {"es_sink_bulk_seconds_bucket"},
        ),
        (
            "sum by (job, instance, stage) (rate(a_total[5m])) / ignoring (stage) group_left"
            " sum by (job, instance) (rate(b_total[5m])) > 0.01",
            {"a_total", "b_total"},
        ),
        ("max(x) by (le) > bool 1e3", {"x"}),
        ("x offset 5m and on (instance) y unless z", {"x", "y", "z"}),
        ('count_values("value", m)', {"m"}),
        ('label_replace(m, "dst", "$1 sum_total", "src", "(.*)")', {"m"}),
        ('topk(3, m{name="not_a_metric"})', {"m"}),
        ("rate(m[5m:30s]) * -Inf + NaN", {"m"}),
        ("max_over_time(es_sink_retries_in_progress[5m]) > 0", {"es_sink_retries_in_progress"}),
        ("sum without (part) (es_sink_buffered_actions)", {"es_sink_buffered_actions"}),
        ("avg by (instance) (a:recorded:rate5m)", {"a:recorded:rate5m"}),
    ],
)
def test_metric_names_of_an_expression(expr: str, names: set[str]) -> None:
    assert deploy.metric_names(expr) == names


def test_grafana_variables_are_substituted() -> None:
    expr = 'sum(rate(m{job=~"$job", instance=~"${instance}"}[$__rate_interval]))'
    assert deploy.grafana_to_promql(expr) == 'sum(rate(m{job=~"es-sink", instance=~".*"}[1m]))'


# ---------------------------------------------------------------- dashboard

REQUIRED_PANELS = {
    "Throughput in and out": {"es_sink_records_in_total", "es_sink_docs_indexed_total"},
    "Consumer lag per partition": {"es_sink_consumer_lag"},
    "Committed lag per partition": {"es_sink_committed_lag"},
    "Dead letters by stage": {"es_sink_dead_letters_total"},
    "Retries by reason": {"es_sink_retries_in_progress", "es_sink_bulk_retries_total"},
    "Bulk latency percentiles": {"es_sink_bulk_seconds_bucket"},
    "Buffered bytes": {"es_sink_buffered_bytes"},
    "State": {"es_sink_state"},
    "Paused": {"es_sink_paused"},
    "Ready": {"es_sink_ready"},
    "Oldest unflushed": {"es_sink_oldest_unflushed_seconds"},
}


def test_dashboard_has_the_panels_the_operators_need() -> None:
    panels = {p["title"]: p for p in deploy.dashboard_panels() if p["type"] != "row"}
    for title, wanted in REQUIRED_PANELS.items():
        assert title in panels, f"no panel {title!r}"
        used = set().union(*(deploy.metric_names(t["expr"]) for t in panels[title]["targets"]))
        assert wanted <= used, f"{title!r} does not query {wanted - used}"
    latency = [t["expr"] for t in panels["Bulk latency percentiles"]["targets"]]
    quantiles = sorted(e.split("(", 2)[1].split(",")[0] for e in latency)
    assert quantiles == ["0.5", "0.9", "0.99"], latency
    assert all(e.startswith("histogram_quantile(") and "by (le)" in e for e in latency)


def test_dashboard_is_importable_with_any_prometheus() -> None:
    dash = deploy.dashboard()
    assert dash["uid"] == "es-sink" and dash["title"]
    assert "__inputs" not in dash, "the data source is a variable, not an import input"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    source = variables["datasource"]
    assert source["type"] == "datasource" and source["query"] == "prometheus"
    wanted = {"type": "prometheus", "uid": "${datasource}"}
    for panel in deploy.dashboard_panels():
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == wanted, panel["title"]
        assert panel["targets"], f"{panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target.get("datasource", wanted) == wanted, panel["title"]
            assert '$job"' in target["expr"] and '$instance"' in target["expr"], (
                f"{panel['title']!r} {target['refId']} ignores the job/instance variables"
            )
    for name in ("job", "instance"):
        assert variables[name]["datasource"] == wanted


def test_dashboard_layout_is_consistent() -> None:
    panels = list(deploy.dashboard_panels())
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not mine & cells, f"{p['title']!r} overlaps another panel"
        cells |= mine
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs)), p["title"]


# ---------------------------------------------------------------- alert rules

REQUIRED_ALERTS = {
    "EsSinkProcessDown",
    "EsSinkAbsent",
    "EsSinkHaltedOrFailed",
    "EsSinkNotReady",
    "EsSinkConsumerLagGrowing",
    "EsSinkNotCommitting",
    "EsSinkDeadLetterRate",
    "EsSinkRetriesNotStopping",
}


def _alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for r in deploy.rules() if "alert" in r}


def test_every_alert_says_what_it_means_and_what_to_do() -> None:
    alerts = _alerts()
    assert set(alerts) >= REQUIRED_ALERTS, f"missing {REQUIRED_ALERTS - set(alerts)}"
    for name, rule in alerts.items():
        annotations = rule.get("annotations") or {}
        for key in ("summary", "description", "runbook"):
            assert str(annotations.get(key, "")).strip(), f"{name} has no {key}"
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        assert "for" in rule, f"{name} fires on a single evaluation"


def test_every_alert_is_proven_to_fire_by_the_unit_tests() -> None:
    tests = yaml.safe_load(deploy.RULES_TEST.read_text())
    assert tests["rule_files"] == [deploy.RULES.name]
    fired: set[str] = set()
    quiet: set[str] = set()
    for group in tests["tests"]:
        for case in group["alert_rule_test"]:
            (fired if case.get("exp_alerts") else quiet).add(case["alertname"])
    alerts = set(_alerts())
    assert alerts <= fired, f"no test makes {alerts - fired} fire"
    assert alerts <= quiet, f"no test shows {alerts - quiet} quiet before it fires"


_DURATION = re.compile(r"(\d+)([smh])")
_SECONDS = {"s": 1, "m": 60, "h": 3600}


def _seconds(text: str) -> int:
    return sum(int(n) * _SECONDS[unit] for n, unit in _DURATION.findall(str(text)))


def _samples(values: str) -> int:
    """How many samples promtool's expanding notation makes: `1 0`, `1x20` (21), `0+5x30`."""
    count = 0
    for token in values.split():
        times = re.fullmatch(r".*x(\d+)", token)
        count += int(times[1]) + 1 if times else 1
    return count


def test_no_alert_test_evaluates_on_a_window_boundary() -> None:
    """Prometheus 2's range windows hold the sample at their start, 3's do not: an alert test
    evaluated exactly one range after a series' last sample passes on one and fails on the
    other. Evaluating a minute later holds on both."""
    ranges = {
        rule["alert"]: {_seconds(r) for r in re.findall(r"\[(\w+)\]", str(rule["expr"]))}
        for rule in deploy.rules()
        if "alert" in rule
    }
    tests = yaml.safe_load(deploy.RULES_TEST.read_text())
    boundaries = []
    for group in tests["tests"]:
        step = _seconds(group.get("interval", tests.get("evaluation_interval", "1m")))
        ends = {series["series"]: (_samples(series["values"]) - 1) * step
                for series in group["input_series"]}  # fmt: skip
        for case in group["alert_rule_test"]:
            at = _seconds(case["eval_time"])
            for window in ranges[case["alertname"]]:
                boundaries += [
                    f"{group['name']}: {case['alertname']} at {case['eval_time']}: {series}"
                    for series, end in ends.items()
                    if end + window == at
                ]
    assert boundaries == []


def test_rules_match_the_scrape_job() -> None:
    config = yaml.safe_load(deploy.PROMETHEUS_CONFIG.read_text())
    assert config["rule_files"] == [deploy.RULES.name]
    jobs = {j["job_name"] for j in config["scrape_configs"]}
    for where, expr in deploy.rule_exprs():
        for job in set(re.findall(r'job="([^"]*)"', expr)):
            assert job in jobs, f"{where} matches job={job!r}, which nothing scrapes"


# ---------------------------------------------------------------- Kubernetes


def _statefulset() -> tuple[dict[str, Any], dict[str, Any]]:
    docs = list(
        yaml.safe_load_all((deploy.ROOT / "deploy/kubernetes/statefulset.yaml").read_text())
    )
    service = next(d for d in docs if d["kind"] == "Service")
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    return service, sts


def test_kubernetes_probes_use_the_status_api() -> None:
    service, sts = _statefulset()
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert int(env["API_PORT"]["value"]) == ports["api"]
    assert env["API_HOST"]["value"] == "0.0.0.0"
    assert env["API_TOKEN"]["valueFrom"]["secretKeyRef"]["name"], "API_TOKEN from a Secret"
    assert "value" not in env["API_TOKEN"]
    probes = {
        k: container[k]["httpGet"] for k in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert probes["livenessProbe"] == {"path": "/health/live", "port": "api"}
    assert probes["startupProbe"] == {"path": "/health/live", "port": "api"}
    assert probes["readinessProbe"] == {"path": "/health/ready", "port": "api"}
    # Not-ready pods must stay resolvable: the processes connect before any is ready.
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert "api" in {p["name"] for p in service["spec"]["ports"]}


def test_network_policy_lets_monitoring_reach_the_api() -> None:
    policy = yaml.safe_load((deploy.ROOT / "deploy/kubernetes/networkpolicy.yaml").read_text())
    monitoring = [
        rule
        for rule in policy["spec"]["ingress"]
        if any("namespaceSelector" in f for f in rule["from"])
    ]
    assert {"api"} <= {p["port"] for rule in monitoring for p in rule["ports"]}
