"""sinks.elasticsearch.bulk: chunking, and the pure classification of `_bulk` answers,
driven by answers recorded from the real node (tests/support/data/bulk_answers.json) and, where
a node cannot be made to answer so (overload, 5xx, security), by answers written here."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
from elastic_transport import ApiResponseMeta, ConnectionTimeout, HttpHeaders, NodeConfig
from elastic_transport import ConnectionError as TransportConnectionError
from elasticsearch import ApiError

from flows.config import Settings
from sinks.backoff import Backoff
from sinks.elasticsearch import bulk
from sinks.elasticsearch.actions import ActionBuilder
from sinks.errors import ConfigError
from sinks.model import Action, DeadLetter, Doc, Record
from tests.support.paths import DATA

RECORDED = json.loads((DATA / "bulk_answers.json").read_text())


def action(op: str, doc_id: str, index: str = "recorded", offset: int = 0) -> Action:
    """An encoded action as ActionBuilder makes it (only the action line is parsed here)."""
    line = json.dumps({op: {"_index": index, "_id": doc_id}}).encode() + b"\n"
    body = b"" if op == "delete" else b'{"n":1}\n'
    return Action(doc_id, line + body, Record("t", 0, offset, None, doc_id.encode(), b"{}"))


def call() -> bulk.Call:
    class Clock:
        def monotonic(self) -> float:
            return 0.0

        def sleep(self, seconds: float, /) -> None:
            pass

    return bulk.Call(Backoff(0.1, 1.0).start(Clock()))


def classify(
    pending: list[Action], answer: dict[str, Any], c: bulk.Call | None = None, **kw: Any
) -> bulk.Verdict:
    opts = {"rules": rules(), "item_retry_max": 10, **kw}
    return bulk.classify(pending, answer, c or call(), **opts)


def rules(**env: str) -> bulk.Rules:
    """What the documents' settings (KAFKA_TOPICS=t plus `env`) make of answers."""
    settings = Settings.load({"KAFKA_TOPICS": "t", **env})
    return bulk.Rules.of(settings.es_documents)


# The requests the recorded answers answer, in order (see the recording's `_about`).
MIXED = [
    action("index", "ok"),
    action("index", "bad"),  # {"n": "not a number"} into a long field
    action("create", "a"),  # exists already
    action("delete", "never-written"),
    action("index", "b"),  # external version 1, the document holds version 1
    action("index", "b"),
    action("index", "r", index="recorded-routed"),  # _routing required, none given
    action("update", "up"),  # doc_as_upsert
]


# ------------------------------------------------------------------ recorded answers


def test_recorded_all_written_answer_is_done() -> None:
    assert RECORDED["all_written"]["answer"]["errors"] is False
    v = classify([action("index", "a"), action("create", "b")], RECORDED["all_written"]["answer"])
    assert v is bulk.DONE and v.all_written and not v.retry and not v.rejected


def test_recorded_mixed_answer_item_by_item() -> None:
    v = classify(MIXED, RECORDED["mixed"]["answer"], rules=bulk.Rules(frozenset()))
    assert v.retry == () and v.stop is None and v.too_large is None
    assert v.written == (0, 7)
    assert v.not_found == (3,)
    rejected = dict(v.rejected)
    assert sorted(rejected) == [1, 2, 4, 5, 6]
    assert rejected[1].error_class == "elasticsearch.document_parsing_exception"
    assert rejected[1].message.startswith("[1:7] failed to parse field [n] of type [long]")
    assert rejected[1].message.endswith(
        ': illegal_argument_exception: For input string: "not a number"'
    )
    assert rejected[1].record is MIXED[1].record and rejected[1].stage == "index"
    assert rejected[2].error_class == "elasticsearch.version_conflict_engine_exception"
    assert rejected[6].error_class == "elasticsearch.routing_missing_exception"


@pytest.mark.parametrize(
    "odd", [{}, {"index": {"status": 201}, "create": {"status": 201}}], ids=["none", "two"]
)
def test_an_item_without_exactly_one_operation_is_never_taken_as_written(odd: Any) -> None:
    """No node answers so; a proxy that mangles the answer must stop the flow rather than
    have a document counted as indexed (and its offset committed)."""
    answer = {"errors": True, "items": [{"index": {"status": 429, "error": {}}}, odd]}
    with pytest.raises(ValueError):
        classify([action("index", "a"), action("index", "b")], answer)


