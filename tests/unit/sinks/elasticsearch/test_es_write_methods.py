"""sinks.elasticsearch.write_methods: the one list of write methods, and that encoding and
answer classification read it (a new method is one entry)."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from flows.config import Settings
from sinks.elasticsearch import bulk
from sinks.elasticsearch.actions import ActionBuilder
from sinks.elasticsearch.write_methods import (
    ACTIONS,
    CONFLICT_DONE_OPS,
    DATA_STREAM_METHOD,
    WRITE_METHODS,
    Updates,
    WriteMethod,
)
from sinks.model import Doc, Record

REC = Record("orders", 0, 5, 1_714_564_800_123, b"k", b"{}")


def test_the_built_in_methods() -> None:
    assert list(WRITE_METHODS) == ["index", "create", "upsert", "update", "script"]
    assert ACTIONS == ("index", "create", "upsert", "update", "script", "delete")
    ops = [m.op for m in WRITE_METHODS.values()]
    assert ops == ["index", "create", "update", "update", "update"]
    assert [m.name for m in WRITE_METHODS.values() if m.conflict_is_done] == ["create"]
    assert {"create"} == CONFLICT_DONE_OPS
    updates = ["upsert", "update", "script"]
    assert [m.name for m in WRITE_METHODS.values() if m.needs_id] == updates
    assert [m.name for m in WRITE_METHODS.values() if m.allows_external_version] == ["index"]
    assert [m.name for m in WRITE_METHODS.values() if m.retries_conflicts] == updates
    assert [m.name for m in WRITE_METHODS.values() if m.on_missing] == ["update", "script"]
    assert [m.name for m in WRITE_METHODS.values() if m.needs_script] == ["script"]
    assert DATA_STREAM_METHOD == "create"
    upsert = WRITE_METHODS["upsert"]
    assert upsert.body is not None
    assert orjson.loads(upsert.body(Updates())(b'{"a":1}', REC)) == {
        "doc": {"a": 1},
        "doc_as_upsert": True,
    }


def encode(method: str) -> list[dict[str, object]]:
    settings = Settings.load({"KAFKA_TOPICS": "orders"})
    docs = settings.es_documents
    docs = dataclasses.replace(docs, write_method=method)
    action = ActionBuilder(docs).build(Doc(REC, {"a": 1}, key="k"))
    return [orjson.loads(line) for line in action.data.splitlines()]


def test_a_new_method_is_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    wrapped = WriteMethod(
        "wrapped",
        op="index",
        doc="test",
        body=lambda _: lambda src, _rec: b'{"body":' + src + b"}",
        conflict_is_done=True,
    )
    monkeypatch.setitem(WRITE_METHODS, "wrapped", wrapped)
    line, body = encode("wrapped")
    assert line == {"index": {"_index": "orders", "_id": "k"}}
    assert body == {"body": {"a": 1}}
    settings = Settings.load({"KAFKA_TOPICS": "orders"})
    docs = dataclasses.replace(settings.es_documents, write_method="wrapped")
    assert docs.method is wrapped
    assert "index" in bulk.Rules.of(docs).conflict_done  # its 409s are done


@pytest.mark.parametrize(
    ("method", "op"),
    [("index", "index"), ("create", "create"), ("upsert", "update"), ("update", "update")],
)
def test_builtin_methods_encode_their_operation(method: str, op: str) -> None:
    (meta,) = encode(method)[0]
    assert meta == op
