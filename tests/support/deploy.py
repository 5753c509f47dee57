"""What the files under deploy/ ask of the flow: every PromQL expression of the Grafana
dashboard and the Prometheus rules, and the metric names those expressions select.

A small PromQL lexer instead of a parser library: no maintained PromQL parser is on PyPI
(promtool checks the syntax for real, tests/integration/test_deploy_rules.py), and the names
are easy to tell apart once strings, label matchers, ranges and grouping lists are removed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "es-sink.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULES_TEST = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"

# Grafana's variables, as Prometheus sees them after Grafana substituted them.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
    "$job": "es-sink",
    "$instance": ".*",
}

_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "inf", "nan", "start", "end", "atan2"}
)
_AGGREGATORS = frozenset(
    {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values"}
    | {"bottomk", "topk", "quantile", "limitk", "limit_ratio"}
)
_GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_TOKEN = re.compile(
    r"(?P<number>(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:e[+-]?\d+)?)(?:[smhdwy]|ms)*)"
    r"|(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"|(?P<open>[({\[])|(?P<close>[)}\]])|(?P<other>\S)"
)


def grafana_to_promql(expr: str) -> str:
    """A dashboard expression with Grafana's variables replaced (longest name first)."""
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    return re.sub(r"\$\{(\w+)\}", lambda m: GRAFANA_VARIABLES.get("$" + m[1], ".*"), expr)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not functions, keywords or labels)."""
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(_STRING.sub('""', expr))]
    names: set[str] = set()
    depth = 0  # inside {...} or [...]: label matchers and ranges, no metric names
    skip_list = False  # the parenthesised label list after by/on/... comes next
    in_list = 0
    for i, (kind, text) in enumerate(tokens):
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "open":
            if text == "(" and skip_list:
                skip_list, in_list = False, in_list + 1
            elif text in "{[":
                depth += 1
            continue
        if kind == "close":
            if text == ")" and in_list:
                in_list -= 1
            elif text in "}]":
                depth -= 1
            continue
        if kind != "name" or depth or in_list:
            continue
        if text in _GROUPING:
            skip_list = True
        elif text in _AGGREGATORS and nxt in ("by", "without"):
            continue  # `max by (x) (...)`: an aggregation, not a metric called max
        elif text.lower() not in _KEYWORDS and nxt != "(":
            names.add(text)
    return names


def dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


def dashboard_panels() -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in dashboard()["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_exprs() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel query and query variable, variables substituted."""
    out = []
    for panel in dashboard_panels():
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = re.fullmatch(r"label_values\((.*),\s*\w+\)", query.strip())
            assert match, f"variable {var['name']}: not label_values(<selector>, <label>)"
            out.append((f"variable {var['name']}", match[1]))
    return [(where, grafana_to_promql(expr)) for where, expr in out]


def rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def rule_exprs() -> list[tuple[str, str]]:
    out = []
    for rule in rules():
        name = rule.get("alert") or rule.get("record")
        out.append((f"rule {name}", str(rule["expr"])))
    return out


def recorded_names() -> set[str]:
    """Series the rules record themselves: not something the flow has to export."""
    return {rule["record"] for rule in rules() if "record" in rule}
