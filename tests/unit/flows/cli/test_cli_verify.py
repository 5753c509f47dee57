"""The pure parts of `es-sink verify`: a document's expected state from its writes."""

from __future__ import annotations

from flows.cli.verify import Scripted, Write, decode_action, final_state, merged
from sinks.model import Action, Record


def _w(op: str, source: object, offset: int, partition: int = 0, ts: int = 0) -> Write:
    return Write(op, source, ("t", partition, offset), ts)


def test_index_replaces_create_keeps_the_first_delete_removes() -> None:
    assert final_state([_w("index", {"v": 2}, 5), _w("index", {"v": 1}, 3)])[-1][1] == {"v": 2}
    assert final_state([_w("create", {"v": 2}, 5), _w("create", {"v": 1}, 3)])[-1][1] == {"v": 1}
    assert final_state([_w("index", {"v": 1}, 3), _w("delete", None, 4)])[-1][1] is None
    assert final_state([_w("delete", None, 3), _w("index", {"v": 1}, 4)])[-1][1] == {"v": 1}


def test_upserts_merge_objects_recursively() -> None:
    writes = [_w("update", {"a": {"x": 1}, "b": 1}, 1), _w("update", {"a": {"y": 2}}, 2)]
    assert final_state(writes)[-1][1] == {"a": {"x": 1, "y": 2}, "b": 1}
    assert merged({"a": [1]}, {"a": [2]}) == {"a": [2]}


def test_one_partition_orders_by_offset_several_by_timestamp() -> None:
    late_stamp = [_w("index", {"v": "old"}, 1, ts=9), _w("index", {"v": "new"}, 2, ts=1)]
    assert final_state(late_stamp)[-1][1] == {"v": "new"}
    two = [_w("index", {"v": "b"}, 1, partition=1, ts=5), _w("index", {"v": "a"}, 7, ts=3)]
    assert final_state(two)[-1][1] == {"v": "b"}


def test_actions_decode_as_the_sink_sends_them() -> None:
    rec = Record("t", 0, 1, None, b"k", b"{}")
    line = (
        b'{"update":{"_index":"i","_id":"k","routing":"r"}}\n{"doc":{"a":1},"doc_as_upsert":true}\n'
    )
    assert decode_action(Action("k", line, rec)) == ("update", ("i", "k", "r"), {"a": 1})
    delete = b'{"delete":{"_index":"i","_id":"k"}}\n'
    assert decode_action(Action("k", delete, rec)) == ("delete", ("i", "k", None), None)


def test_a_scripted_update_keeps_the_document_and_creates_one_only_with_an_upsert() -> None:
    rec = Record("t", 0, 1, None, b"k", b"{}")
    meta = b'{"update":{"_index":"i","_id":"k"}}\n'
    script = b'{"script":{"id":"s","params":{"doc":{"a":1}}}'
    plain = decode_action(Action("k", meta + script + b"}\n", rec))
    upsert = decode_action(Action("k", meta + script + b',"upsert":{"a":1}}\n', rec))
    assert (plain[2], upsert[2]) == (Scripted(creates=False), Scripted(creates=True))
    assert final_state([_w("update", plain[2], 1)])[-1][1] is None  # missing stays missing
    assert final_state([_w("update", upsert[2], 1)])[-1][1] == {}  # present
    kept = [_w("index", {"v": 1}, 1), _w("update", plain[2], 2)]
    assert final_state(kept)[-1][1] == {"v": 1}  # present; its content is the script's


def test_a_document_a_script_wrote_is_checked_for_presence_only() -> None:
    from flows.cli.verify import Report, _judge

    key = ("i", "k", None)
    writes = [_w("index", {"v": 1}, 1), _w("update", Scripted(creates=False), 2)]
    report = Report()  # content compared: another write method, a per-record script action
    _judge(key, writes, {"found": True, "_source": {"v": 1, "n": 7}}, report)
    assert report.ok
    _judge(key, [_w("update", Scripted(creates=False), 1)], {"found": True}, report)
    assert report.ok  # a script on a missing document: only the script knows
    _judge(key, writes, {"found": False}, report)
    assert [d["detail"] for d in report.found["missing"]] == ["not in Elasticsearch"]


def test_the_summary_accounts_for_records_that_never_reached_elasticsearch() -> None:
    from flows.cli.verify import Report

    report = Report(records=40, documents=36, refused_by_es=2, failed_before_index=4)
    assert "refused_by_es=2 failed_before_index=4" in report.lines()[0]
    shape = report.as_json()
    assert (shape["refused_by_es"], shape["failed_before_index"], shape["dead_lettered"]) == (
        2,
        4,
        2,
    )
