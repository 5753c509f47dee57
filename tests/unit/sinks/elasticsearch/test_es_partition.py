"""sinks.elasticsearch.partition.EsSinkPartition under injected faults.

A fake client answers `_bulk` per call from a script (filtered bulk bodies, transport
errors, ApiErrors), a fake clock records sleeps instead of sleeping, and a fake dead-letter
producer records what would go to the dead-letter topic. Actions are real: ActionBuilder
encodes them from Docs, and the fake parses the NDJSON the partition sends.
"""

from __future__ import annotations

import pickle
import random
import threading
import time
from collections.abc import Callable, Mapping
from concurrent import futures
from typing import Any

import orjson
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from elastic_transport import ApiResponseMeta, ConnectionTimeout, HttpHeaders, NodeConfig
from elastic_transport import ConnectionError as TransportConnectionError
from elasticsearch import ApiError, AuthenticationException, AuthorizationException
from prometheus_client import REGISTRY

from flows.config import Settings
from sinks import failing
from sinks.elasticsearch import refusals, tasks
from sinks.elasticsearch.actions import ActionBuilder
from sinks.elasticsearch.client import _JsonSerializer
from sinks.elasticsearch.partition import EsSinkPartition, clear_refusals
from sinks.errors import (
    ConfigError,
    DeadLetterLimitError,
    ElasticsearchUnavailableError,
    RecordFailedError,
)
from sinks.model import Action, Actions, DeadLetter, Doc, Record

TOPIC = "orders"
TS = 1_714_564_800_123

# ----------------------------------------------------------------------------- fakes

Step = Any  # an exception to raise, {id: status | (status, error)} or a callable(body) -> Step


class FakeResponse:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body


def parse(body: bytes) -> list[tuple[str, str | None]]:
    """(op, _id) of every action in an NDJSON bulk body."""
    assert body.endswith(b"\n")
    lines = body.split(b"\n")[:-1]
    out = []
    i = 0
    while i < len(lines):
        ((op, meta),) = orjson.loads(lines[i]).items()
        out.append((op, meta.get("_id")))
        i += 1 if op == "delete" else 2
    return out


def respond(body: bytes, statuses: Mapping[str, Any]) -> dict[str, Any]:
    """A filtered bulk response: per action, the status (and error) given for its id."""
    items = []
    for op, doc_id in parse(body):
        spec = statuses.get(doc_id or "", 201)
        if isinstance(spec, tuple):
            status, error = spec
            item: dict[str, Any] = {"status": status, "error": error}
        else:
            item = {"status": spec}
        items.append({op: item})
    return answered(items)