def test_recorded_conflicts_are_done_when_a_conflict_means_the_document_is_there() -> None:
    """A create's 409 (whatever WRITE_METHOD: a transform may choose create for one
    record), and every write's under external versioning."""
    v = classify(MIXED, RECORDED["mixed"]["answer"])
    assert sorted(dict(v.rejected)) == [1, 4, 5, 6]  # the index 409s are failures
    v = classify(MIXED, RECORDED["mixed"]["answer"], rules=rules(VERSION="offset"))
    assert sorted(dict(v.rejected)) == [1, 6]
    assert v.written == (0, 7) and v.not_found == (3,)


def test_recorded_missing_index_is_a_configuration_error() -> None:
    pending = [action("index", "x", index="recorded-missing")]
    v = classify(pending, RECORDED["index_not_found"]["answer"])
    assert isinstance(v.stop, ConfigError)
    assert str(v.stop).startswith(
        "ES_INDEX: index recorded-missing does not exist and Elasticsearch does not create it"
    )


def test_recorded_write_block_is_rejected_for_good() -> None:
    v = classify([action("index", "a")], RECORDED["write_block"]["answer"])
    ((pos, dl),) = v.rejected
    assert pos == 0 and v.retry == ()
    assert dl.error_class == "elasticsearch.cluster_block_exception"
    assert "FORBIDDEN/8/index write" in dl.message
    assert dl.message.endswith("(status 403: stays until an administrator lifts it)")


def test_recorded_flood_stage_block_is_retried_under_the_time_budget() -> None:
    v = classify([action("index", "a")], RECORDED["read_only_allow_delete_block"]["answer"])
    assert v.retry == (0,) and v.budgeted and v.rejected == ()
    assert v.why == "429 cluster_block_exception"
    assert v.retried == (("429", 1),)
    assert v.counted == ()  # not bounded by ES_ITEM_RETRY_MAX


def test_recorded_unparsable_document_is_rejected_with_its_causes() -> None:
    v = classify([action("index", "a")], RECORDED["malformed_request"]["answer"])
    ((_, dl),) = v.rejected
    assert dl.error_class == "elasticsearch.document_parsing_exception"
    assert "x_content_e_o_f_exception: [1:6] Unexpected end of file" in dl.message


# -------------------------------------------------------------- answers written here


def item(op: str, status: int, etype: str | None = None, reason: str = "r") -> dict[str, Any]:
    result: dict[str, Any] = {"status": status}
    if etype:
        result["error"] = {"type": etype, "reason": reason}
    return {op: result}


def test_item_5xx_retries_count_against_the_item_limit_then_reject() -> None:
    pending = [action("index", "a")]
    answer = {"errors": True, "items": [item("index", 503, "unavailable_shards_exception")]}
    c = call()
    v = classify(pending, answer, c, item_retry_max=2)
    assert v.retry == (0,) and v.counted == (0,) and not v.budgeted
    assert c.tries == {}  # pure: the account changes only when the verdict is recorded
    c.record(pending, v)
    c.record(pending, classify(pending, answer, c, item_retry_max=2))
    assert c.tries == {id(pending[0]): 2}
    last = classify(pending, answer, c, item_retry_max=2)
    ((_, dl),) = last.rejected
    assert last.retry == ()
    assert dl.message == "r (retried 2 times, ES_ITEM_RETRY_MAX=2)"


@pytest.mark.parametrize("status", [401, 403])
def test_item_security_exception_is_a_configuration_error(status: int) -> None:
    answer = {"errors": True, "items": [item("index", status, "security_exception", "no")]}
    v = classify([action("index", "a")], answer)
    assert isinstance(v.stop, ConfigError)
    assert f"refused writes to index recorded with HTTP {status}: security_exception" in str(v.stop)


def test_a_retried_item_takes_the_later_writes_of_its_document_along() -> None:
    """b's retry must not land its older write over the newer update after it."""
    pending = [action("index", "b"), action("index", "c"), action("update", "b", offset=2)]
    answer = {
        "errors": True,
        "items": [
            item("index", 429, "es_rejected_execution_exception"),
            item("index", 201),
            item("update", 200),
        ],
    }
    v = classify(pending, answer)
    assert v.retry == (0, 2)
    assert dict(v.retried) == {"429": 1, "reorder": 1}


def test_an_update_of_a_missing_document_a_later_index_or_delete_decided_is_done() -> None:
    """The later write decides what the document holds: the update that found no document
    is neither retried (its document is not brought back) nor a dead letter."""
    pending = [
        action("update", "b"),  # missing: a later delete of it decided
        action("update", "c"),  # missing: a later index replaced it
        action("update", "d"),  # missing, and nothing later wrote it: a dead letter
        action("delete", "b", offset=3),
        action("index", "c", offset=4),
        action("index", "d", index="other", offset=5),
    ]
    answer = {
        "errors": True,
        "items": [
            item("update", 404, "document_missing_exception"),
            item("update", 404, "document_missing_exception"),
            item("update", 404, "document_missing_exception"),
            item("delete", 404),  # found nothing: still what the document is now
            item("index", 201),
            item("index", 201),
        ],
    }
    v = classify(pending, answer)
    assert not v.retry and v.not_found == (3,)
    assert [(i, d.error_class) for i, d in v.rejected] == [
        (2, "elasticsearch.document_missing_exception")
    ]


