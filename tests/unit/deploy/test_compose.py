"""Static checks of docker-compose.yml, the Dockerfile and deploy/entrypoint.sh.

No Docker engine is needed: the compose file is parsed with PyYAML and its `${VAR:-default}`
values are resolved with their defaults (as `docker compose` does with an empty
environment). The environment handed to the es-sink container is then checked against
what the flow (flows.config), bytewax.run and the entrypoint actually read, and run through
both parsers. The entrypoint script is executed for real, with a stand-in `python` on PATH
that records the final `exec` instead of starting the flow.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from flows import config
from tests.support.paths import ROOT

COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"

SERVICES = ("kafka", "elasticsearch", "kibana", "es-sink", "prometheus", "grafana")
SINK = "es-sink"

# Read by bytewax.run's argument parser (bytewax/run.py) ...
BYTEWAX_RUN_NAMES = frozenset(
    {
        "BYTEWAX_WORKERS_PER_PROCESS",
        "BYTEWAX_PROCESS_ID",
        "BYTEWAX_ADDRESSES",
        "BYTEWAX_RECOVERY_DIRECTORY",
        "BYTEWAX_SNAPSHOT_INTERVAL",
        "BYTEWAX_RECOVERY_BACKUP_INTERVAL",
    }
)
# ... by bytewax's compiled runtime (the dataflow API that serves /metrics) ...
BYTEWAX_RUNTIME_NAMES = frozenset({"BYTEWAX_DATAFLOW_API_ENABLED", "BYTEWAX_DATAFLOW_API_PORT"})
# ... and by deploy/entrypoint.sh.
ENTRYPOINT_NAMES = frozenset({"RECOVERY_PARTITIONS", "BYTEWAX_RECOVERY_DIRECTORY"})

_INTERPOLATION = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))"
)


def _interpolate(value: Any, variables: dict[str, str] | None = None) -> str:
    """Resolve compose interpolation as `docker compose` would with `variables` set (none by
    default)."""

    def sub(m: re.Match[str]) -> str:
        if m.group("escaped"):
            return "$"
        name = m.group("braced") or m.group("plain")
        if variables and name in variables:
            return variables[name]
        if m.group("plain"):
            return ""
        op, arg = m.group("op"), m.group("arg") or ""
        if op in (":-", "-"):
            return arg
        if op in (":?", "?"):
            pytest.fail(f"{m.group(0)} in docker-compose.yml requires a variable to be set")
        return ""

    return _INTERPOLATION.sub(sub, str(value))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict), "docker-compose.yml must hold a mapping"
    assert isinstance(data.get("services"), dict), "docker-compose.yml has no services"
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's `environment:` (map or list form), interpolated with defaults."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) if "=" in item else (item, "") for item in env)
        env = dict(pairs)
    assert isinstance(env, dict)
    return {str(k): _interpolate("" if v is None else v) for k, v in env.items()}


@pytest.fixture(scope="module")
def sink_env(services: dict[str, dict[str, Any]]) -> dict[str, str]:
    return _environment(services[SINK])


def _ports(service: dict[str, Any]) -> list[tuple[str | None, str, str]]:
    """(host_ip, published, target) for each published port, short or long syntax."""
    out: list[tuple[str | None, str, str]] = []
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            out.append(
                (entry.get("host_ip"), str(entry.get("published", "")), str(entry["target"]))
            )
            continue
        spec = _interpolate(entry).split("/", 1)[0]
        parts = spec.rsplit(":", 2)
        if len(parts) == 3:
            out.append((parts[0].strip("[]") or None, parts[1], parts[2]))
        elif len(parts) == 2:
            out.append((None, parts[0], parts[1]))
        else:
            out.append((None, "", parts[0]))
    return out


def _volume_mounts(service: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(source, target, read_only) for each mount, short or long syntax."""
    out = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, dict):
            out.append(
                (str(entry.get("source", "")), str(entry["target"]), bool(entry.get("read_only")))
            )
            continue
        parts = _interpolate(entry).split(":")
        if len(parts) == 1:
            out.append(("", parts[0], False))
        else:
            mode = parts[2] if len(parts) > 2 else ""
            out.append((parts[0], parts[1], "ro" in mode.split(",")))
    return out


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    out = []
    for line in logical:
        instruction, _, args = line.partition(" ")
        out.append((instruction.upper(), args.strip()))
    return out