def answered(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The answer to a bulk whose items are `items`, as the client reads it: `errors` only
    for an item that failed (a delete of a missing document answers 404 without failing),
    through the client's own serializer (which skips parsing an answer without errors)."""
    errors = any(
        "error" in result or (result["status"] >= 300 and op != "delete")
        for item in items
        for op, result in item.items()
    )
    body = orjson.dumps({"errors": errors, "items": items})
    return _JsonSerializer().loads(body)  # type: ignore[no-any-return]


class FakeClient:
    """`.bulk()` answers from `script`, one step per call; all-201 once it runs out."""

    def __init__(self, *script: Step, default: Step = None) -> None:
        self.script = list(script)
        self.default = default if default is not None else {}
        self.requests: list[bytes] = []
        self.filter_paths: list[str] = []
        self.closed = False

    def bulk(self, *, operations: bytes, filter_path: str) -> FakeResponse:
        self.requests.append(operations)
        self.filter_paths.append(filter_path)
        step = self.script.pop(0) if self.script else self.default
        while callable(step) and not isinstance(step, BaseException):
            step = step(operations)
        if isinstance(step, BaseException):
            raise step
        return FakeResponse(respond(operations, step))

    def close(self) -> None:
        self.closed = True

    def ids(self, n: int) -> list[str | None]:
        return [doc_id for _, doc_id in parse(self.requests[n])]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


class FakeDLQ:
    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []
        self.sends = 0
        self.closed = False

    def send(self, letters: list[DeadLetter]) -> None:
        self.sends += 1
        self.letters.extend(letters)

    def close(self) -> None:
        self.closed = True


def api_error(status: int, message: str = "error", cls: type[ApiError] = ApiError) -> ApiError:
    meta = ApiResponseMeta(
        status=status,
        http_version="1.1",
        headers=HttpHeaders(),
        duration=0.01,
        node=NodeConfig("http", "es", 9200),
    )
    return cls(message, meta=meta, body={"error": {"type": message}, "status": status})


# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def _fresh_process_state() -> Any:
    """Each test is a flow of its own: no refusal or failure left over from another."""
    failing.clear()
    clear_refusals()
    yield
    failing.clear()
    clear_refusals()


def settings(**env: str) -> Settings:
    base = {
        "KAFKA_TOPICS": TOPIC,
        "ERRORS_TOLERANCE": "all",
        "DLQ_TOPIC": "dead",
        "ES_RETRY_INITIAL_MS": "100",
        "ES_RETRY_MAX_MS": "1000",
    }
    return Settings.load({**base, **env})


def make_actions(
    s: Settings, *ids: str, delete: bool = False, pad: int = 0, first_offset: int = 0
) -> list[Action]:
    b = ActionBuilder(s.es_documents)
    out = []
    for i, doc_id in enumerate(ids):
        rec = Record(TOPIC, 1, first_offset + i, TS, doc_id.encode(), b"{}")
        source = None if delete else {"n": i, "pad": "x" * pad}
        out.append(b.build(Doc(rec, source, key=doc_id, delete=delete)))
    return out


class Rig:
    def __init__(self, client: FakeClient, rand: Callable[[], float] = random.random, **env: str):
        self.settings = settings(**env)
        self.client = client
        self.clock = FakeClock()
        self.dlq = FakeDLQ()
        self.part = EsSinkPartition(
            self.settings.es_sink_config,
            "es-0000",
            client,  # type: ignore[arg-type]
            self.dlq,  # type: ignore[arg-type]
            clock=self.clock,
            rand=rand,
        )

    def actions(self, *ids: str, **kw: Any) -> list[Action]:
        return make_actions(self.settings, *ids, **kw)

    def settle(self) -> list[bytes]:
        """Wait for the bulk in flight (sent on a pool thread); the requests made so far."""
        self.part._join()
        return self.client.requests

    def write_and_flush(self, *ids: str, **kw: Any) -> list[Action]:
        acts = self.actions(*ids, **kw)
        self.part.write_batch([acts])
        self.part.snapshot()
        return acts


def no_dlq_partition(s: Settings, name: str, client: Any) -> EsSinkPartition:
    """A sink partition without a dead-letter producer (ERRORS_TOLERANCE=none) on a fake
    clock, writing through `client`."""
    return EsSinkPartition(s.es_sink_config, name, client, None, clock=FakeClock())


def docs_indexed() -> float:
    return REGISTRY.get_sample_value("es_sink_docs_indexed_total") or 0.0


MAPPER_ERROR = {
    "type": "mapper_parsing_exception",
    "reason": "failed to parse field [n] of type [long] in document with id 'b'",
    "caused_by": {"type": "illegal_argument_exception", "reason": 'For input string: "x"'},
}


# -------------------------------------------------------------------- happy path basics


def test_one_request_with_the_exact_bytes_and_filter_path() -> None:
    rig = Rig(FakeClient())
    acts = rig.write_and_flush("a", "b", "c")
    assert rig.client.requests == [b"".join(a.data for a in acts)]
    assert "items.*.status" in rig.client.filter_paths[0]
    assert "items.*.error.type" in rig.client.filter_paths[0]
    assert rig.dlq.letters == []
    assert rig.clock.sleeps == []


def test_counts_indexed_documents() -> None:
    rig = Rig(FakeClient({"b": (400, MAPPER_ERROR)}))
    before = docs_indexed()
    rig.write_and_flush("a", "b", "c")
    assert docs_indexed() - before == 2


# ------------------------------------------------------------------ per-item retries


def test_item_429_is_resent_alone_then_succeeds() -> None:
    rejected = {"type": "es_rejected_execution_exception", "reason": "queue full"}
    rig = Rig(FakeClient({"b": (429, rejected)}, {}))
    acts = rig.write_and_flush("a", "b", "c")
    assert len(rig.client.requests) == 2
    assert rig.client.ids(1) == ["b"]
    assert rig.client.requests[1] == acts[1].data
    assert rig.dlq.letters == []
    assert len(rig.clock.sleeps) == 1


@pytest.mark.parametrize(
    ("status", "etype"),
    [
        (503, "unavailable_shards_exception"),
        (500, "internal_server_error"),
        (429, "es_rejected_execution_exception"),
        (429, "circuit_breaking_exception"),
        (400, "es_rejected_execution_exception"),
        (400, "rejected_execution_exception"),  # OpenSearch
        (429, "cluster_block_exception"),  # the flood-stage block clears by itself
    ],
)
def test_transient_item_errors_are_retried(status: int, etype: str) -> None:
    err = (status, {"type": etype, "reason": "try later"})
    rig = Rig(FakeClient({"b": err}, {"b": err}, {}))
    rig.write_and_flush("a", "b")
    assert [rig.client.ids(i) for i in range(3)] == [["a", "b"], ["b"], ["b"]]
    assert rig.dlq.letters == []
    assert len(rig.clock.sleeps) == 2


def test_retry_and_rejection_in_one_request() -> None:
    rig = Rig(FakeClient({"b": 503, "c": (400, MAPPER_ERROR)}, {}))
    rig.write_and_flush("a", "b", "c", "d")
    assert rig.client.ids(1) == ["b"]
    assert len(rig.client.requests) == 2
    assert [dl.record.key for dl in rig.dlq.letters] == [b"c"]
    assert rig.dlq.sends == 1


# ------------------------------------------------------------------- rejected items


def test_mapper_parsing_exception_is_dead_lettered() -> None:
    rig = Rig(FakeClient({"b": (400, MAPPER_ERROR)}))
    acts = rig.write_and_flush("a", "b", "c")
    assert len(rig.client.requests) == 1  # not retried
    assert rig.clock.sleeps == []
    assert len(rig.dlq.letters) == 1
    letter = rig.dlq.letters[0]
    assert letter.record is acts[1].record
    assert letter.stage == "index"
    assert letter.error_class == "elasticsearch.mapper_parsing_exception"
    assert letter.message == (
        "failed to parse field [n] of type [long] in document with id 'b': "
        'illegal_argument_exception: For input string: "x"'
    )


def test_rejected_item_without_error_type_is_named_by_status() -> None:
    rig = Rig(FakeClient({"a": 400}))
    rig.write_and_flush("a")
    assert rig.dlq.letters[0].error_class == "elasticsearch.http_400"


def test_409_under_external_versioning_is_done() -> None:
    conflict = (409, {"type": "version_conflict_engine_exception", "reason": "older"})
    rig = Rig(FakeClient({"a": conflict, "c": conflict}), VERSION="offset")
    before = docs_indexed()
    rig.write_and_flush("a", "b", "c")
    assert rig.dlq.letters == []
    assert len(rig.client.requests) == 1
    assert docs_indexed() - before == 3


def test_409_after_a_retry_under_external_versioning_is_done() -> None:
    conflict = (409, {"type": "version_conflict_engine_exception", "reason": "x"})
    rig = Rig(FakeClient({"a": 503}, {"a": conflict}), VERSION="offset")
    rig.write_and_flush("a")
    assert len(rig.client.requests) == 2
    assert rig.dlq.letters == []


def test_409_with_create_is_done() -> None:
    exists = (409, {"type": "version_conflict_engine_exception", "reason": "already exists"})
    rig = Rig(FakeClient({"a": exists}), WRITE_METHOD="create")
    rig.write_and_flush("a", "b")
    assert parse(rig.client.requests[0])[0][0] == "create"
    assert rig.dlq.letters == []
    assert len(rig.client.requests) == 1


def test_409_with_plain_index_is_dead_lettered() -> None:
    conflict = (409, {"type": "version_conflict_engine_exception", "reason": "x"})
    rig = Rig(FakeClient({"a": conflict}))
    rig.write_and_flush("a")
    assert [dl.error_class for dl in rig.dlq.letters] == [
        "elasticsearch.version_conflict_engine_exception"
    ]


def test_404_on_delete_is_done() -> None:
    rig = Rig(FakeClient({"a": 404}))
    rig.write_and_flush("a", "b", delete=True)
    assert parse(rig.client.requests[0]) == [("delete", "a"), ("delete", "b")]
    assert rig.dlq.letters == []
    assert len(rig.client.requests) == 1


def test_404_on_index_other_than_a_missing_index_is_dead_lettered() -> None:
    missing = (404, {"type": "resource_not_found_exception", "reason": "no such thing"})
    rig = Rig(FakeClient({"a": missing}))
    rig.write_and_flush("a")
    assert [dl.error_class for dl in rig.dlq.letters] == [
        "elasticsearch.resource_not_found_exception"
    ]


def test_tolerance_none_with_a_rejected_item_raises() -> None:
    s = Settings.load({"KAFKA_TOPICS": TOPIC})
    client = FakeClient({"b": (400, MAPPER_ERROR)})
    part = no_dlq_partition(s, "es-0000", client)
    part.write_batch([make_actions(s, "a", "b", first_offset=10)])
    with pytest.raises(RecordFailedError) as info:
        part.snapshot()
    assert info.value.where == "orders/1@11"
    assert info.value.stage == "index"
    assert "elasticsearch.mapper_parsing_exception" in str(info.value)


def test_tolerance_none_sends_nothing_to_the_dead_letter_topic() -> None:
    rig = Rig(FakeClient({"a": (400, MAPPER_ERROR)}), ERRORS_TOLERANCE="none")
    with pytest.raises(RecordFailedError):
        rig.write_and_flush("a")
    assert rig.dlq.sends == 0


def test_consecutive_limit_trips_on_rejections_in_a_row() -> None:
    bad = (400, MAPPER_ERROR)
    rig = Rig(FakeClient({"b": bad, "c": bad, "d": bad, "e": bad}), DLQ_MAX_CONSECUTIVE="3")
    with pytest.raises(DeadLetterLimitError, match="DLQ_MAX_CONSECUTIVE=3"):
        rig.write_and_flush("a", "b", "c", "d", "e")


def test_scattered_rejections_are_not_consecutive() -> None:
    bad = (400, MAPPER_ERROR)
    rig = Rig(FakeClient({"a": bad, "c": bad, "e": bad, "g": bad}), DLQ_MAX_CONSECUTIVE="3")
    rig.write_and_flush("a", "b", "c", "d", "e", "f", "g", "h")
    assert len(rig.dlq.letters) == 4


def test_rejections_counted_in_request_order_across_retries() -> None:
    bad = (400, MAPPER_ERROR)
    # a is retried and rejected last, but in request order the run is a, b | c ok | d
    rig = Rig(FakeClient({"a": 503, "b": bad, "d": bad}, {"a": bad}), DLQ_MAX_CONSECUTIVE="2")
    rig.write_and_flush("a", "b", "c", "d")
    assert sorted(dl.record.key or b"" for dl in rig.dlq.letters) == [b"a", b"b", b"d"]
    assert rig.part._policy.consecutive == 1
    rig.client.default = {"e": bad, "f": bad}
    with pytest.raises(DeadLetterLimitError, match="3 records in a row"):
        rig.write_and_flush("e", "f", first_offset=4)


def test_consecutive_rejections_carry_across_flushes() -> None:
    bad = (400, MAPPER_ERROR)
    rig = Rig(FakeClient(default={"c": bad, "d": bad, "e": bad, "f": bad}), DLQ_MAX_CONSECUTIVE="3")
    rig.write_and_flush("a", "b", "c", "d")  # a run of 2
    with pytest.raises(DeadLetterLimitError, match="4 records in a row"):
        rig.write_and_flush("e", "f", first_offset=4)


def test_a_success_in_the_next_flush_ends_the_run() -> None:
    bad = (400, MAPPER_ERROR)
    rig = Rig(FakeClient(default={"c": bad, "d": bad, "f": bad}), DLQ_MAX_CONSECUTIVE="2")
    rig.write_and_flush("a", "b", "c", "d")  # a run of 2
    rig.write_and_flush("e", "f", first_offset=4)  # e succeeds: the run restarts at f
    assert len(rig.dlq.letters) == 3


# ---------------------------------------------------------------- whole-request errors


def test_connection_errors_retried_with_growing_bounded_backoff() -> None:
    script = [TransportConnectionError("Connection refused") for _ in range(5)]
    script.insert(2, ConnectionTimeout("timed out"))
    rig = Rig(FakeClient(*script), rand=lambda: 0.75)
    acts = rig.write_and_flush("a", "b")
    body = b"".join(a.data for a in acts)
    assert rig.client.requests == [body] * 7  # every retry resends everything
    sleeps = rig.clock.sleeps
    assert len(sleeps) == 6
    # cap = min(max, initial * 2**attempt), delay a full-jitter draw in [0, cap] (here 0.75)
    caps = [0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    for delay, cap in zip(sleeps, caps, strict=True):
        assert delay == pytest.approx(0.75 * cap)
        assert cap / 2 <= delay <= cap
    assert max(sleeps) <= 1.0  # ES_RETRY_MAX_MS
    assert sleeps[:3] == sorted(sleeps[:3])
    assert sleeps[2] > sleeps[0]
    assert rig.dlq.letters == []


class TaskListingClient(FakeClient):
    """A FakeClient whose `GET _tasks` lists the partition's bulk for the first `polls`
    lookups; `events` is the order of bulks and lookups."""

    def __init__(self, *script: Step, polls: int) -> None:
        super().__init__(*script)
        self.polls = polls
        self.events: list[str] = []
        self.opaque_ids: list[str] = []

    def options(self, **kw: Any) -> TaskListingClient:
        if "opaque_id" in kw:
            self.opaque_ids.append(kw["opaque_id"])
        return self

    @property
    def tasks(self) -> TaskListingClient:
        return self

    def list(self, **_: Any) -> Any:
        self.events.append("tasks")
        self.polls -= 1
        listed = [{"headers": {"X-Opaque-Id": "es-sink/tok/es-0000"}}] if self.polls >= 0 else []
        return type("Answer", (), {"body": {"tasks": listed}})()

    def bulk(self, *, operations: bytes, filter_path: str) -> FakeResponse:
        self.events.append("bulk")
        return super().bulk(operations=operations, filter_path=filter_path)


def tagged_partition(s: Settings, client: TaskListingClient, clock: FakeClock) -> EsSinkPartition:
    """A partition whose bulks carry the owner token `tok` (X-Opaque-Id), without a DLQ."""
    return EsSinkPartition(
        s.es_sink_config,
        "es-0000",
        client,
        None,
        clock=clock,
        owner="tok",  # type: ignore[arg-type]
    )


def test_a_timed_out_request_is_sent_again_only_once_elasticsearch_no_longer_lists_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tasks, "POLL_S", 0.01)
    s = settings()
    client = TaskListingClient(ConnectionTimeout("timed out"), polls=2)
    part = tagged_partition(s, client, FakeClock())
    part.write_batch([make_actions(s, "a", "b")])
    part.snapshot()
    assert client.opaque_ids == ["es-sink/tok/es-0000"]  # every bulk of this partition
    # The request timed out, was listed twice, then no longer: only then sent again.
    assert client.events == ["bulk", "tasks", "tasks", "tasks", "bulk"]
    assert client.requests[0] == client.requests[1]


def test_a_timed_out_request_still_listed_past_the_retry_budget_stops_the_flow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tasks, "POLL_S", 0.01)
    s = settings(ES_RETRY_BUDGET_S="5", ES_REQUEST_TIMEOUT_S="0.1")
    clock = FakeClock()
    client = TaskListingClient(ConnectionTimeout("timed out"), polls=10**9)
    listing = client.list

    def list_and_age(**kw: Any) -> Any:  # each lookup: a second on the partition's clock
        clock.now += 1
        return listing(**kw)

    client.list = list_and_age  # type: ignore[method-assign]
    part = tagged_partition(s, client, clock)
    part.write_batch([make_actions(s, "a")])
    with pytest.raises(ElasticsearchUnavailableError, match="still queued in Elasticsearch"):
        part.snapshot()
    assert client.events.count("bulk") == 1  # never sent again