def test_an_overloaded_item_is_retried_though_a_later_write_decided_its_document() -> None:
    """Until Elasticsearch reads a write nobody knows whether the record is bad (a mapping
    error): it is sent again, with the later writes of its document, so a bad record
    reaches the dead-letter topic whatever came after it."""
    pending = [
        action("update", "b"),
        action("index", "c"),
        action("delete", "b", offset=2),
        action("index", "c", offset=3),
    ]
    answer = {
        "errors": True,
        "items": [
            item("update", 429, "es_rejected_execution_exception"),
            item("index", 503, "unavailable_shards_exception"),
            item("delete", 200),
            item("index", 201),
        ],
    }
    v = classify(pending, answer)
    assert v.retry == (0, 1, 2, 3) and not v.rejected
    again = classify(
        [pending[i] for i in v.retry],
        {
            "errors": True,
            "items": [
                item("update", 400, "document_parsing_exception"),
                item("index", 201),
                item("delete", 200),
                item("index", 201),
            ],
        },
    )
    assert [(i, d.error_class) for i, d in again.rejected] == [
        (0, "elasticsearch.document_parsing_exception")
    ]


def test_nothing_is_moot_under_external_versioning() -> None:
    """The versions, not the request order, decide which write wins."""
    pending = [action("index", "b"), action("delete", "b", offset=1)]
    answer = {
        "errors": True,
        "items": [item("index", 429, "es_rejected_execution_exception"), item("delete", 200)],
    }
    assert classify(pending, answer, rules=rules(VERSION="offset")).retry == (0, 1)


def test_an_answer_without_errors_still_counts_the_deletes_that_found_nothing() -> None:
    """Elasticsearch's `errors` ignores a delete's 404 (no `error`): the items say it."""
    pending = [action("index", "a"), action("delete", "b"), action("delete", "c")]
    answer = {
        "errors": False,
        "items": [item("index", 201), item("delete", 404), item("delete", 200)],
    }
    v = classify(pending, answer)
    assert v.not_found == (1,) and v.written == (0, 2) and not v.retry and not v.rejected
    assert classify(pending, {"errors": False}) is bulk.DONE  # no 404: not parsed at all


def scripted(*writes: tuple[str, str]) -> list[Action]:
    """(id, method) of records 0, 1, ... as ActionBuilder encodes them with a script set."""
    env = {"KAFKA_TOPICS": "t", "WRITE_METHOD": "script", "ES_SCRIPT_SOURCE": "s"}
    builder = ActionBuilder(Settings.load(env).es_documents)
    return [
        builder.build(Doc(Record("t", 0, i, None, k.encode(), b"{}"), {"n": 1}, k, action=m))
        for i, (k, m) in enumerate(writes)
    ]


def test_a_request_holds_no_script_after_another_write_of_its_document() -> None:
    """A retry re-sends the later writes of a document: a script among them would run twice."""
    acts = scripted(("x", "script"), ("y", "script"), ("x", "update"), ("x", "script"),
                    ("y", "index"), ("x", "script"))  # fmt: skip
    runs = list(bulk.chunks(acts, 100, 1 << 20, scripts_apart=True))
    assert [[a.record.offset for a in run] for run, _ in runs] == [[0, 1, 2], [3, 4], [5]]
    assert [size for _, size in runs] == [sum(len(a.data) for a in run) for run, _ in runs]
    assert [run for run, _ in bulk.chunks(acts, 100, 1 << 20)] == [acts]


def test_an_operation_over_the_pressure_limit_alone_is_rejected() -> None:
    reason = (
        "rejected execution of primary operation "
        "[primary_operation_bytes=900, max_primary_bytes=500]"
    )
    answer = {
        "errors": True,
        "items": [item("index", 429, "es_rejected_execution_exception", reason)],
    }
    v = classify([action("index", "a")], answer)
    assert v.retry == () and len(v.rejected) == 1


