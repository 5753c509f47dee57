"""flows.config: Settings.load parses a dict of environment variables (and a YAML file)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from flows.config import Secret, Settings
from flows.config.kafka import CLIENT_DEFAULTS
from flows.errors import ConfigError

BASE = {"KAFKA_TOPICS": "orders"}


def load(**env: Any) -> Settings:
    return Settings.load({**BASE, **env})


def error(env: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        Settings.load(env)
    return str(info.value)


def error_for(**env: Any) -> str:
    return error({**BASE, **env})


def values(s: Settings) -> dict[str, Any]:
    """Every field of `s`: Settings compare by identity (per-process caches key on them)."""
    return {name: getattr(s, name) for name in type(s).model_fields}


def write_yaml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "sink.yaml"
    path.write_text(text)
    return str(path)


# ------------------------------------------------------------------------------ defaults


def test_defaults_equal_the_dataclass_defaults() -> None:
    s = load()
    assert values(s) == values(Settings(topics=("orders",)))


def test_defaults_explicitly() -> None:
    s = load()
    assert s.topics == ("orders",)
    assert s.topics_regex is None
    assert s.bootstrap_servers == "127.0.0.1:9092"
    assert s.group_id == "es-sink"
    assert s.auto_offset_reset == "earliest"
    assert s.stop_at_end is False
    assert s.consume_batch_size == 1000
    assert dict(s.kafka_config) == {}
    assert s.value_format == "json"
    assert s.key_format == "string"
    assert s.value_field == "message"
    assert s.transforms == ()
    assert s.dlq_topic is None
    assert s.errors_tolerance == "none"
    assert s.dlq_max_consecutive == 0
    assert s.dlq_max_ratio == 0.0
    assert s.dlq_ratio_min_records == 1000
    assert s.on_null_value == "ignore"
    assert s.on_null_key == "coordinates"
    assert s.es_hosts == ("http://127.0.0.1:9200",)
    assert s.es_index == "{topic}"
    assert dict(s.es_index_map) == {}
    assert s.write_method == "index"
    assert s.doc_id == "key"
    assert s.version == "none"
    assert s.external_versioning is False
    assert s.es_routing is None
    assert s.es_data_stream is False
    assert s.es_password is None
    assert s.es_api_key is None
    assert s.es_verify_certs is True
    assert s.bulk_max_actions == 5000
    assert s.bulk_max_bytes == 8 * 1024 * 1024
    assert s.bulk_linger_ms == 50
    assert s.es_retry_initial_ms == 100
    assert s.es_retry_max_ms == 10_000
    assert s.es_retry_budget_s == 0.0
    assert s.librdkafka("consumer") == {"bootstrap.servers": "127.0.0.1:9092", **CLIENT_DEFAULTS}


def test_values_are_parsed_and_typed() -> None:
    s = load(
        KAFKA_TOPICS=" a , b ,, c ",
        KAFKA_STOP_AT_END="yes",
        KAFKA_CONSUME_BATCH_SIZE="50",
        ES_VERIFY_CERTS="off",
        DLQ_MAX_RATIO="0.25",
        ES_HOSTS="http://a:9200, https://b:9243",
        ES_INDEX_MAP="orders:orders-v2, payments:pay-{yyyy.MM}",
        ERRORS_TOLERANCE="ALL",
        DLQ_TOPIC="dead",
    )
    assert s.topics == ("a", "b", "c")
    assert s.stop_at_end is True
    assert s.consume_batch_size == 50
    assert s.es_verify_certs is False
    assert s.dlq_max_ratio == 0.25
    assert s.es_hosts == ("http://a:9200", "https://b:9243")
    assert dict(s.es_index_map) == {"orders": "orders-v2", "payments": "pay-{yyyy.MM}"}
    assert s.errors_tolerance == "all"


def test_empty_values_count_as_unset() -> None:
    s = load(KAFKA_GROUP_ID="", BULK_MAX_ACTIONS="  ", ES_SINK_CONFIG="")
    assert s.group_id == "es-sink"
    assert s.bulk_max_actions == 5000


def test_unknown_environment_variables_are_ignored() -> None:
    assert values(load(PATH="/bin", ES_SOMETHING_ELSE="x")) == values(load())


# -------------------------------------------------------------------------- enum settings


@pytest.mark.parametrize(
    "name",
    [
        "VALUE_FORMAT",
        "KEY_FORMAT",
        "ERRORS_TOLERANCE",
        "ON_NULL_VALUE",
        "ON_NULL_KEY",
        "WRITE_METHOD",
        "KAFKA_AUTO_OFFSET_RESET",
        "DOC_ID",
        "VERSION",
        "ES_ROUTING",
    ],
)
def test_enum_settings_reject_bad_values_naming_the_setting(name: str) -> None:
    msg = error_for(DLQ_TOPIC="dead", **{name: "bogus"})
    assert msg.startswith(f"{name}:"), msg
    assert "bogus" in msg


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("KAFKA_STOP_AT_END", "maybe"),
        ("ES_DATA_STREAM", "2"),
        ("ES_VERIFY_CERTS", "sure"),
        ("KAFKA_CONSUME_BATCH_SIZE", "ten"),
        ("KAFKA_CONSUME_BATCH_SIZE", "0"),
        ("BULK_MAX_ACTIONS", "1.5"),
        ("BULK_MAX_BYTES", "100"),
        ("DLQ_MAX_CONSECUTIVE", "-1"),
        ("DLQ_MAX_RATIO", "1.5"),
        ("DLQ_MAX_RATIO", "lots"),
        ("ES_REQUEST_TIMEOUT_S", "0"),
        ("ES_RETRY_INITIAL_MS", "0"),
        ("ES_INDEX_MAP", "orders"),
        ("GC_INTERVAL_S", "10000"),
        ("GC_INTERVAL_MAX_S", "40000"),
    ],
)
def test_typed_settings_reject_bad_values_naming_the_setting(name: str, value: str) -> None:
    assert error_for(**{name: value}).startswith(f"{name}:")


def test_enum_values_are_case_insensitive() -> None:
    s = load(VALUE_FORMAT="Connect-JSON", WRITE_METHOD="CREATE")
    assert (s.value_format, s.write_method) == ("connect-json", "create")


def test_retry_max_below_initial_refused() -> None:
    msg = error_for(ES_RETRY_INITIAL_MS="500", ES_RETRY_MAX_MS="100")
    assert msg.startswith("ES_RETRY_MAX_MS:")


# ------------------------------------------------------------------------------- topics


def test_topics_required() -> None:
    msg = error({})
    assert msg.startswith("KAFKA_TOPICS:")
    assert "required" in msg
    assert "KAFKA_TOPICS_REGEX" in msg


def test_topics_only_commas_counts_as_missing() -> None:
    assert error({"KAFKA_TOPICS": " , ,"}).startswith("KAFKA_TOPICS:")


def test_topics_regex_alone_is_enough() -> None:
    s = Settings.load({"KAFKA_TOPICS_REGEX": "orders-.*"})
    assert s.topics == ()
    assert s.topics_regex == "orders-.*"


def test_topics_and_regex_are_exclusive() -> None:
    msg = error({"KAFKA_TOPICS": "a", "KAFKA_TOPICS_REGEX": "a.*"})
    assert msg.startswith("KAFKA_TOPICS_REGEX:")
    assert "not both" in msg


def test_bad_regex_refused() -> None:
    msg = error({"KAFKA_TOPICS_REGEX": "orders-(["})
    assert msg.startswith("KAFKA_TOPICS_REGEX:")
    assert "invalid regular expression" in msg


# ---------------------------------------------------------------------- bootstrap servers


@pytest.mark.parametrize(
    "value", ["kafka:9092", "a:1,b:2", " a:1 , b:2 ", "[::1]:9092", "10.0.0.1:19092"]
)
def test_bootstrap_servers_accepted(value: str) -> None:
    s = load(KAFKA_BOOTSTRAP_SERVERS=value)
    assert s.bootstrap_servers == value.strip()
    assert s.librdkafka("producer")["bootstrap.servers"] == value.strip()


@pytest.mark.parametrize("value", ["kafka", "kafka:", ":9092", "kafka:port", "a:1,b", "a:1,"])
def test_bootstrap_servers_refused(value: str) -> None:
    msg = error_for(KAFKA_BOOTSTRAP_SERVERS=value)
    assert msg.startswith("KAFKA_BOOTSTRAP_SERVERS:")
    assert "host:port" in msg


# ------------------------------------------------------------------ KAFKA_CONFIG_ pass-through


def test_kafka_config_pass_through() -> None:
    s = load(
        KAFKA_CONFIG_SECURITY_PROTOCOL="SASL_SSL",
        KAFKA_CONFIG_SASL_MECHANISM="PLAIN",
        KAFKA_CONFIG_FETCH_MAX_BYTES="1048576",
        SCHEMA_REGISTRY_CONFIG_BASIC_AUTH_USER_INFO="u:p",
    )
    assert dict(s.kafka_config) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "fetch.max.bytes": "1048576",
    }
    assert dict(s.schema_registry_config) == {"basic.auth.user.info": "u:p"}
    assert s.librdkafka("consumer", **{"group.id": "g"}) == {
        "bootstrap.servers": "127.0.0.1:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "fetch.max.bytes": "1048576",
        "group.id": "g",
        **CLIENT_DEFAULTS,
    }
    key = "metadata.recovery.rebootstrap.trigger.ms"  # a default the user's setting overrides
    assert load(KAFKA_CONFIG_METADATA_RECOVERY_REBOOTSTRAP_TRIGGER_MS="60000").librdkafka("admin")[
        key
    ] == ("60000")


@pytest.mark.parametrize(
    "name",
    ["KAFKA_CONFIG_GROUP_ID", "KAFKA_CONFIG_ENABLE_AUTO_COMMIT", "KAFKA_CONFIG_BOOTSTRAP_SERVERS"],
)
def test_reserved_kafka_config_refused(name: str) -> None:
    msg = error_for(**{name: "x"})
    assert msg.startswith(f"{name}:")
    assert "managed by the flow" in msg


def test_kafka_sasl_password_not_in_repr() -> None:
    s = load(KAFKA_CONFIG_SASL_PASSWORD="kafka-pw-123")
    assert s.kafka_config["sasl.password"] == "kafka-pw-123"
    assert "kafka-pw-123" not in repr(s)


def test_schema_registry_credentials_not_in_repr() -> None:
    s = load(SCHEMA_REGISTRY_CONFIG_BASIC_AUTH_USER_INFO="sr-user:sr-pw-456")
    assert s.schema_registry_config["basic.auth.user.info"] == "sr-user:sr-pw-456"
    assert "sr-pw-456" not in repr(s)
    assert "sr-pw-456" not in str(s)


# ------------------------------------------------------------------------------ YAML file


def test_yaml_file(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path,
        """