def test_a_timed_out_request_seen_queued_then_unlistable_is_never_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Listed once, then `_tasks` itself timed out (the same overload): after one bound
    the request counted as gone and was sent again while it could still land last."""
    monkeypatch.setattr(tasks, "POLL_S", 0.01)
    s = settings(ES_RETRY_BUDGET_S="30", ES_REQUEST_TIMEOUT_S="0.1")
    clock = FakeClock()
    client = TaskListingClient(ConnectionTimeout("timed out"), polls=10**9)
    listing = client.list
    lookups = 0

    def list_then_fail(**kw: Any) -> Any:  # each lookup: a second on the partition's clock
        nonlocal lookups
        clock.now += 1
        lookups += 1
        if lookups > 1:
            raise ConnectionTimeout("listing timed out")
        return listing(**kw)

    client.list = list_then_fail  # type: ignore[method-assign]
    part = tagged_partition(s, client, clock)
    part.write_batch([make_actions(s, "a")])
    with pytest.raises(ElasticsearchUnavailableError, match="still queued in Elasticsearch"):
        part.snapshot()
    assert client.events.count("bulk") == 1  # never sent again


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_whole_request_overload_is_retried(status: int) -> None:
    rig = Rig(FakeClient(api_error(status, "overloaded")))
    rig.write_and_flush("a", "b")
    assert len(rig.client.requests) == 2
    assert rig.client.requests[0] == rig.client.requests[1]
    assert len(rig.clock.sleeps) == 1
    assert rig.dlq.letters == []


def test_retry_budget_exhausted_raises_and_dead_letters_nothing() -> None:
    down = TransportConnectionError("Connection refused")
    rig = Rig(FakeClient(default=lambda _body: down), ES_RETRY_BUDGET_S="5")
    rig.part.write_batch([rig.actions("a", "b")])
    start = rig.clock.now
    with pytest.raises(ElasticsearchUnavailableError) as info:
        rig.part.snapshot()
    msg = str(info.value)
    assert "ES_RETRY_BUDGET_S=5.0" in msg
    assert "2 actions still not written" in msg
    assert "ConnectionError" in msg
    assert rig.dlq.letters == []
    assert rig.dlq.sends == 0
    elapsed = rig.clock.now - start
    assert 5 <= elapsed <= 5 + 1.0  # stops within one backoff of the budget
    assert all(d <= 1.0 for d in rig.clock.sleeps)


def test_retry_budget_also_bounds_item_retries() -> None:
    busy = (429, {"type": "es_rejected_execution_exception", "reason": "full"})
    rig = Rig(FakeClient(default={"b": busy}), ES_RETRY_BUDGET_S="3")
    with pytest.raises(ElasticsearchUnavailableError, match="1 actions still not written"):
        rig.write_and_flush("a", "b")
    assert rig.dlq.letters == []
    assert all(ids == ["b"] for ids in (rig.client.ids(i) for i in range(1, 4)))


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (api_error(401, "security_exception", AuthenticationException), 401),
        (api_error(403, "security_exception", AuthorizationException), 403),
        (api_error(400, "illegal_argument_exception"), 400),
        (api_error(404, "not found"), 404),
    ],
)
def test_whole_request_client_errors_raise_instead_of_retrying(
    error: ApiError, status: int
) -> None:
    rig = Rig(FakeClient(error))
    with pytest.raises(ConfigError, match=f"HTTP {status}"):
        rig.write_and_flush("a", "b")
    assert len(rig.client.requests) == 1
    assert rig.clock.sleeps == []
    assert rig.dlq.letters == []


# -------------------------------------------------------------------------------- 413


def too_large_if(big: str) -> Callable[[bytes], Step]:
    def step(body: bytes) -> Step:
        return api_error(413, "Request Entity Too Large") if big in str(parse(body)) else {}

    return step


def test_413_splits_and_dead_letters_the_single_too_large_action() -> None:
    rig = Rig(FakeClient(default=too_large_if("big")))
    acts = rig.write_and_flush("a", "b", "big", "c")
    requests = [rig.client.ids(i) for i in range(len(rig.client.requests))]
    assert requests == [["a", "b", "big", "c"], ["a", "b"], ["big", "c"], ["big"], ["c"]]
    assert [dl.record for dl in rig.dlq.letters] == [acts[2].record]
    letter = rig.dlq.letters[0]
    assert letter.stage == "index"
    assert letter.error_class == "elasticsearch.request_entity_too_large"
    assert "413" in letter.message  # the sink names the status, not ES's response text
    assert rig.clock.sleeps == []  # a split is not a retry


def test_413_split_counts_each_action_once() -> None:
    rig = Rig(FakeClient(default=too_large_if("big")))
    before = docs_indexed()
    rig.write_and_flush("a", "b", "big", "c")
    assert docs_indexed() - before == 3


def test_413_split_counts_each_rejection_once_for_the_run() -> None:
    rig = Rig(FakeClient(default=too_large_if("big")), DLQ_MAX_CONSECUTIVE="2")
    rig.write_and_flush("a", "big1", "big2", "c")  # 2 in a row: at the limit
    assert [dl.record.key for dl in rig.dlq.letters] == [b"big1", b"big2"]
    assert rig.part._policy.consecutive == 0
    assert (rig.part._policy.seen, rig.part._policy.failed_total) == (4, 2)
    with pytest.raises(DeadLetterLimitError, match="3 records in a row"):
        rig.write_and_flush("big3", "big4", "big5")


def test_413_rejections_count_towards_the_ratio() -> None:
    rig = Rig(
        FakeClient(default=too_large_if("big")),
        DLQ_MAX_RATIO="0.4",
        DLQ_RATIO_MIN_RECORDS="4",
    )
    rig.write_and_flush("a", "big1")  # 1 of 2 failed: below DLQ_RATIO_MIN_RECORDS
    with pytest.raises(DeadLetterLimitError):
        rig.write_and_flush("b", "big2")  # 2 of 4 failed = 50% > 40%


# ------------------------------------------------------------------------ flush triggers


def test_flush_at_bulk_max_actions() -> None:
    rig = Rig(FakeClient(), BULK_MAX_ACTIONS="3", BULK_LINGER_MS="60000")
    rig.part.write_batch([rig.actions("a", "b")])
    assert rig.client.requests == []
    rig.part.write_batch([rig.actions("c")])
    rig.settle()
    assert [rig.client.ids(0)] == [["a", "b", "c"]]
    rig.part.write_batch([rig.actions("d")])
    assert len(rig.settle()) == 1  # buffer was emptied


def test_flush_at_bulk_max_bytes_keeps_each_request_within_the_limit() -> None:
    rig = Rig(FakeClient(), BULK_MAX_BYTES="1024", BULK_LINGER_MS="60000")
    acts = rig.actions("a", "b", "c", "d", pad=250)
    assert all(300 < len(a.data) < 340 for a in acts)
    rig.part.write_batch([acts[:3]])
    assert rig.client.requests == []
    rig.part.write_batch([acts[3:]])
    rig.settle()
    assert [rig.client.ids(i) for i in range(len(rig.client.requests))] == [["a", "b", "c"]]
    rig.part.snapshot()  # "d" waited for the next bulk; the epoch's end sends it
    assert [rig.client.ids(i) for i in range(2)] == [["a", "b", "c"], ["d"]]
    assert all(len(r) <= 1024 for r in rig.client.requests)


def test_a_limit_reached_sends_the_full_bulk_and_keeps_the_few_past_it() -> None:
    """A buffer a write took a few actions past BULK_MAX_ACTIONS sends one full request and
    keeps those few for the next bulk, rather than a second request of a few documents."""
    rig = Rig(FakeClient(), BULK_MAX_ACTIONS="3", BULK_LINGER_MS="500")
    rig.part.write_batch([rig.actions("a", "b")])
    rig.clock.now += 0.4
    rig.part.write_batch([rig.actions("c", "d")])
    rig.settle()
    assert [rig.client.ids(i) for i in range(len(rig.client.requests))] == [["a", "b", "c"]]
    assert len(rig.part._buf) == 1
    assert rig.part._bytes == len(rig.part._buf[0].data)
    rig.clock.now += 0.4  # "d" has waited 400 ms, not the 800 ms since "a" came
    rig.part.write_batch([])
    assert len(rig.settle()) == 1
    rig.clock.now += 0.1
    rig.part.write_batch([rig.actions("e")])
    rig.settle()
    assert rig.client.ids(1) == ["d", "e"]


def test_a_kept_tail_stays_counted_until_it_is_sent() -> None:
    rig = Rig(FakeClient(), BULK_MAX_ACTIONS="3", BULK_LINGER_MS="60000")
    held = rig.part._held
    before = (held._held, held._sending)
    rig.part.write_batch([rig.actions(*"abcdefgh")])
    rig.settle()
    tail = sum(len(a.data) for a in rig.part._buf)
    assert [len(rig.part._buf), rig.part._bytes] == [2, tail]
    assert (held._held - before[0], held._sending - before[1]) == (tail, 0)
    rig.part.snapshot()
    assert (held._held, held._sending, rig.part._bytes) == (*before, 0)


def test_the_linger_ticker_sends_a_kept_tail() -> None:
    rig = Rig(FakeClient(), BULK_MAX_ACTIONS="3", BULK_LINGER_MS="500")
    rig.part.write_batch([rig.actions(*"abcd")])
    rig.settle()
    rig.clock.now += 0.6
    rig.part.linger()
    rig.settle()
    assert rig.client.ids(1) == ["d"]


def test_a_stop_elsewhere_sends_a_kept_tail() -> None:
    rig = Rig(FakeClient(), BULK_MAX_ACTIONS="3", BULK_LINGER_MS="60000")
    rig.part.write_batch([rig.actions(*"abcd")])
    assert rig.part.send_before_stop(time.monotonic() + 5)
    rig.settle()
    assert rig.client.ids(1) == ["d"]


def test_flush_after_bulk_linger_ms() -> None:
    rig = Rig(FakeClient(), BULK_LINGER_MS="500")
    rig.part.write_batch([rig.actions("a")])
    rig.clock.now += 0.3
    rig.part.write_batch([rig.actions("b")])
    assert rig.client.requests == []
    rig.clock.now += 0.2  # the oldest action is now 500 ms old
    rig.part.write_batch([rig.actions("c")])
    rig.settle()
    assert rig.client.ids(0) == ["a", "b", "c"]
    rig.part.write_batch([rig.actions("d")])  # a fresh buffer: its own linger
    rig.clock.now += 0.4
    rig.part.write_batch([])
    assert len(rig.settle()) == 1
    rig.clock.now += 0.1
    rig.part.write_batch([])
    rig.settle()
    assert rig.client.ids(1) == ["d"]


class GatedClient(FakeClient):
    """Holds every `_bulk` call until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Semaphore(0)

    def bulk(self, *, operations: bytes, filter_path: str) -> FakeResponse:
        self.entered.release()
        assert self.gate.wait(10)
        return super().bulk(operations=operations, filter_path=filter_path)