def test_recording_a_verdict_keeps_one_account() -> None:
    pending = MIXED
    c = call()
    v = classify(pending, RECORDED["mixed"]["answer"], c)
    c.record(pending, v)
    assert set(c.rejected) == {id(pending[i]) for i in (1, 4, 5, 6)}
    assert c.not_found == {id(pending[3])}
    c.record(pending, bulk.DONE)  # a later answer wrote them all: the delete found it
    assert c.not_found == set()
    assert list(c.failed_records(pending)) == [id(pending[i].origin) for i in (1, 4, 5, 6)]


# ------------------------------------------------------------------ updates (recorded)


def classify_items(items: list[int], answer: dict[str, Any], **env: str) -> bulk.Verdict:
    """The recorded `answer`'s `items` (positions), as answers to updates, under `env`."""
    answer = {"errors": True, "items": [answer["items"][i] for i in items]}
    pending = [action(next(iter(answer["items"][i])), f"d{i}") for i in range(len(items))]
    return classify(pending, answer, rules=rules(**env))


# The requests of RECORDED["updates"], in order: a partial update of a document that exists;
# of one that does not; a script on a missing document; a stored script that does not
# exist; a Painless script on a node without lang-painless; a partial update in an index
# that does not exist (Elasticsearch creates the index: the document is missing); an update
# that lost a concurrent write (here: a stale if_seq_no, in a request of its own).
UPDATES = RECORDED["updates"]["answer"]


def test_recorded_missing_document_is_a_dead_letter_under_dlq() -> None:
    v = classify_items([0, 1, 2, 5], UPDATES, WRITE_METHOD="update")
    assert v.written == (0,) and v.stop is None and v.missing == ()
    rejected = dict(v.rejected)
    assert sorted(rejected) == [1, 2, 3]
    assert rejected[1].error_class == "elasticsearch.document_missing_exception"
    assert rejected[1].message == "[missing]: document missing"
    assert rejected[1].stage == "index"


def test_recorded_missing_document_is_done_under_ignore() -> None:
    v = classify_items([0, 1, 2, 5], UPDATES, WRITE_METHOD="update", ON_MISSING_DOCUMENT="ignore")
    assert v.rejected == () and v.missing == (1, 2, 3) and v.written == (0,)
    c = call()
    before = missing_metric()
    c.record([action("update", f"d{i}") for i in range(4)], v)
    assert missing_metric() - before == 3


def missing_metric() -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("es_sink_updates_missing_total") or 0.0


def test_recorded_conflict_of_an_update_is_a_dead_letter() -> None:
    v = classify_items([6], UPDATES, WRITE_METHOD="update")
    ((_, dl),) = v.rejected
    assert isinstance(dl, DeadLetter)
    assert dl.error_class == "elasticsearch.version_conflict_engine_exception"


@pytest.mark.parametrize(
    ("item", "setting"), [(3, "ES_SCRIPT_ID: Elasticsearch cannot run the stored script"),
                          (4, "ES_SCRIPT_LANG: Elasticsearch cannot run the script")],
)  # fmt: skip
def test_recorded_script_the_node_cannot_run_stops_the_flow(item: int, setting: str) -> None:
    v = classify_items([0, item], UPDATES, WRITE_METHOD="script", ES_SCRIPT_ID="s")
    assert isinstance(v.stop, ConfigError) and str(v.stop).startswith(setting)


def test_recorded_invalid_index_name_would_fail_one_item_only() -> None:
    """What the node answers for a name the sink's own check refuses first."""
    v = classify_items([0], RECORDED["invalid_index_name"]["answer"])
    ((_, dl),) = v.rejected
    assert dl.error_class == "elasticsearch.invalid_index_name_exception" and v.stop is None


# ----------------------------------------------------------- whole-request failures


def api_error(status: int, body: Any = None) -> ApiError:
    meta = ApiResponseMeta(
        status=status, http_version="1.1", headers=HttpHeaders(), duration=0.01,
        node=NodeConfig("http", "es", 9200),
    )  # fmt: skip
    return ApiError("error", meta=meta, body=body or {"error": {"type": "x", "reason": "y"}})


@pytest.mark.parametrize(
    "error",
    [
        TransportConnectionError("refused"),
        ConnectionTimeout("slow"),
        api_error(429),
        api_error(503),
    ],
)
def test_connection_errors_429_and_5xx_retry_the_whole_request(error: Exception) -> None:
    v = bulk.classify_failure(error, 3)
    assert v.retry == (0, 1, 2) and v.budgeted and v.rejected == ()
    ((label, n),) = v.retried
    assert n == 3 and label in ("connection", "429", "503")


def test_413_and_a_429_over_the_pressure_limit_split_the_request() -> None:
    assert bulk.classify_failure(api_error(413), 2).too_large == "HTTP 413: error"
    reason = "coordinating_operation_bytes=900, max_coordinating_and_primary_bytes=500"
    body = {"error": {"type": "es_rejected_execution_exception", "reason": reason}}
    assert (bulk.classify_failure(api_error(429, body), 2).too_large or "").startswith("HTTP 429:")