# ---------------------------------------------------------------- compose: services


def test_all_services_exist(services: dict[str, dict[str, Any]]) -> None:
    missing = [name for name in SERVICES if name not in services]
    assert not missing, f"docker-compose.yml lacks services {missing}"


@pytest.mark.parametrize(
    ("service", "image"),
    [
        ("kafka", "apache/kafka:4.1.1"),
        ("elasticsearch", "docker.elastic.co/elasticsearch/elasticsearch:9.5.4"),
        ("kibana", "docker.elastic.co/kibana/kibana:9.5.4"),
        ("prometheus", "prom/prometheus:v3.16.0"),  # scripts/promtool builds v0.316.0 = 3.16.0
        ("grafana", "grafana/grafana:13.0.0"),
    ],
)
def test_images_match_the_local_stack_versions(
    services: dict[str, dict[str, Any]], service: str, image: str
) -> None:
    assert services[service].get("image") == image


def test_sink_builds_from_the_dockerfile(services: dict[str, dict[str, Any]]) -> None:
    build = services[SINK].get("build")
    assert build, "es-sink must be built (build:), not pulled"
    if isinstance(build, str):
        build = {"context": build}
    context = (ROOT / build.get("context", ".")).resolve()
    dockerfile = (context / build.get("dockerfile", "Dockerfile")).resolve()
    assert context == ROOT, f"build context {context} is not the repository root"
    assert dockerfile == DOCKERFILE.resolve()
    assert DOCKERFILE.is_file()