def test_a_full_buffer_is_sent_in_the_background_one_bulk_in_flight_per_partition() -> None:
    client = GatedClient()
    rig = Rig(client, BULK_MAX_ACTIONS="2", BULK_LINGER_MS="60000")
    rig.part.write_batch([rig.actions("a", "b")])  # returns while the bulk is in flight
    assert client.entered.acquire(timeout=10)
    assert client.requests == []
    second = threading.Thread(target=rig.part.write_batch, args=([rig.actions("c", "d")],))
    second.start()
    second.join(0.2)
    assert second.is_alive()  # waits for the partition's bulk in flight: writes stay in order
    client.gate.set()
    second.join(10)
    rig.part.snapshot()
    assert [client.ids(0), client.ids(1)] == [["a", "b"], ["c", "d"]]


def test_a_failed_background_bulk_stops_the_flow_at_the_next_call_and_close_sends_nothing() -> None:
    rig = Rig(FakeClient(api_error(401, "security_exception")), BULK_MAX_ACTIONS="1")
    rig.part.write_batch([rig.actions("a")])
    with pytest.raises(ConfigError, match="HTTP 401"):
        rig.part.write_batch([rig.actions("b")])  # waits for "a" before sending "b"
    rig.part.close()
    assert len(rig.client.requests) == 1
    assert not rig.dlq.closed


def test_linger_sends_a_buffer_no_record_reaches_any_more() -> None:
    """The ticker thread's call: Bytewax calls write_batch only when items arrive."""
    client = GatedClient()
    rig = Rig(client, BULK_LINGER_MS="500")
    rig.part.write_batch([rig.actions("a")])
    rig.part.linger()
    assert client.requests == []  # only 0 ms old
    rig.clock.now += 0.5
    rig.part.linger()
    assert client.entered.acquire(timeout=10)  # sent in the background
    rig.part.write_batch([rig.actions("b")])
    rig.clock.now += 0.5
    rig.part.linger()  # "a" still in flight: "b" waits (one bulk in flight per partition)
    client.gate.set()
    rig.settle()
    assert [client.ids(0)] == [["a"]]
    rig.part.linger()
    rig.settle()
    assert [client.ids(0), client.ids(1)] == [["a"], ["b"]]


def test_while_a_bulk_is_in_flight_linger_waits_and_the_buffer_grows() -> None:
    """Under a backlog bulks stay large; linger is for light traffic (nothing in flight)."""
    client = GatedClient()
    rig = Rig(client, BULK_MAX_ACTIONS="2", BULK_LINGER_MS="500")
    rig.part.write_batch([rig.actions("a", "b")])
    assert client.entered.acquire(timeout=10)
    rig.part.write_batch([rig.actions("c")])
    rig.clock.now += 1
    rig.part.write_batch([])  # returns at once: no dispatch, so no wait on "a", "b"
    rig.part.linger()
    assert rig.part._buf and client.requests == []
    client.gate.set()
    rig.part.snapshot()
    assert [client.ids(0), client.ids(1)] == [["a", "b"], ["c"]]


def test_linger_leaves_a_failed_bulk_to_the_worker() -> None:
    rig = Rig(FakeClient(api_error(401, "security_exception")), BULK_LINGER_MS="0")
    rig.part.write_batch([rig.actions("a")])  # sent at once (linger 0), fails
    assert rig.part._inflight is not None
    futures.wait([rig.part._inflight], timeout=10)
    rig.part._buf.extend(rig.actions("b"))
    rig.part.linger()
    assert len(rig.client.requests) == 1
    with pytest.raises(ConfigError):
        rig.part.snapshot()


def test_a_process_over_es_sink_buffer_bytes_sends_early_and_counts_back_down() -> None:
    env = {"ES_SINK_BUFFER_BYTES": "1500", "BULK_LINGER_MS": "60000"}
    first, second = Rig(FakeClient(), **env), Rig(FakeClient(), **env)
    first.part.write_batch([first.actions("a", "b", pad=250)])  # ~640 bytes: under
    assert first.settle() == []
    second.part.write_batch([second.actions("c", "d", pad=250)])  # ~1280 together
    assert first.settle() == []
    second.part.write_batch([second.actions("e", pad=250)])  # over 1500: send now
    assert len(second.settle()) == 1
    assert second.client.ids(0) == ["c", "d", "e"]
    held = second.part._held
    assert held is first.part._held  # one count per process
    first.part.snapshot()
    assert held._held == 0


def test_snapshot_always_flushes() -> None:
    rig = Rig(FakeClient(), BULK_LINGER_MS="60000")
    rig.part.write_batch([rig.actions("a"), rig.actions("b")])
    assert rig.client.requests == []
    assert rig.part.snapshot() is None
    assert rig.client.ids(0) == ["a", "b"]
    rig.part.snapshot()  # nothing buffered: no request
    assert len(rig.client.requests) == 1


def test_snapshot_puts_every_idle_partition_of_its_worker_in_flight_before_waiting() -> None:
    """Bytewax snapshots a worker's partitions one after another; waiting for each one's
    bulk before the next is sent made the epoch's end one bulk's time per partition, with
    the worker reading nothing (p99 latency)."""
    env = {"BULK_LINGER_MS": "60000"}
    first, second = Rig(GatedClient(), **env), Rig(GatedClient(), **env)
    elsewhere: list[Rig] = []  # a partition another worker thread built
    builder = threading.Thread(target=lambda: elsewhere.append(Rig(FakeClient(), **env)))
    builder.start()
    builder.join(10)
    other = elsewhere[0]
    for rig, doc in ((first, "a"), (second, "b"), (other, "c")):
        rig.part.write_batch([rig.actions(doc)])
    snap = threading.Thread(target=first.part.snapshot)
    snap.start()
    assert first.client.entered.acquire(timeout=10)
    assert second.client.entered.acquire(timeout=10)  # sent before first's bulk is written
    assert snap.is_alive()
    first.client.gate.set()
    second.client.gate.set()
    snap.join(10)
    second.part.snapshot()
    assert [first.client.ids(0), second.client.ids(0)] == [["a"], ["b"]]
    assert other.client.requests == []  # its own worker's epoch end sends it


def test_close_sends_nothing_and_leaves_the_shared_client_open() -> None:
    """Bytewax calls close() after the last snapshot() at a clean end, and while unwinding
    after an error: it must not send (or wait for) anything."""
    rig = Rig(FakeClient(), BULK_LINGER_MS="0")
    rig.part.write_batch([rig.actions("a")])
    rig.settle()
    rig.part._buf.extend(rig.actions("b"))  # as if still buffered when the flow failed
    rig.part.close()
    rig.part.linger()  # nor does the linger ticker afterwards
    assert rig.part._inflight is None
    assert [rig.client.ids(i) for i in range(len(rig.client.requests))] == [["a"]]
    assert not rig.client.closed  # one client per process, shared by every partition
    assert not rig.dlq.closed