@pytest.mark.parametrize(
    ("status", "hint"), [(400, ""), (401, "check ES_USERNAME"), (403, "lack a privilege")]
)
def test_other_request_errors_stop_the_flow_naming_the_settings(status: int, hint: str) -> None:
    v = bulk.classify_failure(api_error(status), 2)
    assert isinstance(v.stop, ConfigError)
    assert str(v.stop).startswith(
        f"ES_HOSTS: Elasticsearch refused the bulk request with HTTP {status}: x: y"
    )
    assert hint in str(v.stop)


# -------------------------------------------------------------------------- chunks


def test_chunks_respect_the_action_and_byte_limits() -> None:
    acts = [action("index", str(i)) for i in range(7)]
    size = len(acts[0].data)
    assert [len(c) for c, _ in bulk.chunks(acts, 3, 10**9)] == [3, 3, 1]
    assert [len(c) for c, _ in bulk.chunks(acts, 100, 2 * size)] == [2, 2, 2, 1]
    assert [n for _, n in bulk.chunks(acts, 100, 2 * size)] == [2 * size] * 3 + [size]
    assert [len(c) for c, _ in bulk.chunks(acts, 100, 1)] == [1] * 7  # larger alone: still sent
    assert list(bulk.chunks([], 3, 10)) == []


def _chunks_one_by_one(acts: list[Action], max_actions: int, max_bytes: int) -> list[Any]:
    """The plain per-action loop `bulk.chunks` must agree with."""
    out, start = [], 0
    while start < len(acts):
        end, size = start, 0
        while end < len(acts) and end - start < max_actions:
            n = len(acts[end].data)
            if size + n > max_bytes and end > start:
                break
            size += n
            end += 1
        out.append((acts[start:end], size))
        start = end
    return out


def _random_buffers(seed: int) -> Iterator[tuple[list[Action], int, int]]:
    """300 buffers of 0-39 actions of assorted sizes, each with random limits."""
    rng = random.Random(seed)
    rec = Record("t", 0, 0, None, None, b"")
    for _ in range(300):
        acts = [
            Action(str(i), b"x" * rng.choice((0, 1, 5, 50, 300)), rec)
            for i in range(rng.randrange(0, 40))
        ]
        yield acts, rng.randrange(1, 12), rng.choice((1, 40, 300, 1000, 10**6))


def _whole_by_chunks(acts: list[Action], max_actions: int, max_bytes: int) -> tuple[int, int]:
    """What `whole_requests` must give: `chunks`' runs but a tail below both limits."""
    runs = list(bulk.chunks(acts, max_actions, max_bytes))
    if runs and len(runs[-1][0]) < max_actions and runs[-1][1] < max_bytes:
        runs.pop()
    return sum(len(c) for c, _ in runs), sum(n for _, n in runs)


def test_chunks_split_as_a_loop_over_each_action_would() -> None:
    """With or without the buffer's total bytes given (the sink partition's count)."""
    for acts, max_actions, max_bytes in _random_buffers(14):
        want = _chunks_one_by_one(acts, max_actions, max_bytes)
        assert list(bulk.chunks(acts, max_actions, max_bytes)) == want
        total = sum(len(a.data) for a in acts)
        assert list(bulk.chunks(acts, max_actions, max_bytes, total)) == want


def test_whole_requests_are_the_chunks_before_a_tail_below_both_limits() -> None:
    for acts, max_actions, max_bytes in _random_buffers(15):
        total = sum(len(a.data) for a in acts)
        got = bulk.whole_requests(acts, total, max_actions, max_bytes)
        assert got == _whole_by_chunks(acts, max_actions, max_bytes)


def test_whole_requests_at_every_small_boundary() -> None:
    """Every buffer of up to 5 actions of 0-5 bytes, against every small limit: the exact
    boundaries (a total equal to the byte limit) that random sizes rarely hit."""
    rec = Record("t", 0, 0, None, None, b"")
    for k in range(6):
        for sizes in itertools.product((0, 1, 2, 3, 5), repeat=k):
            acts = [Action(str(i), b"x" * n, rec) for i, n in enumerate(sizes)]
            for max_actions in range(1, 7):
                for max_bytes in range(1, 14):
                    got = bulk.whole_requests(acts, sum(sizes), max_actions, max_bytes)
                    want = _whole_by_chunks(acts, max_actions, max_bytes)
                    assert got == want, (sizes, max_actions, max_bytes)