kafka_topics: [orders, payments]
kafka_group_id: from-yaml
bulk_max_actions: 250
es_data_stream: false
errors_tolerance: all
dlq_topic: dead
kafka_config:
  security.protocol: SSL
  ssl.ca.location: /ca.pem
es_index_map:
  orders: orders-v2
  payments: "pay-{yyyy.MM}"
transforms:
  - type: drop
    fields: [secret]
  - python: tests.support.sample_transforms:modify
""",
    )
    s = Settings.load({"ES_SINK_CONFIG": path})
    assert s.topics == ("orders", "payments")
    assert s.group_id == "from-yaml"
    assert s.bulk_max_actions == 250
    assert s.errors_tolerance == "all"
    assert s.dlq_topic == "dead"
    assert dict(s.kafka_config) == {"security.protocol": "SSL", "ssl.ca.location": "/ca.pem"}
    assert dict(s.es_index_map) == {"orders": "orders-v2", "payments": "pay-{yyyy.MM}"}
    assert s.transforms == (
        {"type": "drop", "fields": ["secret"]},
        {"python": "tests.support.sample_transforms:modify"},
    )


def test_environment_overrides_yaml(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path,
        """
kafka_topics: orders
kafka_group_id: from-yaml
bulk_max_actions: 250
kafka_config:
  security.protocol: SSL
  client.id: from-yaml