def test_large_buffer_is_sent_in_several_requests_within_the_limits() -> None:
    rig = Rig(FakeClient(), BULK_MAX_ACTIONS="3", BULK_LINGER_MS="60000")
    ids = [f"d{i}" for i in range(8)]
    acts = rig.actions(*ids)
    rig.part.write_batch([acts[:4], acts[4:]])
    rig.settle()
    assert [rig.client.ids(i) for i in range(2)] == [ids[0:3], ids[3:6]]
    assert len(rig.client.requests) == 2  # ids[6:8] fill no request: they wait
    rig.part.snapshot()
    assert rig.client.ids(2) == ids[6:8]
    assert len(rig.client.requests) == 3
    assert b"".join(rig.client.requests) == b"".join(a.data for a in acts)


def test_large_buffer_respects_both_limits() -> None:
    rig = Rig(FakeClient(), BULK_MAX_ACTIONS="4", BULK_MAX_BYTES="1024", BULK_LINGER_MS="60000")
    ids = [f"d{i}" for i in range(10)]
    acts = rig.actions(*ids, pad=200)
    rig.part.write_batch([acts])
    rig.part.snapshot()
    sent = [doc_id for i in range(len(rig.client.requests)) for doc_id in rig.client.ids(i)]
    assert sent == ids
    for i, body in enumerate(rig.client.requests):
        assert len(body) <= 1024
        assert len(rig.client.ids(i)) <= 4


def test_an_action_larger_than_bulk_max_bytes_goes_alone() -> None:
    rig = Rig(FakeClient(), BULK_MAX_BYTES="1024", BULK_LINGER_MS="60000")
    small = rig.actions("a")
    big = rig.actions("big", pad=2000)
    rig.part.write_batch([small + big + rig.actions("c")])
    rig.part.snapshot()
    assert [rig.client.ids(i) for i in range(3)] == [["a"], ["big"], ["c"]]


# ---------------------------------------------------------- one account for every path

BUSY = (429, {"type": "es_rejected_execution_exception", "reason": "queue full"})


def test_rejections_of_an_earlier_attempt_survive_a_413_split() -> None:
    """b is refused in attempt 1, c and d retried; the retry gets 413 and is split: b must
    still reach the dead-letter topic (it vanished before)."""
    rig = Rig(FakeClient({"b": (400, MAPPER_ERROR), "c": BUSY, "d": BUSY}, api_error(413)))
    before = docs_indexed()
    acts = rig.write_and_flush("a", "b", "c", "d")
    assert [rig.client.ids(i) for i in range(4)] == [["a", "b", "c", "d"], ["c", "d"], ["c"], ["d"]]
    assert [dl.record for dl in rig.dlq.letters] == [acts[1].record]
    assert rig.dlq.letters[0].stage == "index"
    assert (rig.part._policy.seen, rig.part._policy.failed_total) == (4, 1)
    assert docs_indexed() - before == 3


def test_rejections_of_an_earlier_attempt_survive_an_over_pressure_split() -> None:
    pressure = api_error(429, "es_rejected_execution_exception")
    pressure.body = {
        "error": {
            "type": "es_rejected_execution_exception",
            "reason": "rejected execution of coordinating operation "
            "[coordinating_and_primary_bytes=0, replica_bytes=0, all_bytes=0, "
            "coordinating_operation_bytes=999999, max_coordinating_and_primary_bytes=1000]",
        }
    }
    rig = Rig(FakeClient({"b": (400, MAPPER_ERROR), "c": BUSY, "d": BUSY}, pressure))
    acts = rig.write_and_flush("a", "b", "c", "d")
    assert [dl.record for dl in rig.dlq.letters] == [acts[1].record]


def test_tolerance_none_stops_on_a_rejection_before_a_413_split() -> None:
    client = FakeClient({"b": (400, MAPPER_ERROR), "c": BUSY, "d": BUSY}, api_error(413))
    rig = Rig(client, ERRORS_TOLERANCE="none")
    with pytest.raises(RecordFailedError) as info:
        rig.write_and_flush("a", "b", "c", "d")
    assert info.value.where == "orders/1@1"


# ------------------------------------------- writes to one document in order across retries


MISSING = (404, {"type": "document_missing_exception", "reason": "document missing"})


class DocStore(FakeClient):
    """Applies the writes it acknowledges, like an index: index/create/delete by id, a
    partial update (merge), and a script, which adds `params.doc.n` to `n`. A script step
    here is a list of statuses per position (None: apply and answer)."""

    def __init__(self, *script: list[Any] | None) -> None:
        super().__init__()
        self.docs: dict[str, Any] = {}
        self.plan = list(script)

    def bulk(self, *, operations: bytes, filter_path: str) -> FakeResponse:
        self.requests.append(operations)
        forced = self.plan.pop(0) if self.plan else None
        lines = operations.split(b"\n")[:-1]
        items, i, pos = [], 0, 0
        while i < len(lines):
            ((op, meta),) = orjson.loads(lines[i]).items()
            source = None if op == "delete" else orjson.loads(lines[i + 1])
            i += 1 if op == "delete" else 2
            key = (meta["_index"], meta["_id"], meta.get("routing"))
            spec = forced[pos] if forced else None
            pos += 1
            if spec is not None:
                status, error = spec
                items.append({op: {"status": status, "error": error}})
            elif op == "delete":
                items.append({op: {"status": 200 if self.docs.pop(key, None) else 404}})
            elif op == "create" and key in self.docs:
                items.append({op: {"status": 409, "error": {"type": "version_conflict"}}})
            elif op == "update":
                items.append({op: self._update(key, source)})
            else:
                self.docs[key] = source
                items.append({op: {"status": 201}})
        return FakeResponse(answered(items))

    def _update(self, key: Any, body: dict[str, Any]) -> dict[str, Any]:
        doc = self.docs.get(key)
        if doc is None:
            if "upsert" not in body and not body.get("doc_as_upsert"):
                return {"status": MISSING[0], "error": MISSING[1]}
            self.docs[key] = body.get("upsert", body.get("doc"))
            return {"status": 201}
        if "script" in body:
            doc["n"] += body["script"]["params"]["doc"]["n"]
        else:
            doc.update(body["doc"])
        return {"status": 200}

    def doc(self, doc_id: str, index: str = TOPIC) -> Any:
        return self.docs.get((index, doc_id, None))


def versions(
    s: Settings, *writes: tuple[str, int | None], index: str | None = None
) -> list[Action]:
    """One action per (id, v): index {"v": v}, or a delete for v None; offsets in order."""
    b = ActionBuilder(s.es_documents)
    out = []
    for offset, (doc_id, v) in enumerate(writes):
        rec = Record(TOPIC, 1, offset, TS, doc_id.encode(), b"{}")
        doc = Doc(rec, None if v is None else {"v": v}, key=doc_id, delete=v is None, index=index)
        out.append(b.build(doc))
    return out


def writes(s: Settings, *writes: tuple[str, str | None, dict[str, Any] | None]) -> list[Action]:
    """One action per (id, action, document) (action None: WRITE_METHOD); offsets in order."""
    b = ActionBuilder(s.es_documents)
    return [
        b.build(Doc(Record(TOPIC, 1, offset, TS, k.encode(), b"{}"), doc, key=k, action=act))
        for offset, (k, act, doc) in enumerate(writes)
    ]


def test_a_retried_write_is_resent_with_the_later_writes_to_its_document() -> None:
    store = DocStore([BUSY, None, None])
    rig = Rig(store, WRITE_METHOD="upsert")
    acts = writes(rig.settings, ("x", "index", {"v": 1}), ("y", None, {"v": 1}),
                  ("x", None, {"w": 2}))  # fmt: skip
    rig.part.write_batch([acts])
    rig.part.snapshot()
    assert [store.ids(i) for i in range(2)] == [["x", "y", "x"], ["x", "x"]]
    assert store.doc("x") == {"v": 1, "w": 2}  # the index used to replace the update
    assert rig.dlq.letters == []


def test_an_overloaded_write_a_later_index_replaced_is_sent_again_before_it() -> None:
    """Only Elasticsearch can tell whether the overloaded write's record is bad."""
    store = DocStore([BUSY, None, None])
    rig = Rig(store)
    rig.part.write_batch([versions(rig.settings, ("x", 1), ("y", 1), ("x", 2))])
    rig.part.snapshot()
    assert [store.ids(i) for i in range(len(store.requests))] == [["x", "y", "x"], ["x", "x"]]
    assert store.doc("x") == {"v": 2}
    assert rig.dlq.letters == []


def test_a_retried_write_does_not_resurrect_a_later_delete() -> None:
    store = DocStore([BUSY, None])
    rig = Rig(store)
    rig.part.write_batch([versions(rig.settings, ("x", 1), ("x", None))])
    rig.part.snapshot()
    assert len(store.requests) == 2  # the write again, then the delete again
    assert store.doc("x") is None


@pytest.mark.parametrize("tolerance", ["all", "none"])
def test_an_update_a_later_delete_removed_is_done_not_a_missing_document(tolerance: str) -> None:
    """The retry used to send the update again after the delete: `document missing`, a
    dead letter for a good record, or under ERRORS_TOLERANCE=none a stop. Now the retry's
    update finds no document, and the delete after it in the same request decides."""
    store = DocStore([BUSY, None])
    store.docs[(TOPIC, "x", None)] = {"n": 0}
    rig = Rig(store, WRITE_METHOD="update", ERRORS_TOLERANCE=tolerance)
    rig.part.write_batch([writes(rig.settings, ("x", None, {"n": 1}), ("x", "delete", None))])
    rig.part.snapshot()
    assert store.doc("x") is None
    assert rig.dlq.letters == []
    assert len(store.requests) == 2


