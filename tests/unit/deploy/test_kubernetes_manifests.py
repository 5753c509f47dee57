"""deploy/kubernetes: every object is valid for the Kubernetes API (kubernetes-validate's
strict schemas, offline; the PodMonitor is a Prometheus Operator resource outside them and
is checked by what it must match), the pods can write their volume and pull an image that
exists, and the network policy, the disruption budget and the PodMonitor find the
StatefulSet's pods and ports by the names it gives them (a renamed port or label would
silently open, close or unmonitor them)."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support.paths import ROOT

DEPLOY = ROOT / "deploy" / "kubernetes"
# The oldest Kubernetes release still maintained when the manifests were written, and the
# newest the schemas know.
VERSIONS = ("1.32.0", kubernetes_validate.latest_version())
CUSTOM_RESOURCES = {"monitoring.coreos.com/v1": {"PodMonitor"}}


def _docs(name: str) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d}


def _objects() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name} {doc['kind']}", doc)
        for path in sorted(DEPLOY.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def _pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = _docs("statefulset.yaml")["StatefulSet"]["spec"]["template"]["spec"]
    return spec


def _built_in() -> list[tuple[str, dict[str, Any]]]:
    """The objects of Kubernetes' own API; a custom resource is checked further below."""
    return [
        (w, doc)
        for w, doc in _objects()
        if doc["kind"] not in CUSTOM_RESOURCES.get(doc["apiVersion"], ())
    ]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("where", "doc"), _built_in(), ids=[w for w, _ in _built_in()])
def test_every_object_is_valid_for_the_kubernetes_api(
    where: str, doc: dict[str, Any], version: str
) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


def test_the_strict_schemas_catch_a_misspelt_field() -> None:
    sts = _docs("statefulset.yaml")["StatefulSet"]
    sts["spec"]["template"]["spec"]["securityContext"]["fsgroup"] = 10001
    with pytest.raises(kubernetes_validate.ValidationError, match="fsgroup"):
        kubernetes_validate.validate(sts, VERSIONS[-1], strict=True)


def _image_user() -> int:
    found = re.search(r"useradd [^\n]*--uid (\d+)", (ROOT / "Dockerfile").read_text())
    assert found, "the Dockerfile creates no user with a fixed uid"
    return int(found.group(1))


def test_the_pods_run_as_the_image_user_and_can_write_the_recovery_volume() -> None:
    pod = _pod_spec()
    uid = _image_user()
    context = pod["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["runAsUser"] == context["runAsGroup"] == context["fsGroup"] == uid
    for c in pod["initContainers"] + pod["containers"]:
        assert c["securityContext"]["allowPrivilegeEscalation"] is False, c["name"]


def test_the_image_is_one_you_push_not_a_public_latest() -> None:
    pod = _pod_spec()
    images = {c["image"] for c in pod["initContainers"] + pod["containers"]}
    assert len(images) == 1, "the init container and the flow run the same build"
    (image,) = images
    registry, _, rest = image.partition("/")
    assert "." in registry and rest, f"{image}: name the registry you push to"
    assert not image.endswith(":latest") and ":" in rest, f"{image}: a fixed tag"
    assert "push" in (DEPLOY / "statefulset.yaml").read_text().split("apiVersion:")[0]
    for c in pod["initContainers"] + pod["containers"]:
        assert c["imagePullPolicy"] == "IfNotPresent", c["name"]


def test_the_disruption_budget_and_the_pod_monitor_find_the_pods() -> None:
    sts = _docs("statefulset.yaml")["StatefulSet"]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    budget = _docs("statefulset.yaml")["PodDisruptionBudget"]["spec"]
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    assert budget["maxUnavailable"] == 1
    monitor = _docs("podmonitor.yaml")["PodMonitor"]["spec"]
    assert monitor["selector"]["matchLabels"].items() <= labels.items()
    assert labels[monitor["jobLabel"]] == "es-sink"  # the job the alert rules select
    ports = {p["name"] for p in _pod_spec()["containers"][0]["ports"]}
    endpoints = monitor["podMetricsEndpoints"]
    assert [(e["port"], e["path"]) for e in endpoints] == [("api", "/metrics")]
    assert ports >= {"api"}


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