def test_every_published_port_is_bound_to_localhost(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        assert service.get("network_mode") != "host", f"{name} uses the host network"
        for host_ip, published, target in _ports(service):
            assert host_ip == "127.0.0.1", (
                f"{name}: port {published or '?'}->{target} is published on "
                f"{host_ip or 'all interfaces'}, not 127.0.0.1"
            )


@pytest.mark.parametrize(
    ("service", "port"),
    [
        ("kafka", "9092"),
        ("elasticsearch", "9200"),
        ("kibana", "5601"),
        (SINK, "3030"),
        (SINK, "8080"),
        ("prometheus", "9090"),
        ("grafana", "3000"),
    ],
)
def test_expected_ports_are_published(
    services: dict[str, dict[str, Any]], service: str, port: str
) -> None:
    published = {(p, t) for _, p, t in _ports(services[service])}
    assert (port, port) in published, f"{service} does not publish 127.0.0.1:{port}"


def test_every_host_port_can_be_moved(services: dict[str, dict[str, Any]]) -> None:
    """Each published port comes from a `*_HOST_PORT` variable, so the stack can run beside
    another Kafka or Elasticsearch; Kafka advertises the port it is published on."""
    moved: dict[str, str] = {}
    for name, service in services.items():
        for entry in service.get("ports") or []:
            found = re.fullmatch(r"127\.0\.0\.1:\$\{(\w+_HOST_PORT):-(\d+)\}:(\d+)", entry)
            assert found, f"{name}: {entry} has a fixed host port"
            variable, default, target = found.groups()
            assert default == target and variable not in moved, entry
            moved[variable] = str(20000 + int(target))
    kafka = services["kafka"]
    env = {k: _interpolate(v, moved) for k, v in (kafka.get("environment") or {}).items()}
    published = _interpolate(kafka["ports"][0], moved).split(":")[1]
    assert f"HOST://127.0.0.1:{published}" in env["KAFKA_ADVERTISED_LISTENERS"].split(",")


def test_kafka_and_elasticsearch_have_healthchecks(
    services: dict[str, dict[str, Any]],
) -> None:
    for name in ("kafka", "elasticsearch"):
        check = services[name].get("healthcheck") or {}
        assert check.get("test"), f"{name} has no healthcheck"
        assert not check.get("disable"), f"{name} disables its healthcheck"
    es_test = services["elasticsearch"]["healthcheck"]["test"]
    assert "_cluster/health" in " ".join(es_test if isinstance(es_test, list) else [es_test])


def test_sink_waits_for_healthy_dependencies_and_restarts(
    services: dict[str, dict[str, Any]],
) -> None:
    sink = services[SINK]
    depends = sink.get("depends_on")
    assert isinstance(depends, dict), "es-sink depends_on must name conditions"
    for name in ("kafka", "elasticsearch"):
        assert (depends.get(name) or {}).get("condition") == "service_healthy", (
            f"es-sink must wait for {name} to be healthy"
        )
    assert sink.get("restart") == "unless-stopped"


def test_kafka_is_single_node_kraft(services: dict[str, dict[str, Any]]) -> None:
    env = _environment(services["kafka"])
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node_id = env["KAFKA_NODE_ID"]
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert len(voters) == 1
    assert voters[0].startswith(f"{node_id}@")
    for name, value in env.items():
        if name.endswith("REPLICATION_FACTOR"):
            assert value == "1", f"{name}={value} on a single broker"
    protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    listeners = [entry.split("://")[0] for entry in env["KAFKA_LISTENERS"].split(",")]
    assert set(listeners) <= set(protocols), "a listener has no security protocol"
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in listeners


def _advertised(services: dict[str, dict[str, Any]]) -> dict[str, str]:
    env = _environment(services["kafka"])
    out = {}
    for entry in env["KAFKA_ADVERTISED_LISTENERS"].split(","):
        name, _, address = entry.partition("://")
        out[name] = address
    return out


def test_sink_uses_kafkas_internal_listener(
    services: dict[str, dict[str, Any]], sink_env: dict[str, str]
) -> None:
    advertised = _advertised(services)
    kafka_host = services["kafka"].get("hostname", "kafka")
    internal = [a for a in advertised.values() if a.rpartition(":")[0] in (kafka_host, "kafka")]
    assert internal, f"no listener advertised to containers as {kafka_host}:<port>"
    assert sink_env["KAFKA_BOOTSTRAP_SERVERS"] in internal
    # ... and the host listener that is published advertises the published address.
    assert "127.0.0.1:9092" in advertised.values()


def test_topics_are_created_before_the_sink_starts(
    services: dict[str, dict[str, Any]], sink_env: dict[str, str], tmp_path: Path
) -> None:
    # The flow refuses to start when a KAFKA_TOPICS topic is missing, so kafka-init creates
    # them (and the dead-letter topic) and es-sink waits for it to finish.
    condition = (services[SINK]["depends_on"].get("kafka-init") or {}).get("condition")
    assert condition == "service_completed_successfully"
    init = services["kafka-init"]
    assert init["entrypoint"] == ["/bin/sh", "-c"]
    script = _interpolate(init["command"][0])
    tool = "/opt/kafka/bin/kafka-topics.sh"
    assert tool in script
    created = tmp_path / "created"
    fake = tmp_path / "kafka-topics.sh"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {shlex.quote(str(created))}\n')
    fake.chmod(0o755)
    result = subprocess.run(
        ["/bin/sh", "-c", script.replace(tool, str(fake))], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    topics = [line.rsplit("--topic ", 1)[1] for line in created.read_text().splitlines()]
    wanted = [*sink_env["KAFKA_TOPICS"].split(","), sink_env["DLQ_TOPIC"]]
    assert topics == wanted
    for line in created.read_text().splitlines():
        assert f"--bootstrap-server {sink_env['KAFKA_BOOTSTRAP_SERVERS']}" in line
        assert "--if-not-exists" in line


def test_sink_talks_to_the_elasticsearch_service(sink_env: dict[str, str]) -> None:
    assert sink_env["ES_HOSTS"] == "http://elasticsearch:9200"


def test_kafka_topics_default_and_override(services: dict[str, dict[str, Any]]) -> None:
    raw = str(services[SINK]["environment"]["KAFKA_TOPICS"])
    assert raw == "${KAFKA_TOPICS:-events}"
    assert _interpolate(raw) == "events"


# ---------------------------------------------------------------- compose: recovery volume


def test_recovery_volume_is_mounted_at_the_recovery_directory(
    compose: dict[str, Any], services: dict[str, dict[str, Any]], sink_env: dict[str, str]
) -> None:
    directory = sink_env.get("BYTEWAX_RECOVERY_DIRECTORY")
    assert directory, "es-sink must set BYTEWAX_RECOVERY_DIRECTORY"
    assert directory.startswith("/")
    mounts = {target: (source, ro) for source, target, ro in _volume_mounts(services[SINK])}
    assert directory in mounts, f"nothing is mounted at {directory}"
    source, read_only = mounts[directory]
    assert source == "recovery", f"{directory} is mounted from {source!r}, not the named volume"
    assert not read_only, "the recovery volume must be writable"
    assert "recovery" in (compose.get("volumes") or {}), "volume `recovery` is not declared"


# ---------------------------------------------------------------- compose: env names


def _known_names() -> set[str]:
    return (
        set(config._ENV_NAMES)
        | {"ES_SINK_CONFIG"}
        | BYTEWAX_RUN_NAMES
        | BYTEWAX_RUNTIME_NAMES
        | ENTRYPOINT_NAMES
    )


def test_every_sink_variable_is_read_by_something(
    services: dict[str, dict[str, Any]], sink_env: dict[str, str]
) -> None:
    assert "env_file" not in services[SINK], "env_file names cannot be checked; use environment:"
    prefixes = (config.KAFKA_CONFIG_PREFIX, config.SCHEMA_REGISTRY_CONFIG_PREFIX)
    unknown = sorted(
        name for name in sink_env if name not in _known_names() and not name.startswith(prefixes)
    )
    assert not unknown, f"es-sink sets variables nothing reads: {unknown}"


def test_bytewax_names_are_read_by_the_installed_bytewax() -> None:
    import bytewax._bytewax
    import bytewax.run

    run_source = Path(bytewax.run.__file__).read_text()
    stale = sorted(n for n in BYTEWAX_RUN_NAMES if f'"{n}"' not in run_source)
    assert not stale, f"bytewax/run.py no longer reads {stale}"
    runtime = Path(bytewax._bytewax.__file__).read_bytes()
    stale = sorted(n for n in BYTEWAX_RUNTIME_NAMES if n.encode() not in runtime)
    assert not stale, f"the bytewax runtime no longer reads {stale}"


def test_entrypoint_reads_its_names() -> None:
    script = ENTRYPOINT.read_text()
    for name in ENTRYPOINT_NAMES:
        assert f"${{{name}" in script, f"deploy/entrypoint.sh does not read {name}"


def test_sink_environment_is_valid_flow_settings(sink_env: dict[str, str]) -> None:
    settings = config.Settings.load(sink_env)  # raises ConfigError naming the bad setting
    assert settings.topics == ("events",)
    assert settings.es_hosts == ("http://elasticsearch:9200",)
    if settings.errors_tolerance == "all":
        assert settings.dlq_topic


def test_sink_environment_is_valid_for_bytewax_run(
    sink_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import bytewax.run

    for name in [n for n in os.environ if n.startswith("BYTEWAX_")]:
        monkeypatch.delenv(name)
    for name, value in sink_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", ["python -m bytewax.run", "flows.es_sink"])
    args = bytewax.run._parse_args()  # exits (SystemExit) on a bad combination
    assert args.recovery_directory == Path(sink_env["BYTEWAX_RECOVERY_DIRECTORY"])
    assert args.snapshot_interval is not None
    assert args.snapshot_interval.total_seconds() > 0
    assert args.backup_interval is not None
    assert args.workers_per_process >= 1
    assert args.process_id is None, "a single container must not set BYTEWAX_PROCESS_ID"


def test_sink_metrics_api_is_enabled_and_published(
    services: dict[str, dict[str, Any]], sink_env: dict[str, str]
) -> None:
    assert sink_env.get("BYTEWAX_DATAFLOW_API_ENABLED", "").lower() == "true"
    port = sink_env.get("BYTEWAX_DATAFLOW_API_PORT", "3030")
    targets = {t for _, _, t in _ports(services[SINK])}
    assert port in targets, f"dataflow API port {port} is not published"


def test_recovery_partitions_is_a_positive_number(sink_env: dict[str, str]) -> None:
    assert int(sink_env.get("RECOVERY_PARTITIONS", "1")) >= 1


# ---------------------------------------------------------------- compose: monitoring


def _mounted(service: dict[str, Any], target: str) -> Path:
    """The repository path bind-mounted read-only at `target` in a service."""
    mounts = {t: (source, ro) for source, t, ro in _volume_mounts(service)}
    assert target in mounts, f"nothing is mounted at {target}"
    source, read_only = mounts[target]
    assert source.startswith("./"), f"{target} is not mounted from the repository"
    assert read_only, f"{target} must be mounted read-only"
    path = ROOT / source
    assert path.exists(), f"{source} does not exist"
    return path


def test_prometheus_scrapes_the_sinks_status_api(
    services: dict[str, dict[str, Any]], sink_env: dict[str, str]
) -> None:
    config_dir = _mounted(services["prometheus"], "/etc/prometheus")
    prom = yaml.safe_load((config_dir / "prometheus.yml").read_text())  # the image's default
    assert prom["rule_files"] == ["alerts.yml"] and (config_dir / "alerts.yml").is_file()
    (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "es-sink"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = [t for c in job["static_configs"] for t in c["targets"]]
    assert targets == [f"{SINK}:{sink_env['API_PORT']}"]
    assert sink_env["API_HOST"] == "0.0.0.0", "Prometheus must reach the API from its container"
    assert sink_env.get("API_TOKEN"), "an API off loopback needs API_TOKEN (refused otherwise)"


def test_grafana_provisions_the_data_source_and_the_dashboard(
    services: dict[str, dict[str, Any]],
) -> None:
    grafana = services["grafana"]
    provisioning = _mounted(grafana, "/etc/grafana/provisioning")
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "es-sink.yml").read_text())[
        "providers"
    ]
    dashboards = Path(provider["options"]["path"])
    dashboard = _mounted(grafana, str(dashboards / "es-sink.json"))
    assert dashboard == ROOT / "deploy" / "grafana" / "es-sink.json"
    home = _environment(grafana).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    assert home == str(dashboards / "es-sink.json")


# ---------------------------------------------------------------- Dockerfile


def test_dockerfile_base_image_is_python_311_slim() -> None:
    froms = [args for instr, args in _dockerfile_instructions() if instr == "FROM"]
    assert froms, "Dockerfile has no FROM"
    image = froms[-1].split()[0]
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", image), image


def test_dockerfile_runs_as_a_non_root_user() -> None:
    users = [args for instr, args in _dockerfile_instructions() if instr == "USER"]
    assert users, "Dockerfile never switches away from root (no USER)"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"final USER is {user}"


def test_dockerfile_workdir_and_install() -> None:
    instructions = _dockerfile_instructions()
    assert ("WORKDIR", "/app") in instructions
    runs = " ".join(args for instr, args in instructions if instr == "RUN")
    assert re.search(r"pip install (--no-deps )?\.(\s|$)", runs), "the project is not installed"
    assert "[dev]" not in runs and "[registry]" not in runs, "no extras in the image"


def test_dockerfile_compiles_the_app_it_runs_from_its_working_directory() -> None:
    """The flow imports /app/flows and /app/sinks (the working directory is first on
    sys.path) as a user who cannot write there: without .pyc files made at build time
    every start compiles them again."""
    runs = [args for instr, args in _dockerfile_instructions() if instr == "RUN"]
    assert any("python -m compileall -q flows sinks" in run for run in runs), runs


def test_dockerfile_uses_the_entrypoint_script() -> None:
    entrypoints = [args for instr, args in _dockerfile_instructions() if instr == "ENTRYPOINT"]
    assert entrypoints, "Dockerfile has no ENTRYPOINT"
    assert "deploy/entrypoint.sh" in entrypoints[-1]
    assert ENTRYPOINT.is_file()
    assert ENTRYPOINT.stat().st_mode & stat.S_IXUSR, "deploy/entrypoint.sh is not executable"
    # The image gets the script through `COPY . .`, so .dockerignore must not hide it.
    ignored = {
        line.strip().strip("/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for needed in ("deploy", "deploy/entrypoint.sh", "flows", "pyproject.toml"):
        assert needed not in ignored, f".dockerignore hides {needed}"
    for unwanted in (".venv", ".git"):
        assert unwanted in ignored, f".dockerignore lets {unwanted} into the build context"


def test_dockerfile_copy_sources_exist() -> None:
    for instr, args in _dockerfile_instructions():
        if instr != "COPY":
            continue
        parts = [p for p in shlex.split(args) if not p.startswith("--")]
        for source in parts[:-1]:
            if source == "." or "*" in source:
                continue
            assert (ROOT / source).exists(), f"COPY source {source} does not exist"


# ---------------------------------------------------------------- entrypoint behaviour


def test_entrypoint_script_syntax() -> None:
    result = subprocess.run(["sh", "-n", str(ENTRYPOINT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_entrypoint_ends_by_execing_the_flow() -> None:
    lines = [
        line.strip()
        for line in ENTRYPOINT.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert lines[-1] == 'exec python -m bytewax.run flows.es_sink "$@"'


@pytest.fixture
def run_entrypoint(tmp_path: Path):
    """Run deploy/entrypoint.sh with a `python` that logs the flow's exec instead of running it.

    `python -m bytewax.recovery` is passed to the real interpreter, so initialisation is real.
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    shim = bin_dir / "python"
    shim.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {shlex.quote(str(calls))}\n'
        'if [ "$1" = "-m" ] && [ "$2" = "bytewax.recovery" ]; then\n'
        f'    exec {shlex.quote(sys.executable)} "$@"\n'
        "fi\n"
        "exit 0\n"
    )
    shim.chmod(0o755)

    def run(*args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("BYTEWAX_")}
        base.pop("RECOVERY_PARTITIONS", None)
        base["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
        result = subprocess.run(
            [str(ENTRYPOINT), *args],
            env={**base, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        logged = calls.read_text().splitlines() if calls.exists() else []
        return result, logged

    return run


FLOW_CALL = "-m bytewax.run flows.es_sink"


def test_entrypoint_without_recovery_just_runs_the_flow(run_entrypoint) -> None:
    result, calls = run_entrypoint("-w", "2")
    assert result.returncode == 0, result.stderr
    assert calls == [f"{FLOW_CALL} -w 2"]


def test_entrypoint_initialises_recovery_once(run_entrypoint, tmp_path: Path) -> None:
    recovery = tmp_path / "volume" / "recovery"  # does not exist yet
    env = {"BYTEWAX_RECOVERY_DIRECTORY": str(recovery), "RECOVERY_PARTITIONS": "2"}

    result, calls = run_entrypoint(**env)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in recovery.iterdir()) == ["part-0.sqlite3", "part-1.sqlite3"]
    assert calls == [f"-m bytewax.recovery {recovery} 2", FLOW_CALL]

    # A restart finds the partitions and must not initialise again (bytewax would refuse).
    part0 = (recovery / "part-0.sqlite3").read_bytes()
    result, calls = run_entrypoint("-w", "1", **env)
    assert result.returncode == 0, result.stderr
    assert calls[2:] == [f"{FLOW_CALL} -w 1"]
    assert (recovery / "part-0.sqlite3").read_bytes() == part0


def test_entrypoint_defaults_to_one_partition(run_entrypoint, tmp_path: Path) -> None:
    recovery = tmp_path / "recovery"
    result, _ = run_entrypoint(BYTEWAX_RECOVERY_DIRECTORY=str(recovery))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in recovery.iterdir()) == ["part-0.sqlite3"]


@pytest.mark.parametrize("partitions", ["abc", "0", "-1", "2x"])
def test_entrypoint_rejects_bad_partition_counts(
    run_entrypoint, tmp_path: Path, partitions: str
) -> None:
    recovery = tmp_path / "recovery"
    result, calls = run_entrypoint(
        BYTEWAX_RECOVERY_DIRECTORY=str(recovery), RECOVERY_PARTITIONS=partitions
    )
    assert result.returncode != 0
    assert "RECOVERY_PARTITIONS" in result.stderr
    assert calls == [], "the flow must not start"
    assert not recovery.exists()