def test_a_retry_never_runs_a_script_twice() -> None:
    """A script after another write of its document goes in the next request: a retry of
    the earlier write re-sends the later ones, and the counter used to count 3 for 2."""
    store = DocStore([BUSY, None])
    store.docs[(TOPIC, "x", None)] = {"n": 0}
    env = {"WRITE_METHOD": "script", "ES_SCRIPT_SOURCE": "ctx._source.n += params.doc.n"}
    rig = Rig(store, **env, ON_MISSING_DOCUMENT="upsert")
    one = {"n": 1}
    rig.part.write_batch(
        [writes(rig.settings, ("x", None, one), ("y", None, one), ("x", None, one))]
    )
    rig.part.snapshot()
    assert store.doc("x") == {"n": 2} and store.doc("y") == {"n": 1}
    assert [store.ids(i) for i in range(len(store.requests))] == [["x", "y"], ["x"], ["x"]]
    assert rig.dlq.letters == []


def test_later_writes_to_other_documents_or_indices_are_not_resent() -> None:
    store = DocStore([BUSY, None, None])
    rig = Rig(store)
    acts = versions(rig.settings, ("x", 1), ("y", 2)) + versions(
        rig.settings, ("x", 3), index="other"
    )
    rig.part.write_batch([acts])
    rig.part.snapshot()
    assert [store.ids(i) for i in range(2)] == [["x", "y", "x"], ["x"]]


def test_a_later_write_that_was_refused_is_not_resent() -> None:
    store = DocStore([BUSY, (400, MAPPER_ERROR)])
    rig = Rig(store)
    acts = versions(rig.settings, ("x", 1), ("x", 2))
    rig.part.write_batch([acts])
    rig.part.snapshot()
    assert [store.ids(i) for i in range(2)] == [["x", "x"], ["x"]]
    assert [dl.record for dl in rig.dlq.letters] == [acts[1].record]
    assert store.doc("x") == {"v": 1}


def test_create_keeps_the_later_write_when_the_first_one_was_retried() -> None:
    """The documented residual of WRITE_METHOD=create: the first write was refused for a
    while and the second created the document, so the first now finds it there (409,
    done): the document holds the second record, not the first."""
    store = DocStore([BUSY, None])
    rig = Rig(store, WRITE_METHOD="create")
    rig.part.write_batch([versions(rig.settings, ("x", 1), ("x", 2))])
    rig.part.snapshot()
    assert store.doc("x") == {"v": 2}
    assert rig.dlq.letters == []


# --------------------------------------- blocks, bounded item retries, configuration errors


def test_a_write_block_is_dead_lettered_at_once() -> None:
    """403 index.blocks.write / read_only (ILM readonly) stays until an admin lifts it."""
    block = (
        403,
        {
            "type": "cluster_block_exception",
            "reason": "index [logs-2024.01.01] blocked by: [FORBIDDEN/8/index write (api)];",
        },
    )
    rig = Rig(FakeClient({"b": block}))
    acts = rig.write_and_flush("a", "b", "c")
    assert len(rig.client.requests) == 1
    assert rig.clock.sleeps == []
    assert [dl.record for dl in rig.dlq.letters] == [acts[1].record]
    letter = rig.dlq.letters[0]
    assert (letter.stage, letter.error_class) == ("index", "elasticsearch.cluster_block_exception")
    assert "FORBIDDEN/8/index write" in letter.message


def test_a_write_block_stops_the_flow_under_tolerance_none() -> None:
    block = (403, {"type": "cluster_block_exception", "reason": "FORBIDDEN/8/index write"})
    rig = Rig(FakeClient({"b": block}), ERRORS_TOLERANCE="none")
    with pytest.raises(RecordFailedError, match="cluster_block_exception"):
        rig.write_and_flush("a", "b")


def test_flood_stage_block_is_retried_under_the_budget_not_the_item_limit() -> None:
    flood = (
        429,
        {"type": "cluster_block_exception", "reason": "TOO_MANY_REQUESTS/12/disk usage exceeded"},
    )
    rig = Rig(FakeClient(*[{"a": flood}] * 5), ES_ITEM_RETRY_MAX="1")
    rig.write_and_flush("a")
    assert len(rig.client.requests) == 6
    assert rig.dlq.letters == []


def test_item_5xx_is_retried_es_item_retry_max_times_then_dead_lettered() -> None:
    broken = (500, {"type": "illegal_state_exception", "reason": "ingest processor failed"})
    rig = Rig(FakeClient(default={"b": broken}), ES_ITEM_RETRY_MAX="3", ES_RETRY_BUDGET_S="1")
    acts = rig.write_and_flush("a", "b")
    assert [rig.client.ids(i) for i in range(len(rig.client.requests))] == [["a", "b"]] + [
        ["b"]
    ] * 3
    assert [dl.record for dl in rig.dlq.letters] == [acts[1].record]
    letter = rig.dlq.letters[0]
    assert letter.error_class == "elasticsearch.illegal_state_exception"
    assert letter.message == "ingest processor failed (retried 3 times, ES_ITEM_RETRY_MAX=3)"
    assert len(rig.clock.sleeps) == 3  # backoff between attempts, no budget error


def test_item_retry_max_defaults_to_ten_retries() -> None:
    rig = Rig(FakeClient(default={"a": 503}))
    rig.write_and_flush("a")
    assert len(rig.client.requests) == 11
    assert "retried 10 times" in rig.dlq.letters[0].message


def test_bounded_item_retries_stop_the_flow_under_tolerance_none() -> None:
    rig = Rig(FakeClient(default={"a": 503}), ES_ITEM_RETRY_MAX="2", ERRORS_TOLERANCE="none")
    with pytest.raises(RecordFailedError, match="retried 2 times"):
        rig.write_and_flush("a")


def test_item_429s_are_not_bounded_by_es_item_retry_max() -> None:
    rig = Rig(FakeClient(*[{"a": BUSY}] * 4), ES_ITEM_RETRY_MAX="1")
    rig.write_and_flush("a")
    assert len(rig.client.requests) == 5
    assert rig.dlq.letters == []


@pytest.mark.parametrize(
    ("status", "setting", "hint"),
    [
        (403, "ES_HOSTS", "lack a privilege"),
        (401, "ES_HOSTS", "check ES_USERNAME/ES_PASSWORD"),
    ],
)
def test_item_security_exception_stops_the_flow_as_a_configuration_error(
    status: int, setting: str, hint: str
) -> None:
    denied = (
        status,
        {
            "type": "security_exception",
            "reason": "action [indices:data/write/bulk[s]] is unauthorized",
        },
    )
    rig = Rig(FakeClient({"a": denied, "b": denied}))
    with pytest.raises(ConfigError) as info:
        rig.write_and_flush("a", "b")
    msg = str(info.value)
    assert msg.startswith(
        f"{setting}: Elasticsearch refused writes to index {TOPIC} with HTTP {status}"
    )
    assert hint in msg
    assert "\n" not in msg
    assert rig.dlq.letters == []
    assert failing.failing()


def test_item_index_not_found_stops_the_flow_naming_es_index() -> None:
    missing = (
        404,
        {
            "type": "index_not_found_exception",
            "reason": "no such index [orders] and [action.auto_create_index] is [false]",
        },
    )
    rig = Rig(FakeClient({"a": missing}))
    with pytest.raises(ConfigError) as info:
        rig.write_and_flush("a")
    msg = str(info.value)
    assert msg.startswith(f"ES_INDEX: index {TOPIC} does not exist")
    assert "action.auto_create_index" in msg
    assert rig.dlq.letters == []


def test_a_delete_on_a_missing_index_is_done_and_counted_not_found() -> None:
    missing = (404, {"type": "index_not_found_exception", "reason": "no such index [orders]"})
    rig = Rig(FakeClient({"a": missing, "b": 404}))
    before = deletes_not_found()
    rig.write_and_flush("a", "b", "c", delete=True)
    assert rig.dlq.letters == []
    assert deletes_not_found() - before == 2


# ---------------------------------------------------------- deletes that found nothing


def deletes_not_found() -> float:
    return REGISTRY.get_sample_value("es_sink_deletes_not_found_total") or 0.0


def test_deletes_answered_404_are_counted_and_logged_in_the_summary(caplog) -> None:
    rig = Rig(FakeClient({"a": 404, "c": 404}))
    before = deletes_not_found()
    rig.write_and_flush("a", "b", "c", delete=True)
    assert deletes_not_found() - before == 2
    rig.clock.now += 61
    with caplog.at_level("INFO", logger="sinks.elasticsearch"):
        rig.part.snapshot()
    assert "indexed=3 dead_lettered=0 deletes_not_found=2 bulks=1" in caplog.text


def test_deletes_that_found_nothing_are_counted_when_everything_else_was_written() -> None:
    """Elasticsearch answers such a bulk `errors: false` (see `answered`)."""
    rig = Rig(FakeClient({"b": 404}))
    before = deletes_not_found()
    rig.part.write_batch([rig.actions("a"), rig.actions("b", "c", delete=True, first_offset=1)])
    rig.part.snapshot()
    assert deletes_not_found() - before == 1
    assert rig.part._stats["deletes_not_found"] == 1 and rig.part._stats["indexed"] == 3


def test_a_no_error_bulk_counts_no_delete_not_found() -> None:
    rig = Rig(FakeClient())
    before = deletes_not_found()
    rig.write_and_flush("a", delete=True)
    assert deletes_not_found() == before


# ----------------------------------------------------- fan-out: one record, several actions


