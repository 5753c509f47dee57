"""promtool's verdict on deploy/prometheus: the rules parse and pass its checks, every alert
fires in alerts_test.yml exactly as written there, the scrape config loads the rules, and
every PromQL query of the Grafana dashboard parses too.

scripts/provision builds promtool from the Go module proxy once per machine (the binary is
cached under STACK_CACHE_DIR); these tests use that binary and never build it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import deploy

SCRIPT = deploy.ROOT / "scripts" / "promtool"
pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def promtool() -> Path:
    """The promtool binary that scripts/provision built (the test fails if there is none)."""
    found = subprocess.run([str(SCRIPT), "--cached"], capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stderr[-3000:]
    path = Path(found.stdout.strip().splitlines()[-1])
    assert path.is_file(), path
    return path


def _run(promtool: Path, *args: str, cwd: Path = deploy.ROOT) -> str:
    result = subprocess.run(
        [str(promtool), *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


def test_promtool_checks_the_rules(promtool: Path) -> None:
    out = _run(promtool, "check", "rules", str(deploy.RULES))
    assert f"SUCCESS: {len(deploy.rules())} rules found" in out, out


def test_promtool_unit_tests_of_the_alerts_pass(promtool: Path) -> None:
    out = _run(promtool, "test", "rules", str(deploy.RULES_TEST))
    assert "SUCCESS" in out and "FAILED" not in out, out


def test_promtool_unit_tests_catch_a_broken_rule(promtool: Path, tmp_path: Path) -> None:
    # The unit tests must be able to fail: the paused exception of the lag alert removed,
    # a paused process's growing lag fires and the test says so.
    broken = deploy.RULES.read_text().replace("unless on (job, instance) es_sink_paused == 1", "")
    assert broken != deploy.RULES.read_text()
    (tmp_path / deploy.RULES.name).write_text(broken)
    (tmp_path / deploy.RULES_TEST.name).write_text(deploy.RULES_TEST.read_text())
    result = subprocess.run(
        [str(promtool), "test", "rules", deploy.RULES_TEST.name],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert "EsSinkConsumerLagGrowing" in result.stdout + result.stderr


def test_promtool_checks_the_scrape_config(promtool: Path) -> None:
    out = _run(promtool, "check", "config", str(deploy.PROMETHEUS_CONFIG))
    assert "is valid prometheus config file syntax" in out, out
    assert "SUCCESS: 1 rule files found" in out, out


def test_every_dashboard_query_parses(promtool: Path, tmp_path: Path) -> None:
    # promtool has no "check expression": each query becomes a recording rule, and
    # `check rules` parses them all (Grafana's variables substituted first).
    exprs = deploy.dashboard_exprs()
    rules = [{"record": f"dashboard:query:{i}", "expr": e} for i, (_, e) in enumerate(exprs)]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [str(promtool), "check", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, "\n".join(
        [out, *(f"{i}: {where}: {e}" for i, (where, e) in enumerate(exprs))]
    )
    assert f"SUCCESS: {len(rules)} rules found" in out, out
