"""`es-sink check`: validate the configuration as the flow reads it (printed with secrets
masked), then reach every dependency the flow needs, one line per problem.

Like Kafka Connect's config validation: it does what the flow's start does (the same
settings, the flow's own build with its transforms, decoders and write method, the flow's
topic look-up, the sink's client) without starting anything, and goes on after a problem
so one run names every broken setting. `--offline` stops before the first connection (a
CI step, like `logstash --config.test_and_exit`). Environment variables that look like
settings and are none are warned about, with the nearest setting's name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from flows.cli import common
from flows.cli.common import Problem
from flows.errors import ConfigError

if TYPE_CHECKING:
    from flows.config import Settings

WRITE_PRIVILEGES = ("create_doc", "index", "create_index", "auto_configure")


@dataclass
class Report:
    """What `check` found: each check's outcome, and the problems (one line each)."""

    settings: dict[str, Any] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return [c["detail"] for c in self.checks if not c["ok"]]

    def run(self, name: str, probe: Callable[[], str]) -> bool:
        """Run one check; a Problem or ConfigError is its failure line."""
        try:
            detail = probe()
        except (Problem, ConfigError) as e:
            self.checks.append({"check": name, "ok": False, "detail": str(e)})
            return False
        self.checks.append({"check": name, "ok": True, "detail": detail})
        return True

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": not self.problems,
            "settings": self.settings,
            "checks": self.checks,
            "problems": self.problems,
            "warnings": self.warnings,
        }


def masked_settings(settings: Settings) -> dict[str, Any]:
    """Every declared setting by environment name, secrets as `***` (typed secrets, and
    pass-through values that `Settings.secrets()` lists)."""
    from flows.config.sources import env_name
    from sinks.secrets import Secret, redact

    secrets = settings.secrets()
    out: dict[str, Any] = {}
    for name, info in type(settings).model_fields.items():
        env = env_name(info)
        if env is None:
            continue
        value = getattr(settings, name)
        if isinstance(value, Secret):
            value = "***"
        elif isinstance(value, dict):
            value = {
                k: redact(str(v), secrets) if isinstance(v, str) else v for k, v in value.items()
            }
        elif isinstance(value, tuple):
            value = list(value)
        out[env] = value
    return out


def run_checks(
    settings: Settings, timeout: float = common.KAFKA_TIMEOUT_S, offline: bool = False
) -> Report:
    """Build the flow as its start does; unless `offline`, reach Kafka, the dead-letter
    topic, Elasticsearch and the Schema Registry."""
    report = Report(masked_settings(settings))
    report.run("flow", lambda: _flow(settings))
    if offline:
        return report
    meta: dict[str, Any] = {}
    found: dict[str, list[int]] = {}

    def kafka() -> str:
        meta.update(common.reachable_topics(settings, timeout))
        return f"Kafka at {settings.bootstrap_servers}: {len(meta)} topics"

    if report.run("kafka", kafka):
        if report.run("topics", lambda: _topics(settings, found)) and settings.version == "offset":
            report.run("versions", lambda: _versions(settings, found))
        report.run("group", lambda: _group(settings))
        if settings.dlq_topic:
            report.run("dead-letter topic", lambda: _dead_letter_topic(settings, meta))
    if report.run("elasticsearch", lambda: _elasticsearch(settings)):
        targets = list(found) or list(settings.topics)
        if targets:  # else no index is known yet (the topics check says why)
            report.run("privileges", lambda: _privileges(settings, targets))
        if settings.es_pipeline:
            report.run("pipeline", lambda: _pipeline(settings))
        if settings.es_index_template_name:
            report.run("index template", lambda: _template(settings))
    if settings.schema_registry_url and (
        settings.value_format in _registry_formats() or settings.key_format in _registry_formats()
    ):
        report.run("schema registry", lambda: _registry(settings))
    return report


def _flow(settings: Settings) -> str:
    """The flow's own build (`build_flow`): decoders, the transforms (their types and keys,
    Python functions imported), document ids, the write method and the index names are
    compiled and checked as at start; nothing connects."""
    from flows.pipeline import build_flow

    build_flow(settings)
    chain = len(settings.transforms)
    return (
        f"the flow builds: {settings.value_format} values, {chain} transform"
        f"{'' if chain == 1 else 's'}, WRITE_METHOD={settings.write_method}"
    )