def fan_out(s: Settings, *ids: str, offset: int = 0) -> list[Action]:
    """Actions with different ids made from ONE record (as a fan-out transform does)."""
    b = ActionBuilder(s.es_documents)
    rec = Record(TOPIC, 1, offset, TS, b"k", b"{}")
    return [b.build(Doc(rec, {"n": i}, id=doc_id)) for i, doc_id in enumerate(ids)]


def test_a_fanned_out_record_with_one_refused_action_counts_once() -> None:
    rig = Rig(FakeClient({"x2": (400, MAPPER_ERROR)}))
    acts = fan_out(rig.settings, "x1", "x2", "x3")
    rig.part.write_batch([acts])
    rig.part.snapshot()
    assert [dl.record for dl in rig.dlq.letters] == [acts[0].record]
    policy = rig.part._policy
    assert (policy.failed_total, policy.consecutive) == (1, 1)


@pytest.mark.parametrize("crossed", [False, True], ids=["local", "from-another-process"])
def test_a_fanned_out_record_with_all_actions_refused_is_one_dead_letter(crossed: bool) -> None:
    """Also when the chunk came from another process (pickled by Bytewax's exchange)."""
    bad = (400, MAPPER_ERROR)
    rig = Rig(FakeClient({"x1": bad, "x2": bad, "x3": bad}), DLQ_MAX_CONSECUTIVE="1")
    acts: list[Action] = Actions(fan_out(rig.settings, "x1", "x2", "x3"))
    if crossed:
        acts = pickle.loads(pickle.dumps(acts))
    rig.part.write_batch([acts])
    rig.part.snapshot()  # one failed record: DLQ_MAX_CONSECUTIVE=1 is not passed
    assert len(rig.dlq.letters) == 1
    assert rig.dlq.sends == 1
    assert rig.part._policy.failed_total == 1


@pytest.mark.parametrize("crossed", [False, True], ids=["local", "from-another-process"])
def test_refused_actions_that_kept_their_message_are_a_dead_letter_each(crossed: bool) -> None:
    """An action made without a `Record` keeps its consumed message (`Action.origin`);
    its `record` is a new object at each read, so a record is counted by its origin:
    every refused record is its own dead letter, with its own bytes and coordinates."""
    bad = (400, MAPPER_ERROR)
    rig = Rig(FakeClient({f"m{i}": bad for i in range(0, 40, 3)}))
    b = ActionBuilder(rig.settings.es_documents)
    messages = [
        Message(topic=TOPIC, partition=1, offset=i, key=f"m{i}".encode(),
                value=b'{"n": %d}' % i, timestamp=(TIMESTAMP_CREATE_TIME, TS),
                headers=[("h", b"%d" % i)])
        for i in range(40)
    ]  # fmt: skip
    acts: list[Action] = Actions(
        b.build_raw(m, TOPIC, m.value(), m.key().decode()) for m in messages
    )
    if crossed:
        acts = pickle.loads(pickle.dumps(acts))
    rig.part.write_batch([acts])
    rig.part.snapshot()
    got = sorted((dl.record for dl in rig.dlq.letters), key=lambda r: r.offset)
    assert got == [
        Record(TOPIC, 1, i, TS, f"m{i}".encode(), b'{"n": %d}' % i, (("h", b"%d" % i),))
        for i in range(0, 40, 3)
    ]
    assert rig.part._policy.failed_total == len(got) == 14
    assert rig.part._policy.seen == 40  # each refused record counted failed, not also ok


# -------------------------------------------- ERRORS_TOLERANCE=none: the earliest refused offset


def test_tolerance_none_names_the_earliest_refused_offset_of_other_partitions() -> None:
    """Records of one Kafka partition spread over sink partitions by id. Partition A
    refuses offset 7 and is joined first; B's bulk, still in flight, refuses offset 3:
    the flow must stop on offset 3."""
    s = Settings.load({"KAFKA_TOPICS": TOPIC})
    a_client = FakeClient({"a": (400, MAPPER_ERROR)})
    b_client = GatedClient()
    b_client.default = {"b": (400, MAPPER_ERROR)}
    a = no_dlq_partition(s, "es-0000", a_client)
    b = no_dlq_partition(s, "es-0001", b_client)
    b.write_batch([make_actions(s, "b", first_offset=3)])
    with b._lock:
        b._dispatch()  # B's bulk is in flight (held at the gate)
    assert b_client.entered.acquire(timeout=10)
    a.write_batch([make_actions(s, "a", first_offset=7)])
    threading.Timer(0.3, b_client.gate.set).start()
    with pytest.raises(RecordFailedError) as info:
        a.snapshot()
    assert info.value.where == "orders/1@3"
    with pytest.raises(RecordFailedError) as info_b:
        b.snapshot()
    assert info_b.value.where == "orders/1@3"


def test_tolerance_none_sends_what_other_partitions_buffer_before_it_stops() -> None:
    """Bytewax calls no snapshot() once a partition raised: a record before the refused one,
    routed by id to another partition and still in its buffer, was never written (found
    by the chaos harness's strict mode with one worker). It is sent before the stop."""
    s = Settings.load({"KAFKA_TOPICS": TOPIC, "BULK_LINGER_MS": "60000"})
    a_client, b_client = FakeClient({"a": (400, MAPPER_ERROR)}), FakeClient()
    a = no_dlq_partition(s, "es-0000", a_client)
    b = no_dlq_partition(s, "es-0001", b_client)
    b.write_batch([make_actions(s, "b", first_offset=3)])
    a.write_batch([make_actions(s, "a", first_offset=7)])
    assert b_client.requests == []  # buffered, below every limit
    with pytest.raises(RecordFailedError, match="orders/1@7"):
        a.snapshot()
    assert b_client.ids(0) == ["b"]
    b.snapshot()  # nothing left to send, nothing refused


def test_tolerance_none_sends_a_busy_partitions_buffer_once_its_bulk_is_written() -> None:
    s = Settings.load({"KAFKA_TOPICS": TOPIC, "BULK_LINGER_MS": "60000"})
    b_client = GatedClient()
    a_client = FakeClient({"a": (400, MAPPER_ERROR)})
    a = no_dlq_partition(s, "es-0000", a_client)
    b = no_dlq_partition(s, "es-0001", b_client)
    b.write_batch([make_actions(s, "b1", first_offset=2)])
    with b._lock:
        b._dispatch()  # B's first bulk is in flight (held at the gate)
    assert b_client.entered.acquire(timeout=10)
    b.write_batch([make_actions(s, "b2", first_offset=3)])
    a.write_batch([make_actions(s, "a", first_offset=7)])
    threading.Timer(0.3, b_client.gate.set).start()
    with pytest.raises(RecordFailedError, match="orders/1@7"):
        a.snapshot()
    assert [b_client.ids(0), b_client.ids(1)] == [["b1"], ["b2"]]
    b.snapshot()


def test_tolerance_none_two_partitions_refusing_at_once_do_not_wait_for_each_other(
    monkeypatch,
) -> None:
    """Each holds its own lock, with its buffer still unsent, while it stops: neither may
    wait for the other's."""
    monkeypatch.setattr("sinks.elasticsearch.refusals.REFUSAL_WAIT_S", 3.0)
    s = Settings.load({"KAFKA_TOPICS": TOPIC, "BULK_LINGER_MS": "60000"})
    gated = [GatedClient(), GatedClient()]
    parts = []
    for i, (c, doc) in enumerate(zip(gated, ["a", "b"], strict=True)):
        c.default = {doc: (400, MAPPER_ERROR)}
        part = no_dlq_partition(s, f"es-000{i}", c)
        part.write_batch([make_actions(s, doc, first_offset=3 + 4 * i)])
        with part._lock:
            part._dispatch()  # the bulk that will be refused is in flight
        assert c.entered.acquire(timeout=10)
        part.write_batch([make_actions(s, doc + "-later", first_offset=20 + i)])
        parts.append(part)
    errors: list[str] = []

    def stop(part: EsSinkPartition) -> None:
        with pytest.raises(RecordFailedError) as info:
            part.snapshot()
        errors.append(info.value.where)

    threads = [threading.Thread(target=stop, args=(p,)) for p in parts]
    for t in threads:
        t.start()
    time.sleep(0.2)  # both in snapshot(): each holds its lock, its buffer not yet sent
    started = time.monotonic()
    for c in gated:
        c.gate.set()
    for t in threads:
        t.join(10)
    assert time.monotonic() - started < 2.0
    assert sorted(errors) == ["orders/1@3", "orders/1@3"]


def test_tolerance_none_waits_for_other_bulks_only_a_bounded_time(monkeypatch) -> None:
    monkeypatch.setattr("sinks.elasticsearch.refusals.REFUSAL_WAIT_S", 0.2)
    s = Settings.load({"KAFKA_TOPICS": TOPIC})
    stuck = GatedClient()
    a = no_dlq_partition(s, "es-0000", FakeClient({"a": (400, MAPPER_ERROR)}))
    b = no_dlq_partition(s, "es-0001", stuck)
    b.write_batch([make_actions(s, "b", first_offset=3)])
    with b._lock:
        b._dispatch()
    assert stuck.entered.acquire(timeout=10)
    a.write_batch([make_actions(s, "a", first_offset=7)])
    started = time.monotonic()
    try:
        with pytest.raises(RecordFailedError, match="orders/1@7"):
            a.snapshot()
    finally:
        stuck.gate.set()
    assert time.monotonic() - started < 2.0  # 0.2 s for the busy peer, 0.2 for its bulk


