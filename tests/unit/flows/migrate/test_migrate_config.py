"""`es-sink migrate config`: connector configurations written after Confluent's
documentation (tests/support/data/connect/), translated option by option, and the settings it
prints accepted by `es-sink check --offline`. No service: the worker's REST API is read in
tests/integration/test_migrate_connect.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from flows.cli.migrate import check_settings
from flows.migrate.connector import Connector, from_json, parse_properties, read_file
from flows.migrate.render import yaml_text
from flows.migrate.report import DEFAULT, MAPPED, NO_EFFECT, UNSUPPORTED
from flows.migrate.translate import Migration, java_regex, translate
from tests.support import paths

DATA = paths.DATA / "connect"
SECRETS = ("s3cret", "changeme", "sr-secret", "trustpass", "sr-user:")


def migrate(name: str, worker: str | None = None, **partitions: int) -> Migration:
    connector = read_file(str(DATA / name))
    if worker:
        connector.worker = parse_properties((DATA / worker).read_text())
    return translate(connector, {k.replace("_", "-"): v for k, v in partitions.items()} or None)


def status(m: Migration, option: str) -> str:
    found = [r.status for r in m.rows if r.option == option]
    assert len(found) == 1, f"{option}: {found} in {[r.option for r in m.rows]}"
    return found[0]


def row_of(m: Migration, option: str) -> Any:
    return next(r for r in m.rows if r.option == option)


def settings_of(m: Migration) -> dict[str, Any]:
    parsed = yaml.safe_load(yaml_text(m))
    assert isinstance(parsed, dict)
    return parsed


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})


# ------------------------------------------------------------------ reading a connector


def test_properties_as_java_reads_them() -> None:
    text = (
        "# comment\n! also a comment\nname = orders\n"
        "topics:a,b\nconnection.url http://es:9200\n"
        "transforms.r.replacement=\\$1-x\\\n    -y\n"
        "key\\=with\\:sep=v\nunicode=caf\\u00e9\nempty=\n"
    )
    assert parse_properties(text) == {
        "name": "orders",
        "topics": "a,b",
        "connection.url": "http://es:9200",
        "transforms.r.replacement": "$1-x-y",
        "key=with:sep": "v",
        "unicode": "café",
        "empty": "",
    }


def test_json_with_or_without_the_wrapper() -> None:
    wrapped = from_json({"name": "n", "config": {"topics": "t", "tasks.max": 2}}, "x")
    assert (wrapped.name, wrapped.config) == ("n", {"topics": "t", "tasks.max": "2"})
    bare = from_json({"name": "m", "topics": "t", "key.ignore": True}, "x")
    assert (bare.name, bare.config["key.ignore"]) == ("m", "true")


def test_java_regexes_with_named_groups() -> None:
    assert java_regex("events-(?<region>[a-z]+)") == "events-(?P<region>[a-z]+)"
    assert java_regex("\\p{Alpha}+") is None


# ------------------------------------------------------------------ the configurations


def test_quickstart_with_its_worker() -> None:
    m = migrate("quickstart.properties", worker="connect-standalone.properties")
    s = settings_of(m)
    assert s["doc_id"] == "coordinates"
    assert s["doc_id_separator"] == "+"
    assert s["es_index_naming"] == "connect"
    assert s["value_format"] == "connect-json"  # the worker's JsonConverter, schemas on
    assert s["key_format"] == "bytes"  # keys are not read
    assert s["kafka_bootstrap_servers"] == "localhost:9092"
    assert s["on_null_value"] == "fail"  # the connector's default FAIL
    assert s["es_hosts"] == "http://localhost:9200"
    assert status(m, "type.name") == NO_EFFECT
    assert status(m, "schema.ignore") == UNSUPPORTED  # it made mappings from schemas
    assert [r.option for r in m.unsupported()] == ["schema.ignore"]


def test_without_the_worker_the_converters_are_unknown() -> None:
    m = migrate("quickstart.properties")
    assert status(m, "value.converter") == UNSUPPORTED
    # key.ignore=true: the keys are never read, so the worker's key converter is moot
    assert status(m, "key.converter") == NO_EFFECT
    assert m.settings["key_format"] == "bytes"
    assert "kafka_bootstrap_servers: the worker's bootstrap.servers" in yaml_text(m)


def test_an_inherited_key_converter_of_ignored_keys_does_not_fail_the_migration() -> None:
    config = {k: v for k, v in BASE.items() if k != "key.converter"}
    m = translate(Connector("t", {**config, "key.ignore": "true"}, "test"))
    assert status(m, "key.converter") == NO_EFFECT
    assert m.faithful  # migrate config exits 0
    assert check_settings(m, yaml_text(m)) == []
    # keys the ids are made of: the worker's converter must be known
    m = translate(Connector("t", config, "test"))
    assert status(m, "key.converter") == UNSUPPORTED


def test_keyed_documents() -> None:
    m = migrate("keyed.json")
    s = settings_of(m)
    assert "doc_id" not in s  # DOC_ID=key, the default
    assert s["doc_id_separator"] == "+"  # a null key: topic+partition+offset
    assert "key_format" not in s  # string, the default
    assert "version" not in s  # partition counts unknown: writes kept in order instead
    assert status(m, "external.version.header") == MAPPED
    assert "VERSION=none" in row_of(m, "external.version.header").setting
    assert m.faithful


def test_keyed_documents_of_single_partition_topics_are_versioned_by_offset() -> None:
    m = migrate("keyed.json", customers=1)
    assert settings_of(m)["version"] == "offset"
    assert "version" not in settings_of(migrate("keyed.json", customers=3))


def test_upsert_with_tombstone_deletes() -> None:
    m = migrate("upsert-deletes.json")
    s = settings_of(m)
    assert s["write_method"] == "upsert"
    assert s["es_retry_on_conflict"] == 2  # min(max.in.flight.requests, 5)
    assert s["es_max_in_flight"] == 2
    assert s["on_null_value"] == "delete"
    assert s["key_format"] == "json"
    assert s["es_request_timeout_s"] == 30
    # the credentials in the URL: the user in the file, the password named only
    assert s["es_hosts"] == "https://es.example.com:9243"
    assert s["es_username"] == "elastic"
    assert m.environment == {"ES_PASSWORD": "connection.url's password"}
    assert "version" not in s  # upserts are not versioned
    assert m.faithful


def test_tombstones_delete_and_versions_come_from_a_header() -> None:
    m = migrate("tombstones.json")
    s = settings_of(m)
    assert s["on_null_value"] == "delete"
    assert s["version"] == "header:version"
    assert status(m, "behavior.on.null.values") == MAPPED
    assert m.faithful


def test_data_streams() -> None:
    m = migrate("data-stream.json")
    s = settings_of(m)
    assert s["es_data_stream"] is True
    assert s["es_index"] == "logs-myapp-{topic}"  # App-Logs: logs-myapp-app-logs
    assert s["es_index_naming"] == "connect"
    assert s["es_timestamp_field"] == "event_time"
    assert s["doc_id"] == "coordinates"
    assert (s["bulk_max_actions"], s["bulk_linger_ms"], s["bulk_max_bytes"]) == (5000, 50, 10485760)
    assert m.environment == {"ES_PASSWORD": "connection.password"}
    assert "es_password" not in s
    assert m.faithful


def test_a_data_stream_namespace_cut_to_100_characters_is_mapped_exactly() -> None:
    long = "T" * 120
    config = {"topics": long, "connection.url": "http://es:9200", "key.ignore": "true",
              "schema.ignore": "true", "data.stream.type": "logs",
              "data.stream.dataset": "app", "key.converter": "x.StringConverter",
              "value.converter": "org.apache.kafka.connect.json.JsonConverter"}  # fmt: skip
    m = translate(Connector("ds", config, "test"))
    assert m.settings["es_index_map"] == {long: "logs-app-" + "t" * 100}


def test_dead_letters_with_context_headers() -> None:
    m = migrate("dlq.json")
    s = settings_of(m)
    assert s["dlq_topic"] == "dlq-orders"
    assert s["errors_tolerance"] == "all"
    assert s["on_null_value"] == "dlq"  # the connector reports ignored tombstones too
    for option in ("errors.tolerance", "drop.invalid.message", "behavior.on.malformed.documents",
                   "errors.deadletterqueue.context.headers.enable"):  # fmt: skip
        assert status(m, option) == MAPPED, option
    for option in ("errors.log.enable", "errors.log.include.messages", "errors.retry.timeout",
                   "errors.deadletterqueue.topic.replication.factor"):  # fmt: skip
        assert status(m, option) == NO_EFFECT, option
    assert m.faithful


def test_avro_through_a_registry_with_basic_auth() -> None:
    m = migrate("avro.json")
    s = settings_of(m)
    assert s["value_format"] == "avro"
    assert s["schema_registry_url"] == "https://schema-registry:8081"
    assert s["schema_registry_config"] == {"basic.auth.credentials.source": "USER_INFO"}
    assert m.environment == {
        "SCHEMA_REGISTRY_CONFIG_BASIC_AUTH_USER_INFO": "value.converter.basic.auth.user.info"
    }
    assert status(m, "value.converter.enhanced.avro.schema.support") == NO_EFFECT
    assert [r.option for r in m.unsupported()] == ["schema.ignore"]


def test_a_transform_chain() -> None:
    m = migrate("transforms.json")
    s = settings_of(m)
    assert s["kafka_topics_regex"] == "events-(?P<region>[a-z]+)"
    assert s["transforms"] == [
        {"type": "filter", "header": "test-traffic"},
        {"type": "key_from_field", "field": "event_id"},
        {"type": "drop", "fields": ["debug"]},
        {"type": "rename", "fields": {"ts": "timestamp", "usr": "user"}},
        {"type": "insert_field", "field": "kafka_topic", "from": "topic"},
        {"type": "insert_field", "field": "kafka_offset", "from": "offset"},
        {"type": "insert_field", "field": "pipeline", "value": "connect"},
        {"type": "route", "topic_regex": "events-(.*)", "replacement": "Events_$1"},
    ]
    for name in ("dropTest", "createKey", "extractId", "cleanup", "meta", "route"):
        assert status(m, f"transforms.{name}") == MAPPED, name
    assert status(m, "predicates.isTest") == MAPPED
    assert status(m, "flush.synchronously") == NO_EFFECT
    assert m.faithful


def test_debezium_change_events() -> None:
    m = migrate("debezium.json")
    s = settings_of(m)
    assert s["transforms"] == [
        {"type": "unwrap", "id_fields": ["id"], "fields": ["op", "source.table", "source.ts_ms"]},
        {"type": "rename", "fields": {"__source_table": "__table"}},
    ]
    assert s["key_format"] == "connect-json"
    assert status(m, "transforms.unwrap") == MAPPED
    assert status(m, "transforms.key") == MAPPED  # read with unwrap: the id field
    assert m.faithful


def test_debezium_deletes_the_connector_never_applied_are_dropped() -> None:
    config = dict(read_file(str(DATA / "debezium.json")).config)
    del (
        config["transforms.unwrap.drop.tombstones"],
        config["transforms.unwrap.delete.handling.mode"],
    )
    m = translate(Connector("cdc", config, "test"))  # delete.handling.mode=drop, the default
    assert m.settings["transforms"][0] == {"type": "filter", "field": "op", "value": "d"}
    config["transforms.unwrap.delete.handling.mode"] = "rewrite"
    m = translate(Connector("cdc", config, "test"))
    assert m.settings["transforms"][0]["soft_delete"] == "__deleted"


def test_what_cannot_be_carried_over_is_named_with_the_nearest_equivalent() -> None:
    m = migrate("unsupported.json")
    unsupported = {r.option: r.note for r in m.unsupported()}
    assert set(unsupported) == {
        "errors.tolerance",
        "behavior.on.malformed.documents",
        "key.converter",
        "kerberos.user.principal",
        "kerberos.keytab.path",
        "elastic.https.ssl.truststore.location",
        "topic.key.ignore",
        "compact.map.entries",
        "transforms.cast",
        "transforms.flat",
        "some.typo",
    }
    assert "keytool -exportcert" in unsupported["elastic.https.ssl.truststore.location"]
    assert "two flows" in unsupported["topic.key.ignore"]
    assert "python transform" in unsupported["transforms.cast"]
    assert "nearest is none" in unsupported["errors.tolerance"]
    assert not m.faithful


# ------------------------------------------------------------------ the settings it prints


CONFIGS = sorted(p.name for p in DATA.iterdir() if p.name != "connect-standalone.properties")


@pytest.mark.parametrize("name", CONFIGS)
def test_every_option_has_one_row_and_the_settings_pass_the_offline_check(name: str) -> None:
    worker = "connect-standalone.properties" if name.endswith(".properties") else None
    m = migrate(name, worker=worker)
    options = [r.option for r in m.rows]
    config = read_file(str(DATA / name)).config
    # an SMT or predicate is one row, `transforms.<name>` (its options in the value)
    missing = [o for o in config if o not in options and not o.startswith(("transforms", "pred"))]
    assert missing == []
    assert len(options) == len(set(options))
    assert {r.status for r in m.rows} <= {MAPPED, DEFAULT, NO_EFFECT, UNSUPPORTED}
    assert check_settings(m, yaml_text(m)) == []


@pytest.mark.parametrize("name", ["data-stream.json", "avro.json", "upsert-deletes.json"])
def test_es_sink_check_offline_passes_on_the_printed_file(name: str, tmp_path: Path) -> None:
    path = tmp_path / "es.yaml"
    result = run("migrate", "config", str(DATA / name), "--output", str(path))
    assert result.exit_code in (0, 1), result.output
    named = json.loads(run("migrate", "config", str(DATA / name), "--json").stdout)["environment"]
    assert named  # each of them has a secret, which the file names but does not hold
    assert f"#   {next(iter(named))}" in path.read_text()
    check = run(
        "check", "--offline", env={"ES_SINK_CONFIG": str(path), **dict.fromkeys(named, "x")}
    )
    assert check.exit_code == 0, check.output


def test_the_command_prints_yaml_on_stdout_the_table_on_stderr_and_no_secret() -> None:
    result = run("migrate", "config", str(DATA / "avro.json"))
    assert result.exit_code == 1  # schema.ignore=false
    assert yaml.safe_load(result.stdout)["value_format"] == "avro"
    assert "schema.ignore" in result.stderr
    assert "cannot be carried over faithfully: schema.ignore" in result.stderr
    for name in CONFIGS:
        out = run("migrate", "config", str(DATA / name))
        both = out.stdout + out.stderr
        leaked = [s for s in SECRETS if s in both]
        assert leaked == [], name
        js = run("migrate", "config", str(DATA / name), "--json")
        assert [s for s in SECRETS if s in js.stdout] == [], name


def test_json_output() -> None:
    result = run("migrate", "config", str(DATA / "keyed.json"), "--json")
    assert result.exit_code == 0
    body = json.loads(result.stdout)
    assert body["connector"] == "customers-es"
    assert body["faithful"] is True
    assert yaml.safe_load(body["yaml"])["kafka_topics"] == "customers"
    row = next(r for r in body["options"] if r["option"] == "key.ignore")
    assert set(row) == {"option", "value", "status", "setting", "note"}


def test_a_configuration_the_flow_refuses_is_reported() -> None:
    config = {"topics": "t", "connection.url": "http://es:9200", "key.ignore": "false",
              "behavior.on.null.values": "delete", "schema.ignore": "true",
              "key.converter": "org.apache.kafka.connect.storage.StringConverter",
              "value.converter": "org.apache.kafka.connect.json.JsonConverter",
              "transforms": "day", "transforms.day.type":
              "org.apache.kafka.connect.transforms.TimestampRouter"}  # fmt: skip
    m = translate(Connector("x", config, "test"))
    problems = check_settings(m, yaml_text(m))
    assert problems and "a route transform cannot give its delete" in problems[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "SOURCE: a connector's JSON"),
        (("--connect-url", "http://w:8083"), "--connect-url and --connector go together"),
        (("/nonexistent.json",), "cannot read /nonexistent.json"),
    ],
)
def test_bad_usage(args: tuple[str, ...], message: str) -> None:
    result = run("migrate", "config", *args)
    assert result.exit_code == 2
    assert message in result.stderr


# ------------------------------------------------------------------ one option at a time

BASE = {
    "connector.class": "io.confluent.connect.elasticsearch.ElasticsearchSinkConnector",
    "topics": "orders",
    "connection.url": "http://es:9200",
    "schema.ignore": "true",
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false",
}
JSON_VALUES = "org.apache.kafka.connect.json.JsonConverter"
SMT = "org.apache.kafka.connect.transforms."


@pytest.mark.parametrize(
    ("options", "option", "wanted_status", "settings"),
    [
        ({"use.autogenerated.ids": "true"}, "use.autogenerated.ids", MAPPED, {"doc_id": "none"}),
        (
            {
                "external.resource.usage": "INDEX",
                "topic.to.external.resource.mapping": "orders:orders-v2",
            },
            "topic.to.external.resource.mapping",
            MAPPED,
            {"es_index_map": {"orders": "orders-v2"}},
        ),
        (
            {
                "external.resource.usage": "ALIAS_DATASTREAM",
                "key.ignore": "true",
                "topic.to.external.resource.mapping": "orders:logs-orders-default",
            },
            "external.resource.usage",
            MAPPED,
            {"es_data_stream": True},
        ),
        (
            {"topic.index.map": "orders:orders-2024"},
            "topic.index.map",
            MAPPED,
            {"es_index_map": {"orders": "orders-2024"}},
        ),
        ({"proxy.host": "proxy", "proxy.port": "3128"}, "proxy.host", UNSUPPORTED, {}),
        ({"proxy.port": "3128"}, "proxy.port", NO_EFFECT, {}),
        (
            {
                "elastic.security.protocol": "SSL",
                "elastic.https.ssl.truststore.type": "PEM",
                "elastic.https.ssl.truststore.location": "/etc/ca.pem",
            },
            "elastic.https.ssl.truststore.location",
            MAPPED,
            {"es_ca_certs": "/etc/ca.pem"},
        ),
        (
            {"elastic.https.ssl.endpoint.identification.algorithm": ""},
            "elastic.https.ssl.endpoint.identification.algorithm",
            UNSUPPORTED,
            {},
        ),
        (
            {"consumer.override.auto.offset.reset": "latest"},
            "consumer.override.auto.offset.reset",
            MAPPED,
            {"kafka_auto_offset_reset": "latest"},
        ),
        (
            {"consumer.override.max.poll.records": "50"},
            "consumer.override.max.poll.records",
            NO_EFFECT,
            {},
        ),
        (
            {"consumer.override.fetch.max.wait.ms": "100"},
            "consumer.override.fetch.max.wait.ms",
            MAPPED,
            {"kafka_config": {"fetch.wait.max.ms": "100"}},
        ),
        (
            {
                "consumer.override.sasl.jaas.config": "org.apache.kafka.common.security.plain."
                'PlainLoginModule required username="sink" password="pw";'
            },
            "consumer.override.sasl.jaas.config",
            MAPPED,
            {"kafka_config": {"sasl.username": "sink"}},
        ),
        ({"max.buffered.records": "50000"}, "max.buffered.records", NO_EFFECT, {}),
        ({"flush.timeout.ms": "600000"}, "flush.timeout.ms", NO_EFFECT, {}),
        ({"max.retries": "10"}, "max.retries", NO_EFFECT, {}),
        ({"connection.timeout.ms": "5000"}, "connection.timeout.ms", NO_EFFECT, {}),
        ({"bulk.size.bytes": "-1"}, "bulk.size.bytes", NO_EFFECT, {}),
        ({"retry.backoff.ms": "500"}, "retry.backoff.ms", MAPPED, {"es_retry_initial_ms": 500}),
        (
            {"connection.compression": "true"},
            "connection.compression",
            MAPPED,
            {"es_compress": True},
        ),
        ({"value.converter.unheard.of": "1"}, "value.converter.unheard.of", UNSUPPORTED, {}),
        ({"topic.schema.ignore": "orders", "schema.ignore": "false"}, "schema.ignore", MAPPED, {}),
        (
            {
                "errors.tolerance": "all",
                "drop.invalid.message": "true",
                "behavior.on.malformed.documents": "ignore",
                "errors.log.enable": "true",
                "errors.log.include.messages": "true",
            },
            "errors.tolerance",
            MAPPED,
            {"errors_tolerance": "log", "errors_log_values": True},
        ),
        (
            {"behavior.on.null.values": "delete", "key.ignore": "true"},
            "behavior.on.null.values",
            MAPPED,
            {},
        ),
    ],
)
def test_single_options(
    options: dict[str, str], option: str, wanted_status: str, settings: dict[str, Any]
) -> None:
    m = translate(Connector("t", {**BASE, **options}, "test"))
    assert status(m, option) == wanted_status, row_of(m, option)
    for key, value in settings.items():
        assert m.settings[key] == value, key
    assert "pw" not in json.dumps(m.settings)
    if m.faithful:
        assert check_settings(m, yaml_text(m)) == []


def chain(*smts: dict[str, str], **options: str) -> Migration:
    config = {**BASE, **options, "transforms": ",".join(f"s{i}" for i in range(len(smts)))}
    for i, smt in enumerate(smts):
        config.update({f"transforms.s{i}.{k}": v for k, v in smt.items()})
    return translate(Connector("t", config, "test"))


@pytest.mark.parametrize(
    ("smts", "options", "statuses", "entries"),
    [
        (
            [{"type": SMT + "HoistField$Value", "field": "line"}],
            {"value.converter": "org.apache.kafka.connect.storage.StringConverter"},
            [MAPPED],
            [],
        ),
        ([{"type": SMT + "HoistField$Value", "field": "doc"}], {}, [UNSUPPORTED], []),
        (
            [{"type": SMT + "MaskField$Value", "fields": "ssn", "replacement": "xxx"}],
            {},
            [MAPPED],
            [{"type": "mask", "fields": ["ssn"], "replacement": "xxx"}],
        ),
        ([{"type": SMT + "MaskField$Value", "fields": "ssn"}], {}, [UNSUPPORTED], None),
        (
            [{"type": SMT + "TimestampRouter", "timestamp.format": "yyyy-MM-dd'T'HH"}],
            {},
            [UNSUPPORTED],
            [],
        ),
        (
            [
                {"type": SMT + "TimestampRouter"},
                {"type": SMT + "RegexRouter", "regex": "(.*)", "replacement": "x-$1"},
            ],
            {},
            [MAPPED, UNSUPPORTED],
            [{"type": "route", "index": "{topic}-{yyyyMMdd}"}],
        ),
        ([{"type": SMT + "Filter"}], {}, [MAPPED], [{"type": "filter", "topic": ".*"}]),
        (
            [{"type": SMT + "Filter", "predicate": "tomb", "negate": "true"}],
            {"predicates": "tomb", "predicates.tomb.type": SMT + "predicates.RecordIsTombstone"},
            [MAPPED],
            [{"type": "filter", "tombstone": True, "negate": True}],
        ),
        (
            [{"type": SMT + "Filter", "predicate": "t"}],
            {
                "predicates": "t",
                "predicates.t.type": SMT + "predicates.TopicNameMatches",
                "predicates.t.pattern": "test-.*",
            },
            [MAPPED],
            [{"type": "filter", "topic": "test-.*"}],
        ),
        (
            [{"type": SMT + "ReplaceField$Value", "exclude": "a", "predicate": "t"}],
            {
                "predicates": "t",
                "predicates.t.type": SMT + "predicates.HasHeaderKey",
                "predicates.t.name": "h",
            },
            [UNSUPPORTED],
            [],
        ),
        (
            [{"type": SMT + "InsertField$Value", "timestamp.field": "ts!"}],
            {},
            [MAPPED],
            [{"type": "insert_field", "field": "ts", "from": "timestamp", "format": "epoch_ms"}],
        ),
        (
            [{"type": SMT + "InsertField$Value", "topic.field": "kafka.topic"}],
            {},
            [UNSUPPORTED],
            [],
        ),
        (
            [
                {
                    "type": SMT + "ReplaceField$Value",
                    "include": "a,b",
                    "renames": "a:x",
                    "blacklist": "b",
                }
            ],
            {},
            [MAPPED],
            [
                {"type": "keep", "fields": ["a", "b"]},
                {"type": "drop", "fields": ["b"]},
                {"type": "rename", "fields": {"a": "x"}},
            ],
        ),
        ([{"type": SMT + "ReplaceField$Value", "renames": "a:b,b:a"}], {}, [UNSUPPORTED], []),
        ([{"type": SMT + "ExtractField$Key", "field": "id"}], {}, [UNSUPPORTED], []),
        (
            [{"type": SMT + "ExtractField$Key", "field": "id"}],
            {"key.ignore": "true"},
            [NO_EFFECT],
            [],
        ),
        ([{"type": SMT + "ValueToKey", "fields": "id"}], {}, [UNSUPPORTED], []),
        ([{"type": SMT + "Cast$Value", "spec": "n:int32"}], {}, [UNSUPPORTED], []),
        ([{"type": SMT + "Flatten$Value"}], {}, [UNSUPPORTED], []),
        (
            [{"type": SMT + "InsertHeader", "header": "h", "value.literal": "v"}],
            {},
            [NO_EFFECT],
            [],
        ),
        (
            [
                {
                    "type": SMT + "TimestampConverter$Value",
                    "field": "t",
                    "target.type": "unix",
                    "unix.precision": "seconds",
                }
            ],
            {},
            [MAPPED],
            [{"type": "timestamp_convert", "field": "t", "to": "epoch_s"}],
        ),
        ([{"type": "com.example.MySmt"}], {}, [UNSUPPORTED], []),
    ],
)
def test_smts(
    smts: list[dict[str, str]],
    options: dict[str, str],
    statuses: list[str],
    entries: list[dict[str, Any]] | None,
) -> None:
    m = chain(*smts, **options)
    assert [status(m, f"transforms.s{i}") for i in range(len(smts))] == statuses
    if entries is not None:
        assert m.settings.get("transforms", []) == entries
    if m.faithful:
        assert check_settings(m, yaml_text(m)) == []


def test_hoisting_string_values_names_their_field() -> None:
    m = chain(
        {"type": SMT + "HoistField$Value", "field": "line"},
        **{"value.converter": "org.apache.kafka.connect.storage.StringConverter"},
    )
    assert (m.settings["value_format"], m.settings["value_field"]) == ("string", "line")


def test_the_workers_consumer_settings_and_converters_are_inherited() -> None:
    config = {k: v for k, v in BASE.items() if "converter" not in k}
    worker = {
        "bootstrap.servers": "k1:9092,k2:9092",
        "consumer.auto.offset.reset": "latest",
        "value.converter": JSON_VALUES,
        "value.converter.schemas.enable": "false",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    }
    m = translate(Connector("t", config, "test", worker))
    assert m.settings["kafka_bootstrap_servers"] == "k1:9092,k2:9092"
    assert m.settings["kafka_auto_offset_reset"] == "latest"
    assert row_of(m, "worker value.converter").setting == "VALUE_FORMAT=json"  # the default
    assert m.faithful


def test_a_connector_from_stdin() -> None:
    body = json.dumps({"name": "x", "config": BASE})
    result = CliRunner().invoke(app, ["migrate", "config", "-"], input=body)
    assert result.exit_code == 0, result.stderr
    assert yaml.safe_load(result.stdout)["kafka_group_id"] == "es-sink-x"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://elastic:changeme@es:9200", "http://elastic:***@es:9200"),
        ("elastic:changeme@es:9200", "elastic:***@es:9200"),  # no scheme: printed as it was
        ("http://u:p@[es", "http://u:***@[es"),  # urllib refuses it: printed as it was
        ("http://es:9200/a@b", "http://es:9200/a@b"),  # no credentials
    ],
)
def test_a_connection_url_never_shows_its_password(url: str, shown: str) -> None:
    from flows.migrate.connector import masked_url

    assert masked_url(url) == shown
    assert "changeme" not in masked_url(url, drop=True) and ":p@" not in masked_url(url, drop=True)


BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"


def test_bytes_keys_the_ids_are_made_of_are_not_carried_over() -> None:
    # The connector refuses a bytes key as an id (a DataException per keyed record).
    m = translate(Connector("t", {**BASE, "key.converter": BYTES}, "test"))
    assert status(m, "key.converter") == UNSUPPORTED
    assert "refuses a bytes key" in row_of(m, "key.converter").note
    assert m.settings["key_format"] == "bytes"  # the flow dead-letters them (ActionError)
    assert not m.faithful
    # ignored keys are never read: any converter does
    m = translate(Connector("t", {**BASE, "key.converter": BYTES, "key.ignore": "true"}, "test"))
    assert status(m, "key.converter") == MAPPED
    assert m.faithful


@pytest.mark.parametrize("dlq", [None, "dlq-orders"])
def test_a_null_key_is_a_failed_record_as_the_connectors_data_exception(dlq: str | None) -> None:
    # The connector fails a keyless record (key.ignore=false) whether or not it has a
    # dead-letter topic; the flow used to index it under topic+partition+offset without one.
    options = {"errors.deadletterqueue.topic.name": dlq} if dlq else {}
    m = translate(Connector("t", {**BASE, **options}, "test"))
    assert m.settings["on_null_key"] == "fail"
    assert status(m, "key.ignore") == MAPPED
    assert "a tombstone without a key is skipped" in row_of(m, "key.ignore").note
    assert check_settings(m, yaml_text(m)) == []


@pytest.mark.parametrize(
    ("converter", "wanted"),
    [
        ("org.apache.kafka.connect.storage.SimpleHeaderConverter", DEFAULT),
        ("org.apache.kafka.connect.storage.StringConverter", MAPPED),
        ("org.apache.kafka.connect.converters.ByteArrayConverter", UNSUPPORTED),
        ("org.apache.kafka.connect.json.JsonConverter", UNSUPPORTED),
    ],
)
def test_the_header_converter_of_a_version_header(converter: str, wanted: str) -> None:
    # The connector reads external.version.header through header.converter: one that does
    # not give the header's text changes its versions, which the flow cannot follow.
    options = {"external.version.header": "v", "header.converter": converter}
    m = translate(Connector("t", {**BASE, **options}, "test"))
    assert m.settings["version"] == "header:v"
    assert status(m, "header.converter") == wanted, row_of(m, "header.converter")
    if wanted == UNSUPPORTED:
        assert "reads the version header v through" in row_of(m, "header.converter").note
        assert not m.faithful
    # without a version header it decides nothing the connector writes
    m = translate(Connector("t", {**BASE, "header.converter": converter}, "test"))
    assert status(m, "header.converter") in (DEFAULT, NO_EFFECT)


@pytest.mark.parametrize(
    ("options", "policy"),
    [
        # a reporter and errors.tolerance=none: the report of a skipped tombstone stops
        # the connector's task
        ({"errors.deadletterqueue.topic.name": "dlq-orders"}, "fail"),
        ({"errors.log.enable": "true"}, "fail"),
        # errors.tolerance=all: reported and skipped
        ({"errors.deadletterqueue.topic.name": "dlq-orders", "errors.tolerance": "all",
          "drop.invalid.message": "true", "behavior.on.malformed.documents": "ignore"}, "dlq"),
        ({}, None),  # no reporter: skipped (ON_NULL_VALUE=ignore, the default)
    ],
)  # fmt: skip
def test_ignored_tombstones_with_a_reporter(options: dict[str, str], policy: str | None) -> None:
    config = {**BASE, "behavior.on.null.values": "ignore", **options}
    m = translate(Connector("t", config, "test"))
    assert m.settings.get("on_null_value") == policy, row_of(m, "behavior.on.null.values")
    assert status(m, "behavior.on.null.values") == MAPPED