def _registry_formats() -> tuple[str, ...]:
    from flows.decode import REGISTRY_FORMATS

    return REGISTRY_FORMATS


def _topics(settings: Settings, out: dict[str, list[int]]) -> str:
    """The flow's own topic look-up, without the dead-letter topic (checked on its own);
    `_versions` then runs the start's VERSION=offset refusals."""
    from flows.kafka.topics import find_topics

    try:
        found = find_topics(settings)
    except ConfigError as e:
        if not str(e).startswith("DLQ_TOPIC: no topic"):
            raise
        found = find_topics(settings.model_copy(update={"dlq_topic": None}))
    out.update(found)
    if not found:
        pattern = settings.topics_regex or ", ".join(settings.topics)
        raise Problem(f"KAFKA_TOPICS_REGEX: no topic matches {pattern}")
    parts = ", ".join(f"{t} ({len(ps)})" for t, ps in found.items())
    return f"topics (partitions): {parts}"


def _versions(settings: Settings, found: dict[str, list[int]]) -> str:
    """The source's start refusal of topics whose offsets do not order a document's writes."""
    from flows.kafka.discovery import offsets_comparable

    offsets_comparable(settings, found)
    per = "one partition per topic" if settings.doc_id == "key" else "DOC_ID=coordinates"
    return f"VERSION=offset: offsets order the writes to each document ({per})"


def _group(settings: Settings) -> str:
    from confluent_kafka import ConsumerGroupState

    group = settings.group_id
    client = common.admin(settings)  # held: futures of a collected client are cancelled
    try:
        desc = client.describe_consumer_groups([group])[group].result(common.KAFKA_TIMEOUT_S)
    except Exception as e:  # an authorization failure, mostly
        raise Problem(f"KAFKA_GROUP_ID: cannot describe group {group}: {e}") from None
    state = desc.state.name.lower() if isinstance(desc.state, ConsumerGroupState) else "unknown"
    if state == "dead" and not desc.members:
        return f"group {group}: no commits yet"
    return f"group {group}: {state}, {_count(len(desc.members), 'member')}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _dead_letter_topic(settings: Settings, meta: dict[str, Any]) -> str:
    from confluent_kafka.admin import ConfigResource

    topic = settings.dlq_topic or ""
    parts = common.partitions_of(meta, topic)
    if not parts:
        raise Problem(f"DLQ_TOPIC: no topic {topic} on {settings.bootstrap_servers}; create it")
    leaderless = [p for p, info in meta[topic].partitions.items() if info.leader < 0]
    if leaderless:
        raise Problem(f"DLQ_TOPIC: partitions {leaderless} of {topic} have no leader: not writable")
    resource = ConfigResource("topic", topic)
    client = common.admin(settings)
    try:
        configs = client.describe_configs([resource])[resource].result(common.KAFKA_TIMEOUT_S)
        limit = configs["max.message.bytes"].value
    except Exception as e:
        raise Problem(f"DLQ_TOPIC: cannot read the configuration of {topic}: {e}") from None
    return (
        f"dead-letter topic {topic}: {_count(len(parts), 'partition')}, max.message.bytes={limit}"
    )


def _elasticsearch(settings: Settings) -> str:
    client = common.es_client(settings)
    try:
        health = client.cluster.health()
    except Exception as e:
        raise common.es_problem(e, settings, "the credentials") from None
    return f"{_server(client)} ({health.get('cluster_name')}, {health.get('status')})"


def _server(client: Any) -> str:
    """What the sink's own detection found before the first request (`server.detect`):
    `Elasticsearch 9.5.4`, `OpenSearch 3.3.0`."""
    from sinks.elasticsearch.client import server_of

    server = server_of(client)
    return str(server) if server is not None else "an unidentified server"