def test_tolerance_none_sends_a_tail_kept_behind_a_slow_bulk_of_a_busy_peer(monkeypatch) -> None:
    """S's head (K@1, K@2) is in flight past the first REFUSAL_WAIT_S and S keeps K@3,
    which Elasticsearch refuses, as its tail: the stop asks S again while it waits for the
    bulks in flight, so it names K@3, not P's K@7."""
    monkeypatch.setattr("sinks.elasticsearch.refusals.REFUSAL_WAIT_S", 0.4)
    s = Settings.load({"KAFKA_TOPICS": TOPIC, "BULK_LINGER_MS": "60000", "BULK_MAX_ACTIONS": "2"})
    slow = GatedClient()
    slow.default = {"s3": (400, MAPPER_ERROR)}
    peer = no_dlq_partition(s, "es-0001", slow)
    stopping = no_dlq_partition(s, "es-0000", FakeClient({"p": (400, MAPPER_ERROR)}))
    peer.write_batch([make_actions(s, "s1", "s2", "s3", first_offset=1)])
    assert slow.entered.acquire(timeout=10)  # the head is in flight, "s3" kept
    stopping.write_batch([make_actions(s, "p", first_offset=7)])
    threading.Timer(0.6, slow.gate.set).start()  # after the first wait, within the second
    with pytest.raises(RecordFailedError) as info:
        stopping.snapshot()
    assert info.value.where == "orders/1@3"
    assert [slow.ids(i) for i in range(len(slow.requests))] == [["s1", "s2"], ["s3"]]


def test_tolerance_none_stop_beats_while_it_waits(monkeypatch) -> None:
    """The stop waits up to twice REFUSAL_WAIT_S for peers and bulks: in steps, each a
    sign of life, so that /health/live does not call the stopping worker wedged."""
    beats: list[float] = []
    monkeypatch.setattr("sinks.progress.beat", lambda: beats.append(time.monotonic()))
    monkeypatch.setattr("sinks.elasticsearch.refusals.BEAT_S", 0.1)
    error = RecordFailedError("orders/1@3", "index", "refused")
    monkeypatch.setattr(refusals, "_REFUSED", {("orders", 1): (3, error)})
    free_at = time.monotonic() + 0.5

    class Busy:
        def send_before_stop(self, deadline: float) -> bool:
            time.sleep(max(0.0, min(deadline, free_at) - time.monotonic()))
            return time.monotonic() >= free_at

    bulk: futures.Future[None] = futures.Future()
    threading.Timer(1.0, bulk.set_result, args=(None,)).start()

    class Bulks:
        def in_flight(self) -> list[futures.Future[None]]:
            return [bulk]

    started = time.monotonic()
    assert refusals.stop_on(("orders", 1), [Busy()], Bulks()) is error
    assert 0.9 < time.monotonic() - started < 2.0
    assert len(beats) >= 8  # every 0.1 s over the ~1 s of waiting


# ----------------------------------------- the process budget has no cliff (weakness 8)


def test_over_budget_with_bulks_in_flight_a_small_buffer_waits_instead_of_a_tiny_bulk() -> None:
    """Full bulks in flight alone fill ES_SINK_BUFFER_BYTES (4 x 8 MiB > 24 MiB with the
    defaults): a write to another partition used to send its few actions as a bulk of
    their own, every time. It now waits until bulks in flight are written."""
    env = {"ES_SINK_BUFFER_BYTES": "2100", "BULK_MAX_BYTES": "1024", "BULK_LINGER_MS": "60000"}
    gated = [GatedClient() for _ in range(3)]
    busy = [Rig(c, **env) for c in gated[:2]]
    quiet = Rig(gated[2], **env)
    try:
        for rig in busy:  # two full bulks (~1,300 bytes each) in flight: over 2,100
            rig.part.write_batch([rig.actions("a", "b", "c", "d", pad=250)])
        for c in gated[:2]:
            assert c.entered.acquire(timeout=10)
        writer = threading.Thread(target=quiet.part.write_batch, args=([quiet.actions("q")],))
        writer.start()
        writer.join(0.3)
        assert writer.is_alive()  # back-pressure: waits for the bulks in flight
        assert not gated[2].entered.acquire(timeout=0.1)  # and sent no tiny bulk
        for c in gated[:2]:
            c.gate.set()
        writer.join(10)
        assert not writer.is_alive()
        assert gated[2].requests == [] and quiet.part._buf  # still buffered: under budget now
        gated[2].gate.set()
        quiet.part.snapshot()
        assert gated[2].ids(0) == ["q"]
    finally:
        for c in gated:
            c.gate.set()
    for rig in busy:
        rig.part.snapshot()
    assert quiet.part._held._held == 0


def test_over_budget_a_buffer_of_at_least_its_share_is_sent_early() -> None:
    env = {"ES_SINK_BUFFER_BYTES": "2000", "BULK_LINGER_MS": "60000"}
    first, second = Rig(FakeClient(), **env), Rig(FakeClient(), **env)
    assert first.part._held.share(8 * 1024 * 1024) == 1000  # the budget over 2 partitions
    first.part.write_batch([first.actions("a", "b", "c", pad=250)])  # ~920 bytes
    second.part.write_batch([second.actions("d", "e", "f", "g", pad=250)])  # ~1,230 >= 1,000
    assert second.settle() and first.settle() == []
    first.part.snapshot()


# ------------------------------------------------ the flow is failing: stop, send nothing


def test_once_the_flow_is_failing_retries_stop_and_joins_return() -> None:
    rig = Rig(FakeClient(default={"a": BUSY}))
    rig.part.write_batch([rig.actions("a")])
    with rig.part._lock:
        rig.part._dispatch()
    while len(rig.client.requests) < 3:
        threading.Event().wait(0.01)
    failing.mark()
    with pytest.raises(ElasticsearchUnavailableError, match="the flow is stopping"):
        rig.part.snapshot()


def test_an_error_surfacing_in_one_partition_marks_the_flow_failing() -> None:
    rig = Rig(FakeClient(api_error(401, "security_exception")))
    with pytest.raises(ConfigError):
        rig.write_and_flush("a")
    assert failing.failing()
    other = Rig(FakeClient(), BULK_LINGER_MS="0")
    other.part._buf.extend(other.actions("b"))
    other.part.linger()
    assert other.client.requests == []


# -------------------------------------------------------------- per-process resources


def test_first_calls_of_the_shared_budget_race_to_one_object(monkeypatch) -> None:
    import sinks.elasticsearch.workers as es_mod

    real = es_mod._HeldBytes

    class Slow(real):  # type: ignore[misc, valid-type]
        def __init__(self, limit: int) -> None:
            threading.Event().wait(0.05)
            super().__init__(limit)

    monkeypatch.setattr(es_mod, "_HeldBytes", Slow)
    barrier = threading.Barrier(8)
    got: list[object] = []

    def first_call() -> None:
        barrier.wait()
        got.append(es_mod.held_bytes(987_654))

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(got) == 8
    assert len({id(x) for x in got}) == 1  # one budget for the process, not several


# ------------------------------------- Bytewax's close(): after snapshot, or while unwinding


def _run_bytewax(monkeypatch: pytest.MonkeyPatch, client: FakeClient, fail_on: str | None) -> None:
    """The real ElasticsearchSink in a real Bytewax dataflow, with a fake client."""
    from datetime import timedelta

    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSource, run_main

    from sinks.elasticsearch import ElasticsearchSink

    monkeypatch.setattr("sinks.elasticsearch.shared_client", lambda _s: client)
    s = Settings.load({"KAFKA_TOPICS": TOPIC, "BULK_LINGER_MS": "60000"})

    def check(item: tuple[str, list[Action]]) -> tuple[str, list[Action]]:
        if item[1][0].id == fail_on:
            raise RuntimeError("a later step of the flow failed")
        return item

    flow = Dataflow("close-contract")
    acts = make_actions(s, "a", "b", "c", "d")
    stream = op.input("in", flow, TestingSource([("0", [a]) for a in acts]))
    op.output("es", op.map("check", stream, check), ElasticsearchSink(s.es_sink_config, 1))
    run_main(flow, epoch_interval=timedelta(seconds=30))


def test_bytewax_flushes_at_a_clean_end_through_snapshot_not_close(monkeypatch) -> None:
    client = FakeClient()
    _run_bytewax(monkeypatch, client, fail_on=None)
    assert [client.ids(i) for i in range(len(client.requests))] == [["a", "b", "c", "d"]]


def test_bytewax_unwinding_after_an_error_sends_nothing(monkeypatch) -> None:
    """a, b, c are buffered (one 30 s epoch, 60 s linger) when the flow fails on d: Bytewax
    calls close() while unwinding, which used to send them (and could block there)."""
    client = FakeClient()
    with pytest.raises(Exception, match=r'error calling `mapper` in step "close-contract\.check'):
        _run_bytewax(monkeypatch, client, fail_on="d")
    assert client.requests == []


def test_retry_waits_are_full_jitter_draws_below_the_cap() -> None:
    """docs/configuration.md: ES_RETRY_INITIAL_MS/ES_RETRY_MAX_MS are a full-jitter, doubling
    backoff."""
    down = TransportConnectionError("Connection refused")
    draws = iter([0.0, 0.1, 0.99, 0.5] * 10)
    rig = Rig(FakeClient(*[down] * 8), rand=lambda: next(draws))
    rig.write_and_flush("a")
    caps = [0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert rig.clock.sleeps == pytest.approx(
        [u * c for u, c in zip([0.0, 0.1, 0.99, 0.5] * 2, caps, strict=True)]
    )
    assert rig.clock.sleeps[1] < caps[1] / 2  # below cap/2: not the old equal jitter