transforms:
  - type: drop
    fields: [x]
""",
    )
    s = Settings.load(
        {
            "ES_SINK_CONFIG": path,
            "KAFKA_GROUP_ID": "from-env",
            "KAFKA_CONFIG_SECURITY_PROTOCOL": "SASL_SSL",
            "TRANSFORMS": "tests.support.sample_transforms:modify",
        }
    )
    assert s.topics == ("orders",)
    assert s.group_id == "from-env"
    assert s.bulk_max_actions == 250
    assert dict(s.kafka_config) == {"security.protocol": "SASL_SSL", "client.id": "from-yaml"}
    assert s.transforms == ({"python": "tests.support.sample_transforms:modify"},)


def test_transforms_from_environment_are_python_entries() -> None:
    s = load(TRANSFORMS="a.b:c, d.e:f")
    assert s.transforms == ({"python": "a.b:c"}, {"python": "d.e:f"})


def test_unknown_yaml_key_refused_by_name(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "kafka_topics: orders\nbulk_max_actoins: 5\n")
    msg = error({"ES_SINK_CONFIG": path})
    assert msg.startswith("bulk_max_actoins:")
    assert "unknown setting" in msg


def test_yaml_transform_entry_without_type_refused(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "kafka_topics: orders\ntransforms:\n  - fields: [a]\n")
    assert error({"ES_SINK_CONFIG": path}).startswith("transforms[0]:")


def test_unreadable_yaml(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    msg = error({"ES_SINK_CONFIG": missing})
    assert msg.startswith("ES_SINK_CONFIG:")
    assert "cannot read" in msg
    assert missing in msg


@pytest.mark.parametrize("text", ["kafka_topics: [orders\n", "key: value: other\n", "\t- x: ]"])
def test_invalid_yaml(tmp_path: Path, text: str) -> None:
    msg = error({"ES_SINK_CONFIG": write_yaml(tmp_path, text)})
    assert msg.startswith("ES_SINK_CONFIG:")
    assert "not valid YAML" in msg


def test_yaml_must_be_a_mapping(tmp_path: Path) -> None:
    msg = error({"ES_SINK_CONFIG": write_yaml(tmp_path, "- a\n- b\n")})
    assert msg.startswith("ES_SINK_CONFIG:")
    assert "mapping" in msg


def test_empty_yaml_is_no_settings(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "")
    assert values(Settings.load({"ES_SINK_CONFIG": path, **BASE})) == values(load())


# ------------------------------------------------------------------- cross-setting checks


def test_errors_tolerance_all_needs_dlq_topic() -> None:
    msg = error_for(ERRORS_TOLERANCE="all")
    assert msg.startswith("DLQ_TOPIC:")
    assert "ERRORS_TOLERANCE=all" in msg
    assert load(ERRORS_TOLERANCE="all", DLQ_TOPIC="dead").dlq_topic == "dead"


def test_on_null_value_dlq_needs_dlq_topic() -> None:
    msg = error_for(ON_NULL_VALUE="dlq")
    assert msg.startswith("DLQ_TOPIC:")
    assert "ON_NULL_VALUE=dlq" in msg
    assert load(ON_NULL_VALUE="dlq", DLQ_TOPIC="dead").on_null_value == "dlq"


def test_on_null_key_dlq_needs_dlq_topic() -> None:
    msg = error_for(ON_NULL_KEY="dlq")
    assert msg.startswith("DLQ_TOPIC:")
    assert "ON_NULL_KEY=dlq" in msg


@pytest.mark.parametrize("fmt", ["avro", "json-schema", "protobuf"])
@pytest.mark.parametrize("name", ["VALUE_FORMAT", "KEY_FORMAT"])
def test_registry_formats_need_registry_url(name: str, fmt: str) -> None:
    msg = error_for(**{name: fmt})
    assert msg.startswith("SCHEMA_REGISTRY_URL:")
    assert f"{name}={fmt}" in msg
    s = load(**{name: fmt, "SCHEMA_REGISTRY_URL": "http://registry:8081"})
    assert s.schema_registry_url == "http://registry:8081"


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"VERSION": "offset", "WRITE_METHOD": "upsert"}, "VERSION"),
        ({"VERSION": "header:v", "WRITE_METHOD": "upsert"}, "VERSION"),
        ({"VERSION": "offset", "DOC_ID": "none"}, "VERSION"),
        ({"VERSION": "header:v", "DOC_ID": "none"}, "VERSION"),
        ({"WRITE_METHOD": "upsert", "DOC_ID": "none"}, "WRITE_METHOD"),
        ({"DOC_ID": "field:"}, "DOC_ID"),
        ({"DOC_ID": "field:a b"}, "DOC_ID"),
        ({"VERSION": "header:"}, "VERSION"),
        ({"ES_ROUTING": "field:"}, "ES_ROUTING"),
    ],
)
def test_write_combinations_refused(env: dict[str, str], name: str) -> None:
    assert error_for(**env).startswith(f"{name}:")


@pytest.mark.parametrize(
    "env",
    [
        {"VERSION": "offset", "DOC_ID": "coordinates"},
        {"VERSION": "header:v", "DOC_ID": "field:a.b"},
        {"WRITE_METHOD": "upsert", "DOC_ID": "key"},
        {"WRITE_METHOD": "create", "DOC_ID": "none"},
        {"ES_ROUTING": "key"},
        {"ES_ROUTING": "field:user.id"},
    ],
)
def test_write_combinations_accepted(env: dict[str, str]) -> None:
    s = load(**env)
    for name, value in env.items():
        assert getattr(s, name.lower()) == value


def test_derived_properties() -> None:
    s = load(DOC_ID="field:a.b", VERSION="header:x-ver")
    assert s.doc_id_field == "a.b"
    assert s.version_header == "x-ver"
    assert s.external_versioning is True
    s = load(VERSION="offset")
    assert (s.doc_id_field, s.version_header, s.external_versioning) == (None, None, True)


@pytest.mark.parametrize(
    "env",
    [
        {"VERSION": "offset", "WRITE_METHOD": "create"},
        {"VERSION": "header:v", "WRITE_METHOD": "create"},
        {"VERSION": "header:v", "ES_DATA_STREAM": "true"},
        {"VERSION": "offset", "ES_DATA_STREAM": "true"},
    ],
)
def test_external_versioning_with_create_refused(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"^(VERSION|WRITE_METHOD|ES_DATA_STREAM):"):
        load(**env)


def test_data_stream_forces_create() -> None:
    s = load(ES_DATA_STREAM="true")
    assert s.es_data_stream is True
    assert s.write_method == "create"
    assert load(ES_DATA_STREAM="true", WRITE_METHOD="create").write_method == "create"


def test_data_stream_with_empty_write_method_is_create() -> None:
    assert load(ES_DATA_STREAM="true", WRITE_METHOD="").write_method == "create"


@pytest.mark.parametrize("method", ["index", "upsert"])
def test_data_stream_refuses_an_explicit_other_write_method(method: str) -> None:
    msg = error_for(ES_DATA_STREAM="true", WRITE_METHOD=method)
    assert msg.startswith("WRITE_METHOD:")
    assert "data stream" in msg


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"ES_INDEX": "logs-{date}"}, "ES_INDEX"),
        ({"ES_INDEX": "logs-{}"}, "ES_INDEX"),
        ({"ES_INDEX": "logs-{yyyy.MMM}"}, "ES_INDEX"),
        ({"ES_INDEX": "logs-{Topic}"}, "ES_INDEX"),
        ({"ES_INDEX_MAP": "orders:o-{partition}"}, "ES_INDEX_MAP[orders]"),
    ],
)
def test_index_template_with_unknown_placeholder_refused(env: dict[str, str], name: str) -> None:
    msg = error_for(**env)
    assert msg.startswith(f"{name}:")
    assert "unknown placeholder" in msg


@pytest.mark.parametrize(
    "template", ["{topic}", "logs-{topic}-{yyyy.MM.dd}", "x-{yy}{MM}", "h-{yyyy-MM-dd-HH}"]
)
def test_index_template_accepted(template: str) -> None:
    assert load(ES_INDEX=template).es_index == template


@pytest.mark.parametrize("host", ["localhost:9200", "ftp://es:9200", "http://", "es"])
def test_es_hosts_need_scheme(host: str) -> None:
    msg = error_for(ES_HOSTS=f"http://ok:9200,{host}")
    assert msg.startswith("ES_HOSTS:")
    assert host in msg


def test_missing_index_template_file_refused(tmp_path: Path) -> None:
    assert error_for(ES_INDEX_TEMPLATE_FILE=str(tmp_path / "x.json")).startswith(
        "ES_INDEX_TEMPLATE_FILE:"
    )


# -------------------------------------------------------------------------- auth, secrets


def test_secrets_never_in_repr_or_str() -> None:
    s = load(ES_USERNAME="elastic", ES_PASSWORD="pw-s3cr3t-1")
    assert isinstance(s.es_password, Secret)
    assert s.es_password.reveal() == "pw-s3cr3t-1"
    for text in (repr(s), str(s), f"{s}", repr(s.es_password), str(s.es_password)):
        assert "pw-s3cr3t-1" not in text
    assert f"{s.es_password}" == "***"
    assert "{}".format(s.es_password) == "***"  # noqa: UP032
    assert "pw-s3cr3t-1" not in f"{s.es_password:>30}"

    s = load(ES_API_KEY="key-s3cr3t-2")
    assert s.es_api_key is not None
    assert s.es_api_key.reveal() == "key-s3cr3t-2"
    assert "key-s3cr3t-2" not in repr(s)
    assert "key-s3cr3t-2" not in str(s)

    s = load(ES_BEARER_TOKEN="tok-s3cr3t-3")
    assert "tok-s3cr3t-3" not in repr(s)


def test_secret_not_in_config_error_message() -> None:
    msg = error_for(ES_PASSWORD="pw-s3cr3t-1")
    assert msg.startswith("ES_USERNAME:")
    assert "pw-s3cr3t-1" not in msg


def test_basic_auth_needs_both() -> None:
    assert error_for(ES_USERNAME="elastic").startswith("ES_PASSWORD:")
    assert error_for(ES_PASSWORD="pw").startswith("ES_USERNAME:")
    s = load(ES_USERNAME="elastic", ES_PASSWORD="pw")
    assert s.es_username == "elastic"


@pytest.mark.parametrize(
    "env",
    [
        {"ES_USERNAME": "u", "ES_PASSWORD": "p", "ES_API_KEY": "k"},
        {"ES_API_KEY": "k", "ES_BEARER_TOKEN": "t"},
        {"ES_USERNAME": "u", "ES_PASSWORD": "p", "ES_BEARER_TOKEN": "t"},
    ],
)
def test_only_one_auth_method(env: dict[str, str]) -> None:
    msg = error_for(**env)
    assert re.match(r"^ES_API_KEY: choose one of", msg), msg


def test_secrets_lists_es_and_sensitive_kafka_and_schema_registry_values() -> None:
    s = load(
        ES_USERNAME="elastic",
        ES_PASSWORD="es-pw-s3cr3t",
        KAFKA_CONFIG_SASL_PASSWORD="kafka-pw-s3cr3t",
        KAFKA_CONFIG_SASL_USERNAME="kafka-user",
        KAFKA_CONFIG_CLIENT_ID="client-abc",
        SCHEMA_REGISTRY_CONFIG_BASIC_AUTH_USER_INFO="sr-user:sr-pw-s3cr3t",
    )
    secrets = s.secrets()
    assert "es-pw-s3cr3t" in secrets
    assert "kafka-pw-s3cr3t" in secrets
    assert "sr-user:sr-pw-s3cr3t" in secrets
    assert "client-abc" not in secrets
    assert "elastic" not in secrets


@pytest.mark.parametrize(
    ("env", "value"),
    [
        ({"ES_API_KEY": "key-s3cr3t"}, "key-s3cr3t"),
        ({"ES_BEARER_TOKEN": "tok-s3cr3t"}, "tok-s3cr3t"),
    ],
)
def test_secrets_lists_es_api_key_and_bearer_token(env: dict[str, str], value: str) -> None:
    assert value in load(**env).secrets()


def test_settings_compare_and_hash_by_identity() -> None:
    a, b = load(), load()
    assert values(a) == values(b)
    assert a != b
    assert a == a
    assert len({a, b, a}) == 2


def test_secrets_empty_without_credentials() -> None:
    assert load(KAFKA_CONFIG_CLIENT_ID="client-abc").secrets() == []


# ------------------------------------------------------- deletes and offset versioning


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"ES_ROUTING": "field:tenant"}, "ES_ROUTING"),
        ({"DOC_ID": "coordinates"}, "DOC_ID"),
        ({"DOC_ID": "field:id"}, "DOC_ID"),
        ({"DOC_ID": "none"}, "DOC_ID"),
        ({"ES_INDEX": "logs-{yyyy.MM.dd}"}, "ES_INDEX"),
        ({"ES_INDEX_MAP": "orders:orders-{yyyy.MM}"}, "ES_INDEX_MAP[orders]"),
        ({"ES_DATA_STREAM": "true"}, "ES_DATA_STREAM"),
    ],
)
def test_deletes_that_cannot_find_their_document_are_refused(
    env: dict[str, str], named: str
) -> None:
    """A tombstone has no fields and its own timestamp; these deletes would miss."""
    message = error_for(ON_NULL_VALUE="delete", **env)
    assert message.startswith(f"{named}: ")
    assert "ON_NULL_VALUE=delete" in message or "deletes" in message


@pytest.mark.parametrize(
    "entry",
    [
        "{type: route, index: 'logs-{yyyy.MM.dd}'}",
        "{type: route, index: logs, routing_field: tenant}",
        "{type: route, index: 'logs-{yyyy}', timestamp_field: ts}",
        "{type: id_from_field, field: id}",
        "{type: key_from_field, field: id}",
    ],
)
def test_deletes_with_field_routed_transforms_are_refused(tmp_path: Path, entry: str) -> None:
    path = write_yaml(tmp_path, f"transforms:\n  - {entry}\n")
    message = error({**BASE, "ES_SINK_CONFIG": path, "ON_NULL_VALUE": "delete"})
    assert message.startswith("transforms[0]: ON_NULL_VALUE=delete")


def test_deletes_that_find_their_document_are_accepted(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "transforms:\n  - {type: route, index: static-name}\n")
    s = Settings.load(
        {**BASE, "ES_SINK_CONFIG": path, "ON_NULL_VALUE": "delete", "ES_ROUTING": "key"}
    )
    assert s.on_null_value == "delete"
    assert load(ON_NULL_VALUE="delete", ES_INDEX="orders-v2").es_index == "orders-v2"


@pytest.mark.parametrize(
    "env",
    [
        {"DOC_ID": "field:id"},
        {"KAFKA_TOPICS": "a,b", "ES_INDEX": "shared"},
        {"KAFKA_TOPICS": "a,b", "ES_INDEX_MAP": "a:x,b:x"},
        {"KAFKA_TOPICS": "a,b", "ES_INDEX_MAP": "a:b-idx", "ES_INDEX": "b-idx"},
        {"KAFKA_TOPICS": "", "KAFKA_TOPICS_REGEX": "orders.*", "ES_INDEX": "orders"},
        {"KAFKA_TOPICS": "", "KAFKA_TOPICS_REGEX": "o.*", "ES_INDEX_MAP": "o1:x,o2:x"},
    ],
)
def test_offset_versions_across_partitions_are_refused(env: dict[str, str]) -> None:
    """Offsets are ordered only within a partition."""
    message = error_for(VERSION="offset", **env)
    assert message.startswith("VERSION: VERSION=offset orders writes by Kafka offset")
    assert "VERSION=none" in message


def test_offset_versions_with_a_field_routed_transform_are_refused(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "transforms:\n  - {type: id_from_field, field: id}\n")
    message = error({**BASE, "ES_SINK_CONFIG": path, "VERSION": "offset"})
    assert message.startswith("transforms[0]: VERSION=offset")


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"ES_INDEX": "one-index"},
        {"KAFKA_TOPICS": "a,b"},
        {"KAFKA_TOPICS": "a,b", "ES_INDEX": "all-{topic}"},
        {"KAFKA_TOPICS": "a,b", "ES_INDEX_MAP": "a:x,b:y"},
        {"KAFKA_TOPICS": "", "KAFKA_TOPICS_REGEX": "orders.*"},
    ],
)
def test_offset_versions_within_one_topic_per_index_are_accepted(env: dict[str, str]) -> None:
    assert load(VERSION="offset", **env).version == "offset"


def test_a_copy_builds_its_own_parts_from_its_own_values() -> None:
    """The sinks' configs are cached on a settings object; a copy with other values must not
    keep the original's (the es-sink commands copy settings with changes)."""
    s = Settings.load({"KAFKA_TOPICS": "t", "DLQ_TOPIC": "dead", "ERRORS_TOLERANCE": "all"})
    original = (s.dead_letter_config, s.es_sink_config, s.error_tolerance)
    copied = s.model_copy(update={"dlq_retry_budget_s": 99.0, "es_retry_budget_s": 77.0})
    assert copied.dead_letter_config is not None and original[0] is not None
    assert copied.dead_letter_config.retry_budget_s == 99.0
    assert copied.es_sink_config.retry.budget_s == 77.0
    assert copied.error_tolerance is not original[2]
    assert (s.dead_letter_config, s.es_sink_config, s.error_tolerance) == original
    assert s.model_copy(update={"dlq_topic": None}).dead_letter_config is None