def _privileges(settings: Settings, topics: list[str]) -> str:
    from elasticsearch import ApiError

    indices = sorted(set(common.index_patterns(settings, topics).values()))
    client = common.es_client(settings)
    try:
        answer = client.security.has_privileges(
            index=[{"names": indices, "privileges": list(WRITE_PRIVILEGES)}]
        )
    except ApiError as e:
        if e.meta.status in (400, 500) and "security" in str(e.body).lower():
            return f"security is off: writes to {', '.join(indices)} are allowed"
        raise common.es_problem(e, settings, "the privilege check") from None
    except Exception as e:
        raise common.es_problem(e, settings, "the privilege check") from None
    missing = {
        index: [p for p, ok in privs.items() if not ok]
        for index, privs in answer.get("index", {}).items()
        if not (privs.get("index") or privs.get("create_doc"))
        or not (privs.get("create_index") or privs.get("auto_configure"))
    }
    if missing:
        text = "; ".join(f"{i}: {', '.join(p)}" for i, p in missing.items())
        raise Problem(f"ES_USERNAME: the credentials lack write privileges ({text})")
    return f"may write {', '.join(indices)}"


def _pipeline(settings: Settings) -> str:
    from elasticsearch import NotFoundError

    name = settings.es_pipeline or ""
    try:
        common.es_client(settings).ingest.get_pipeline(id=name)
    except NotFoundError:
        raise Problem(f"ES_PIPELINE: no ingest pipeline {name} in Elasticsearch") from None
    except Exception as e:
        raise common.es_problem(e, settings, f"reading ingest pipeline {name}") from None
    return f"ingest pipeline {name} exists"


def _template(settings: Settings) -> str:
    name = settings.es_index_template_name or ""
    try:
        there = common.es_client(settings).indices.exists_index_template(name=name)
    except Exception as e:
        raise common.es_problem(e, settings, f"reading index template {name}") from None
    state = "installed" if there else "not installed yet (the flow installs it at start)"
    return f"index template {name} from ES_INDEX_TEMPLATE_FILE: {state}"


def _registry(settings: Settings) -> str:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from flows.decode.registry import registry_conf

    try:
        subjects = SchemaRegistryClient(registry_conf(settings)).get_subjects()
    except ConfigError:
        raise
    except Exception as e:
        raise Problem(f"SCHEMA_REGISTRY_URL: cannot list subjects: {e}") from None
    return f"Schema Registry: {len(subjects)} subjects"


def check(
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    timeout: float = typer.Option(
        common.KAFKA_TIMEOUT_S, "--timeout", min=0.1, help="Seconds to wait for Kafka."
    ),
    offline: bool = typer.Option(
        False, "--offline", help="Check the configuration only; reach no service (for CI)."
    ),
) -> None:
    """Validate the configuration and reach Kafka, Elasticsearch and the registry."""
    from flows.config import unknown_variables
    from flows.config.fields import SettingsError

    warnings = unknown_variables()
    try:
        settings = common.load_settings()
    except ConfigError as e:
        problems = list(e.problems) if isinstance(e, SettingsError) else [str(e)]
        report = Report(warnings=warnings)
        report.checks = [{"check": "settings", "ok": False, "detail": p} for p in problems]
    else:
        report = run_checks(settings, timeout, offline)
        report.warnings = warnings
    if json_out:
        common.emit_json(report.as_json())
    else:
        _print(report)
    raise typer.Exit(common.PROBLEM if report.problems else common.OK)


def _print(report: Report) -> None:
    from flows.config import declared

    fields = declared()
    table = Table("setting", "value", title="configuration (secrets masked)", title_justify="left")
    for name, value in report.settings.items():
        text = shown(value, fields.get(name))
        if text:
            table.add_row(name, common.cell(text))
    if report.settings:
        common.out.print(table)
    for warning in report.warnings:
        common.out.print(f"WARNING  {warning}", highlight=False, markup=False)
    for c in report.checks:
        mark = "ok      " if c["ok"] else "PROBLEM "
        common.out.print(f"{mark} {c['check']}: {c['detail']}", highlight=False, markup=False)


def shown(value: Any, info: Any = None) -> str:
    """A setting's value as the operator writes it: `a,b`, `true`, `k:v`; a computed
    default as the docs name it (`max(8, workers)`)."""
    extra = getattr(info, "json_schema_extra", None)
    if isinstance(extra, dict) and isinstance(extra.get("x-default"), str):
        default = info.default
        if value == default or (isinstance(default, tuple) and value == list(default)):
            return "" if extra["x-default"].startswith("(") else str(extra["x-default"])
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple) and any(isinstance(v, dict) for v in value):
        return json.dumps(value)  # the transforms
    if isinstance(value, list | tuple):
        return ",".join(shown(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k}:{shown(v)}" for k, v in value.items())
    return str(value)
