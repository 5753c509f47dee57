"""deploy/kubernetes: the network policy guards the StatefulSet's pods and ports by the
names the StatefulSet gives them (a renamed port or label would silently open or close it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def _docs(name: str) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d}


def test_the_network_policy_selects_the_statefulset_pods_and_ports() -> None:
    sts = _docs("statefulset.yaml")["StatefulSet"]
    policy = _docs("networkpolicy.yaml")["NetworkPolicy"]["spec"]
    pods = sts["spec"]["selector"]["matchLabels"]
    assert policy["podSelector"]["matchLabels"] == pods
    assert sts["spec"]["template"]["metadata"]["labels"].items() >= pods.items()
    container = sts["spec"]["template"]["spec"]["containers"][0]
    named = {p["name"] for p in container["ports"]}
    cluster, *others = policy["ingress"]
    # The cluster port: from the StatefulSet's own pods only.
    assert cluster["from"] == [{"podSelector": {"matchLabels": pods}}]
    assert "bytewax" in [p["port"] for p in cluster["ports"]]
    assert {p["port"] for rule in policy["ingress"] for p in rule["ports"]} <= named
    assert all("bytewax" not in {p["port"] for p in rule["ports"]} for rule in others)
