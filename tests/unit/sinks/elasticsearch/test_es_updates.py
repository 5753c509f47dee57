"""Partial and scripted updates, per-record actions and confined index names: how they are
encoded (`actions.ActionBuilder`), what the node's answers to them mean (`bulk.classify`,
recorded answers in tests/support/data/bulk_answers.json) and what is refused at start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from flows.config import Settings
from flows.errors import ConfigError
from sinks.elasticsearch.actions import (
    NAME_CACHE_LIMIT,
    ActionBuilder,
    ActionError,
    InvalidIndexName,
)
from sinks.elasticsearch.index_names import problem
from sinks.model import Doc, Record
from tests.support.paths import DATA

RECORDED = json.loads((DATA / "bulk_answers.json").read_text())
REC = Record("orders", 0, 7, 1_714_564_800_123, b"k1", b"{}")


def settings(**env: str) -> Settings:
    return Settings.load({"KAFKA_TOPICS": "orders", **env})


def builder(**env: str) -> ActionBuilder:
    return ActionBuilder(settings(**env).es_documents)


def encode(d: Doc | None = None, /, **env: str) -> list[Any]:
    action = builder(**env).build(d or Doc(REC, {"n": 1}, "k1"))
    assert action.data.endswith(b"\n")
    return [orjson.loads(line) for line in action.data.split(b"\n")[:-1]]


# ------------------------------------------------------------------ update and script


def test_a_script_can_get_the_record_s_coordinates() -> None:
    env = {"WRITE_METHOD": "script", "ES_SCRIPT_SOURCE": "s", "ES_SCRIPT_RECORD": "true"}
    record = {"topic": "orders", "partition": 0, "offset": 7}
    assert encode(**env)[1] == {
        "script": {"source": "s", "lang": "painless", "params": {"doc": {"n": 1}, "record": record}}
    }
    upsert = encode(**env, ON_MISSING_DOCUMENT="upsert")[1]
    assert upsert["script"]["params"] == {"doc": {"n": 1}, "record": record}
    assert upsert["upsert"] == {"n": 1}
    scripted = encode(**env, ON_MISSING_DOCUMENT="upsert", ES_SCRIPTED_UPSERT="true")[1]
    assert scripted["script"]["params"]["record"] == record and scripted["upsert"] == {}
    plain = encode(WRITE_METHOD="script", ES_SCRIPT_SOURCE="s")[1]
    assert "record" not in plain["script"]["params"]


def test_update_sends_a_partial_doc_and_retries_conflicts() -> None:
    assert encode(WRITE_METHOD="update") == [
        {"update": {"_index": "orders", "_id": "k1", "retry_on_conflict": 3}},
        {"doc": {"n": 1}},
    ]


def test_update_with_on_missing_upsert_creates_the_document() -> None:
    _, body = encode(WRITE_METHOD="update", ON_MISSING_DOCUMENT="upsert")
    assert body == {"doc": {"n": 1}, "doc_as_upsert": True}


@pytest.mark.parametrize("method", ["upsert", "update", "script"])
def test_retry_on_conflict_applies_to_every_update_method(method: str) -> None:
    env = {"WRITE_METHOD": method, "ES_RETRY_ON_CONFLICT": "7", "ES_SCRIPT_ID": "s"}
    if method != "script":
        del env["ES_SCRIPT_ID"]
    assert encode(**env)[0]["update"]["retry_on_conflict"] == 7
    assert "retry_on_conflict" not in encode(**{**env, "ES_RETRY_ON_CONFLICT": "0"})[0]["update"]


def test_script_by_id_gets_the_document_as_params_doc() -> None:
    _, body = encode(WRITE_METHOD="script", ES_SCRIPT_ID="count")
    assert body == {"script": {"id": "count", "params": {"doc": {"n": 1}}}}


def test_inline_script_with_its_language_and_the_upsert_variants() -> None:
    env = {"WRITE_METHOD": "script", "ES_SCRIPT_SOURCE": "ctx._source.n += params.doc.n"}
    script = {"source": env["ES_SCRIPT_SOURCE"], "lang": "painless", "params": {"doc": {"n": 1}}}
    assert encode(**env)[1] == {"script": script}
    assert encode(**env, ES_SCRIPT_LANG="expression")[1]["script"]["lang"] == "expression"
    upsert = encode(**env, ON_MISSING_DOCUMENT="upsert")[1]
    assert upsert == {"script": script, "upsert": {"n": 1}}  # missing: the document as it is
    scripted = encode(**env, ON_MISSING_DOCUMENT="upsert", ES_SCRIPTED_UPSERT="true")[1]
    assert scripted == {"script": script, "scripted_upsert": True, "upsert": {}}


def test_a_script_source_with_quotes_and_unicode_stays_valid_json() -> None:
    src = 'ctx._source.tag = "ü\\"x"; // \n done'
    _, body = encode(WRITE_METHOD="script", ES_SCRIPT_SOURCE=src)
    assert body["script"]["source"] == src


# ------------------------------------------------------------------ per-record actions


def doc(action: str | None = None, **fields: Any) -> Doc:
    return Doc(REC, fields.pop("source", {"n": 1}), "k1", action=action, **fields)


def test_a_per_record_action_overrides_write_method_for_that_record() -> None:
    b = builder()  # WRITE_METHOD=index
    ops = [orjson.loads(b.build(doc(a)).data.split(b"\n")[0]) for a in ("update", "create")]
    assert ops == [
        {"update": {"_index": "orders", "_id": "k1", "retry_on_conflict": 3}},
        {"create": {"_index": "orders", "_id": "k1"}},
    ]
    assert b.build(doc()).data.startswith(b'{"index":')  # the others: WRITE_METHOD


def test_action_delete_and_delete_true_are_the_same_delete() -> None:
    a = builder().build(doc("delete", source=None)).data
    b = builder().build(doc(None, source=None, delete=True)).data
    assert a == b == b'{"delete":{"_index":"orders","_id":"k1"}}\n'
    assert builder().build(doc("delete")).data == a  # a source is ignored by a delete


def test_contradicting_delete_and_action_is_refused() -> None:
    with pytest.raises(ActionError, match=r"both delete=True and action='index'"):
        builder().build(doc("index", delete=True))


@pytest.mark.parametrize(
    ("action", "env", "match"),
    [
        ("merge", {}, r"unknown action 'merge' \(expected one of index, create, upsert"),
        (["x"], {}, r"unknown action \['x'\]"),
        ("script", {}, r"needs a script: set ES_SCRIPT_ID or ES_SCRIPT_SOURCE"),
        ("update", {"DOC_ID": "none"}, r"'update' needs a document id \(DOC_ID is none\)"),
        ("update", {"VERSION": "offset"}, r"does not version 'update' writes"),
        ("index", {"ES_DATA_STREAM": "true"}, r"data streams accept only create, not 'index'"),
        ("delete", {"ES_DATA_STREAM": "true"}, r"data streams accept only create, not deletes"),
    ],
)
def test_per_record_actions_the_configuration_cannot_write(
    action: Any, env: dict[str, str], match: str
) -> None:
    with pytest.raises(ActionError, match=match):
        builder(**env).build(doc(action))


def test_per_record_delete_keeps_the_external_version() -> None:
    (line,) = encode(doc("delete", source=None), VERSION="offset")
    assert line == {"delete": {"_index": "orders", "_id": "k1", "version": 7,
                               "version_type": "external"}}  # fmt: skip


def test_per_record_script_runs_the_configured_script() -> None:
    # ES_SCRIPT_ID with WRITE_METHOD=update is accepted when a transform may choose script
    b = builder(
        WRITE_METHOD="update",
        ES_SCRIPT_ID="count",
        TRANSFORMS="tests.support.sample_transforms:modify",
    )
    _, body = [orjson.loads(x) for x in b.build(doc("script")).data.split(b"\n")[:-1]]
    assert body == {"script": {"id": "count", "params": {"doc": {"n": 1}}}}


# ------------------------------------------------------------------ index names


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("orders", None),
        ("logs-2024.05.01", None),
        (".hidden", None),
        ("ü" * 127, None),  # 254 bytes
        ("ü" * 128, "longer than 255 bytes"),
        ("a" * 256, "longer than 255 bytes"),
        ("", "must not be empty"),
        ("Orders", "must be lower case"),
        ("a b", "contains ' '"),
        *((f"a{c}b", f"contains {c!r}") for c in '\\/*?"<>|,#:'),
        ("-a", "must not start with '-'"),
        ("_a", "must not start with '_'"),
        ("+a", "must not start with '+'"),
        (".", "is not allowed"),
        ("..", "is not allowed"),
    ],
)
def test_elasticsearch_index_name_rules(name: str, why: str | None) -> None:
    got = problem(name)
    assert (got is None) if why is None else (got is not None and why in got)


def test_a_transforms_invalid_index_is_refused_before_any_request() -> None:
    b = builder()
    with pytest.raises(InvalidIndexName, match="must be lower case"):
        b.build(Doc(REC, {"n": 1}, "k1", index="Tenant-A"))
    with pytest.raises(InvalidIndexName, match="must be lower case"):  # remembered
        b.build(Doc(REC, {"n": 1}, "k1", index="Tenant-A"))
    assert b.build(Doc(REC, {"n": 1}, "k1", index="tenant-a")).data.startswith(
        b'{"index":{"_index":"tenant-a"'
    )


def test_a_topic_that_makes_an_invalid_index_is_refused() -> None:
    b = builder(KAFKA_TOPICS_REGEX="Orders.*", KAFKA_TOPICS="")
    rec = Record("Orders", 0, 1, None, b"k", b"{}")
    with pytest.raises(InvalidIndexName, match="index name 'Orders' must be lower case"):
        b.build(Doc(rec, {"n": 1}, "k"))


def test_es_index_allow_confines_every_derived_name() -> None:
    b = builder(
        ES_INDEX="tenant-{topic}", ES_INDEX_ALLOW="tenant-[a-z0-9]+", KAFKA_TOPICS="orders.eu"
    )
    b2 = builder(ES_INDEX_ALLOW="tenant-[a-z0-9]+", ES_INDEX="tenant-x")
    assert b2.build(Doc(REC, {}, "k", index="tenant-acme")).data.startswith(
        b'{"index":{"_index":"tenant-acme"'
    )
    with pytest.raises(InvalidIndexName, match=r"does not match ES_INDEX_ALLOW \(tenant-"):
        b2.build(Doc(REC, {}, "k", index="tenant-acme-other.x"))
    with pytest.raises(InvalidIndexName, match="does not match ES_INDEX_ALLOW"):
        b2.build(Doc(REC, {}, "k", index=".security"))
    rec = Record("orders.eu", 0, 1, None, b"k", b"{}")
    with pytest.raises(InvalidIndexName, match=r"'tenant-orders\.eu' does not match"):
        b.build(Doc(rec, {}, "k"))


def test_the_memory_of_checked_names_is_bounded() -> None:
    b = builder()
    for i in range(NAME_CACHE_LIMIT + 5):
        b.build(Doc(REC, {}, "k", index=f"i{i}"))
    assert len(b._names) <= NAME_CACHE_LIMIT


# ------------------------------------------------------------------ refused at start


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"WRITE_METHOD": "script"}, "WRITE_METHOD: script needs ES_SCRIPT_ID or ES_SCRIPT_SOURCE"),
        (
            {"WRITE_METHOD": "script", "ES_SCRIPT_ID": "a", "ES_SCRIPT_SOURCE": "b"},
            "ES_SCRIPT_ID: give ES_SCRIPT_ID or ES_SCRIPT_SOURCE, not both",
        ),
        (
            {"WRITE_METHOD": "script", "ES_SCRIPT_ID": "a", "ES_SCRIPT_LANG": "painless"},
            "ES_SCRIPT_LANG: a stored script (ES_SCRIPT_ID) has its own language",
        ),
        ({"ES_SCRIPT_ID": "a"}, "ES_SCRIPT_ID: only WRITE_METHOD=script runs a script, not index"),
        (
            {"WRITE_METHOD": "update", "DOC_ID": "none"},
            "WRITE_METHOD: update needs document ids (DOC_ID is none)",
        ),
        (
            {"WRITE_METHOD": "script", "ES_SCRIPT_ID": "a", "DOC_ID": "none"},
            "WRITE_METHOD: script needs document ids (DOC_ID is none)",
        ),
        (
            {"WRITE_METHOD": "update", "VERSION": "offset"},
            "VERSION: Elasticsearch allows external versioning only with index, not update",
        ),
        (
            {"WRITE_METHOD": "script", "ES_SCRIPT_ID": "a", "ES_SCRIPTED_UPSERT": "true"},
            "ES_SCRIPTED_UPSERT: needs ON_MISSING_DOCUMENT=upsert, got dlq",
        ),
        (
            {"WRITE_METHOD": "update", "ON_MISSING_DOCUMENT": "upsert",
             "ES_SCRIPTED_UPSERT": "true"},
            "ES_SCRIPTED_UPSERT: needs a script (WRITE_METHOD=script)",
        ),
        (
            {"ON_MISSING_DOCUMENT": "ignore"},
            "ON_MISSING_DOCUMENT: only update and script read it, not WRITE_METHOD=index",
        ),
        ({"ON_MISSING_DOCUMENT": "skip"}, "ON_MISSING_DOCUMENT"),
        (
            {"WRITE_METHOD": "update", "ON_NULL_VALUE": "delete", "ON_MISSING_DOCUMENT": "dlq"},
            "ON_MISSING_DOCUMENT: dlq cannot be told from a replayed update whose document a "
            "later record deleted (ON_NULL_VALUE=delete): use ignore",
        ),
        (
            {"WRITE_METHOD": "update", "ON_MISSING_DOCUMENT": "dlq",
             "TRANSFORMS": "tests.support.sample_transforms:modify"},
            "ON_MISSING_DOCUMENT: dlq cannot be told from a replayed update whose document a "
            "later record deleted (a transform may choose delete)",
        ),
        ({"ES_SCRIPT_RECORD": "true"}, "ES_SCRIPT_RECORD: needs a script (WRITE_METHOD=script)"),
        ({"ES_INDEX": "Orders"}, "ES_INDEX: index name 'Orders' must be lower case"),
        ({"ES_INDEX_MAP": "orders:a#b"}, "ES_INDEX_MAP[orders]: index name 'a#b' contains '#'"),
        (
            {"ES_INDEX": "other", "ES_INDEX_ALLOW": "tenant-.*"},
            "ES_INDEX: index name 'other' does not match ES_INDEX_ALLOW (tenant-.*)",
        ),
        ({"ES_INDEX_ALLOW": "tenant-("}, "ES_INDEX_ALLOW"),
    ],
)  # fmt: skip
def test_refused_combinations_are_one_line_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        settings(**env)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


@pytest.mark.parametrize("deletes", ["tombstones", "python", "action"])
def test_a_missing_document_is_skipped_by_default_where_the_flow_also_deletes(
    deletes: str, tmp_path: Path
) -> None:
    """A replayed update of a document a later record deleted finds it missing: not the
    record's fault, so not a dead letter (nor, under ERRORS_TOLERANCE=none, a stop)."""
    config = tmp_path / "actions.yaml"
    entry = {"type": "action", "field": "op", "map": {"u": "update", "d": "delete"}}
    config.write_text(json.dumps({"transforms": [entry]}))
    env = {
        "tombstones": {"ON_NULL_VALUE": "delete"},
        "python": {"TRANSFORMS": "tests.support.sample_transforms:modify"},
        "action": {"ES_SINK_CONFIG": str(config)},
    }[deletes]
    s = settings(WRITE_METHOD="update", **env)
    assert s.es_documents.updates.on_missing == "ignore"
    assert settings(WRITE_METHOD="update").es_documents.updates.on_missing == "dlq"


def test_accepted_combinations() -> None:
    settings(WRITE_METHOD="update", ON_MISSING_DOCUMENT="ignore")
    settings(WRITE_METHOD="script", ES_SCRIPT_SOURCE="x", ON_MISSING_DOCUMENT="upsert",
             ES_SCRIPTED_UPSERT="true")  # fmt: skip
    settings(ES_INDEX="tenant-{topic}", ES_INDEX_ALLOW="tenant-.*")  # checked per record
    # per-record actions may use them
    settings(ON_MISSING_DOCUMENT="ignore", TRANSFORMS="tests.support.sample_transforms:modify")
