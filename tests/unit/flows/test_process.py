"""flows.process.Processor on constructed confluent_kafka Messages (no broker)."""

from __future__ import annotations

import ctypes
import json
import random
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, Message, cimpl

from flows import halt
from flows.config import Settings
from flows.errors import ConfigError, DeadLetterLimitError, RecordFailedError
from flows.process import Processor, is_documents, sink_partition
from flows.record import DeadLetter, Doc, Record
from sinks.actions import Action
from sinks.deep import deep_recursion
from sinks.elasticsearch.actions import ActionBuilder
from sinks.model import record_of
from tests.support import fuzz_inputs, sample_transforms

SAMPLE = sample_transforms.__name__

TOPIC = "orders"
TS = 1_714_564_800_123
PARTS = 4


@pytest.fixture(autouse=True)
def _no_held_failures():
    halt.clear()
    yield
    halt.clear()


def held_error(partition: int = 5) -> RecordFailedError:
    """The failure the processor held for `partition` (ERRORS_TOLERANCE=none)."""
    found = halt.held(TOPIC, partition)
    assert found is not None, "no failure held"
    return found[1]


def settings(**env: str) -> Settings:
    return Settings.load({"KAFKA_TOPICS": TOPIC, **env})


def tolerant(**env: str) -> Settings:
    return settings(ERRORS_TOLERANCE="all", DLQ_TOPIC="dead", **env)


def msg(
    value: bytes | None,
    key: bytes | None = b"k1",
    *,
    offset: int = 0,
    partition: int = 5,
    headers: list[tuple[str, bytes]] | None = None,
    timestamp: int | None = TS,
) -> Message:
    ts = (
        (TIMESTAMP_CREATE_TIME, timestamp)
        if timestamp is not None
        else (TIMESTAMP_NOT_AVAILABLE, 0)
    )
    kwargs: dict[str, Any] = {
        "topic": TOPIC,
        "partition": partition,
        "offset": offset,
        "key": key,
        "value": value,
        "timestamp": ts,
    }
    if headers is not None:
        kwargs["headers"] = headers
    return Message(**kwargs)


def good(key: str, offset: int = 0, **source: Any) -> Message:
    return msg(orjson.dumps({"id": key, **source}), key.encode(), offset=offset)


def run(
    s: Settings, batch: list[Message], transforms: list[Any] | None = None, parts: int = PARTS
) -> list[tuple[str, Any]]:
    return Processor(s, transforms or [], parts)(batch)


def chunks(out: list[tuple[str, Any]]) -> dict[str, list[Action]]:
    result: dict[str, list[Action]] = {}
    for part, item in out:
        if is_documents((part, item)):
            assert part not in result  # one chunk per partition and batch
            result[part] = item
    return result


def letters(out: list[tuple[str, Any]]) -> list[tuple[str, DeadLetter]]:
    return [(p, item) for p, item in out if isinstance(item, DeadLetter)]


def all_actions(out: list[tuple[str, Any]]) -> list[Action]:
    return [a for c in chunks(out).values() for a in c]


def part_of(doc_id: str, parts: int = PARTS) -> str:
    return str(sink_partition(doc_id, parts, "murmur2"))  # ES_SINK_ROUTING_HASH's default


def librdkafka_partitioner(name: str) -> Callable[[bytes, int], int]:
    """librdkafka's `rd_kafka_msg_partitioner_<name>`: where a confluent-kafka producer with
    that partitioner puts a key. Found through the extension module that links librdkafka."""
    fn = getattr(ctypes.CDLL(cimpl.__file__), f"rd_kafka_msg_partitioner_{name}")
    fn.restype = ctypes.c_int32
    fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int32]
    fn.argtypes += [ctypes.c_void_p, ctypes.c_void_p]
    return lambda key, n: int(fn(None, key, len(key), n, None, None))


def action_lines(action: Action) -> list[Any]:
    return [orjson.loads(line) for line in action.data.split(b"\n")[:-1]]


# ------------------------------------------------------------------------------ documents


@pytest.mark.parametrize(
    ("routing_hash", "partitioner"), [("murmur2", "murmur2"), ("crc32", "consistent")]
)
@pytest.mark.parametrize("as_is", ["true", "false"])
def test_a_document_goes_to_the_partition_kafka_puts_its_key_in(
    routing_hash: str, partitioner: str, as_is: str
) -> None:
    """With key ids a Kafka partition's documents stay in one sink partition (on the worker
    that read them) when ES_SINK_ROUTING_HASH names the producers' partitioner: the
    processor's placement is librdkafka's own, over random ASCII and non-ASCII keys."""
    place = librdkafka_partitioner(partitioner)
    rand = random.Random(7)
    alphabet = "abcXYZ019-_:/é€😀"
    keys = {"".join(rand.choices(alphabet, k=rand.randint(1, 40))) for _ in range(300)}
    batch = [good(k, i) for i, k in enumerate(sorted(keys))]
    for parts in (1, 7, 8, 120):
        env = {"ES_SINK_ROUTING_HASH": routing_hash, "JSON_AS_IS": as_is}
        out = chunks(run(settings(**env), batch, parts=parts))
        placed = {a.id: int(part) for part, acts in out.items() for a in acts}
        assert placed.keys() == keys
        for k, part in placed.items():
            assert k is not None
            assert part == place(k.encode(), parts) == sink_partition(k, parts, routing_hash)


def test_the_routing_hash_is_checked() -> None:
    with pytest.raises(ConfigError, match="ES_SINK_ROUTING_HASH"):
        settings(ES_SINK_ROUTING_HASH="fnv1a")


def test_good_json_goes_to_its_partition() -> None:
    out = run(settings(), [good("k1", 0), good("user-42", 1), good("zz", 2)])
    assert letters(out) == []
    by_part = chunks(out)
    for part, acts in by_part.items():
        for a in acts:
            assert a.id is not None
            assert part == part_of(a.id)
    ids = sorted(a.id for a in all_actions(out) if a.id)
    assert ids == ["k1", "user-42", "zz"]
    k1 = next(a for a in all_actions(out) if a.id == "k1")
    assert k1 in by_part[part_of("k1")]
    assert action_lines(k1) == [
        {"index": {"_index": "orders", "_id": "k1"}},
        {"id": "k1"},
    ]
    assert (k1.record.topic, k1.record.partition, k1.record.offset) == (TOPIC, 5, 0)
    assert k1.record.timestamp == TS


def test_chunks_keep_record_order_within_a_partition() -> None:
    batch = [good("same", i, n=i) for i in range(5)]
    out = run(settings(), batch)
    assert list(chunks(out)) == [part_of("same")]
    acts = chunks(out)[part_of("same")]
    assert [a.record.offset for a in acts] == [0, 1, 2, 3, 4]
    assert [action_lines(a)[1]["n"] for a in acts] == [0, 1, 2, 3, 4]


def test_same_key_always_lands_in_the_same_partition() -> None:
    s = settings()
    keys = [f"key-{i}" for i in range(40)]
    first = {a.id: p for p, c in chunks(run(s, [good(k) for k in keys])).items() for a in c}
    again = {
        a.id: p for p, c in chunks(run(s, [good(k) for k in reversed(keys)])).items() for a in c
    }
    assert first == again
    assert first == {k: part_of(k) for k in keys}
    assert len(set(first.values())) > 1  # the keys really spread over partitions


def test_documents_without_id_use_the_record_partition() -> None:
    out = run(settings(DOC_ID="none"), [msg(b'{"a":1}', partition=6)])
    assert list(chunks(out)) == [str(6 % PARTS)]
    assert all_actions(out)[0].id is None


def test_null_key_uses_coordinates_as_id() -> None:
    out = run(settings(), [msg(b'{"a":1}', key=None, offset=9)])
    (action,) = all_actions(out)
    assert action.id == "orders-5-9"
    assert list(chunks(out)) == [part_of("orders-5-9")]


def test_missing_timestamp_is_none() -> None:
    out = run(tolerant(ES_DATA_STREAM="true"), [msg(b"{}", timestamp=None), good("b", 1)])
    ((_, letter),) = letters(out)  # a data stream needs a timestamp for @timestamp
    assert letter.record.timestamp is None
    assert letter.stage == "index"
    (action,) = all_actions(out)
    assert action_lines(action)[1]["@timestamp"] == TS


# ----------------------------------------------------------------------- bad records


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (b'{"a": ', "invalid JSON"),
        (b"not json", "invalid JSON"),
        (b"[1, 2]", "got array"),
        (b"42", "got number"),
        (b'"text"', "got string"),
        (b"null", "got null"),
    ],
)
def test_bad_value_is_a_deserialize_dead_letter(value: bytes, words: str) -> None:
    out = run(tolerant(), [good("a", 0), msg(value, offset=1, partition=6), good("b", 2)])
    assert sorted(a.id or "" for a in all_actions(out)) == ["a", "b"]
    ((part, letter),) = letters(out)
    assert part == str(6 % PARTS)
    assert letter.stage == "deserialize"
    assert letter.error_class == "flows.decode.DecodeError"
    assert words in letter.message
    assert letter.record.offset == 1


def test_bad_value_with_tolerance_none_is_held_and_stops_its_partition() -> None:
    """The records before it go on to the sink (one of them may be refused there, and is
    then the record the flow stops on); nothing after it in its partition does."""
    other = msg(b'{"id": "c"}', b"c", offset=9, partition=2)
    batch = [good("a", 0), msg(b"[1]", offset=7), good("b", 8), other]
    out = run(settings(), batch)
    assert sorted(a.id or "" for a in all_actions(out)) == ["a", "c"]
    assert letters(out) == []
    error = held_error()
    assert error.where == "orders/5@7"
    assert error.stage == "deserialize"
    assert "got array" in str(error)
    assert halt.held(TOPIC, 5) == (7, error)
    assert halt.held(TOPIC, 2) is None


def test_a_held_partition_emits_nothing_from_later_batches() -> None:
    proc = Processor(settings(), [], PARTS)
    proc([msg(b"{", offset=3)])
    other = msg(b"{}", b"other", partition=1)
    assert [a.id for a in all_actions(proc([good("late", 4), other]))] == ["other"]
    assert proc([good("late", 5)]) == []
    assert held_error().where == "orders/5@3"


def test_each_batch_records_how_far_it_examined_each_partition() -> None:
    """Bytewax concatenates the batches of a worker's source partitions: every run of one
    partition counts, including a held one (the source never snapshots past what this
    recorded, flows.halt)."""
    batch = [
        good("a", 3),
        msg(b"{}", b"b", offset=7, partition=1),
        good("c", 4),
        msg(b"{", offset=5),  # held: 5 and what follows are examined, not emitted
        good("d", 6),
        msg(b"{}", b"e", offset=8, partition=1),
    ]
    out = run(settings(), batch)
    assert sorted(a.id or "" for a in all_actions(out)) == ["a", "b", "c", "e"]
    assert halt.EXAMINED == {(TOPIC, 5): 7, (TOPIC, 1): 9}
    assert held_error().where == "orders/5@5"
    run(settings(), [good("late", 7)])
    assert halt.EXAMINED[(TOPIC, 5)] == 8


def test_only_the_first_failure_of_a_partition_is_held() -> None:
    run(settings(), [msg(b"{", offset=3)])
    run(settings(), [msg(b"[]", offset=2)])  # a replayed, earlier one is not in the batch
    assert held_error().where == "orders/5@3"


def test_bad_json_key_is_a_deserialize_dead_letter() -> None:
    out = run(tolerant(KEY_FORMAT="json"), [msg(b"{}", key=b"{not json")])
    ((_, letter),) = letters(out)
    assert letter.stage == "deserialize"
    assert "invalid JSON" in letter.message


def test_null_key_with_on_null_key_dlq_is_an_index_dead_letter() -> None:
    out = run(tolerant(ON_NULL_KEY="dlq"), [msg(b"{}", key=None)])
    assert chunks(out) == {}
    ((_, letter),) = letters(out)
    assert letter.stage == "index"
    assert letter.error_class == "sinks.actions.ActionError"


def test_dead_letters_keep_the_original_bytes() -> None:
    headers = [("trace", b"\x00\xffid"), ("trace", b"second"), ("empty", b"")]
    raw_value = b'\xff\xfe{"broken'
    out = run(tolerant(), [msg(raw_value, key=b"\x01key\xff", headers=headers, offset=3)])
    ((_, letter),) = letters(out)
    assert letter.record.value == raw_value
    assert letter.record.key == b"\x01key\xff"
    assert letter.record.headers == tuple(headers)
    assert letter.record.timestamp == TS
    assert (letter.record.topic, letter.record.partition, letter.record.offset) == (TOPIC, 5, 3)


# ------------------------------------------------ integers beyond 64 bits, checked late


def _canonical(line: bytes) -> bytes:
    """One spelling of a JSON line (orjson's; `json`'s for what is too deep for orjson)."""
    if not line:
        return line
    try:
        return orjson.dumps(orjson.loads(line))
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        with deep_recursion():
            return json.dumps(json.loads(line), separators=(",", ":")).encode()


def _outcomes(out: list[tuple[str, Any]]) -> list[tuple[Any, ...]]:
    """What a batch sends, comparable across processors: the lines as JSON, since a value
    sent as it arrived (`RawObjects`) keeps the producer's spelling."""
    sent = [
        (p, a.id, [_canonical(line) for line in a.data.split(b"\n")], a.record.offset)
        for p, c in chunks(out).items()
        for a in c
    ]
    dead = [(p, d.stage, d.error_class, d.message, d.record.offset) for p, d in letters(out)]
    return sorted(sent) + sorted(dead)


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"DOC_ID": "field:id"},
        {"DOC_ID": "none"},
        {"WRITE_METHOD": "update"},
        {"WRITE_METHOD": "upsert"},
        {"WRITE_METHOD": "script", "ES_SCRIPT_SOURCE": "ctx._source.putAll(params.doc)"},
        {"ES_DATA_STREAM": "true", "ES_INDEX": "logs-x-y"},
        {"ES_ROUTING": "key", "ES_PIPELINE": "p1"},
    ],
    ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()) or "defaults",
)
def test_json_values_without_transforms_fail_as_with_them(env: dict[str, str]) -> None:
    """Without transforms a JSON value's 64-bit integer check runs only when its action
    holds a `+` (`flows.decode.json.IntsChecked`), or the value goes as it arrived
    (`RawObjects`); with a transform it runs in the decoder. Over the fuzz inputs (every bad
    kind, integers beyond 64 bits in three places; no duplicate keys, see the next tests)
    both send the same documents and the same dead letters."""
    cases = fuzz_inputs.generate(7, n_bad=1500)
    batch = [
        msg(c.value, c.key, offset=i, headers=list(c.headers) or None) for i, c in enumerate(cases)
    ]
    big = [i for i, c in enumerate(cases) if c.kind == "int_beyond_64_bits"]
    assert len(big) > 20
    s = tolerant(**env)
    late = _outcomes(run(s, batch))
    assert Processor(s, [], PARTS)._check_ints is not None  # the late check is what ran
    assert late == _outcomes(run(s, batch, transforms=[lambda doc: doc]))
    dead = {row[4]: row for row in late if len(row) == 5}
    assert all(dead[i][1] == "deserialize" for i in big)


@pytest.mark.parametrize(
    ("env", "as_is"),
    [
        ({}, True),
        ({"DOC_ID": "coordinates"}, True),
        ({"DOC_ID": "none"}, True),
        ({"WRITE_METHOD": "create"}, True),
        ({"DOC_ID": "field:id"}, False),  # the id is read from the document
        ({"ES_ROUTING": "key"}, False),  # the action line holds more than _index and _id
        ({"WRITE_METHOD": "update"}, False),  # the source is wrapped
        ({"ES_DATA_STREAM": "true", "ES_INDEX": "logs-x-y"}, False),  # @timestamp is added
        ({"VALUE_FORMAT": "connect-json"}, False),  # another converter
        ({"JSON_AS_IS": "false"}, False),  # turned off: a duplicate key keeps its last value
    ],
    ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else str(v),
)
def test_a_valid_value_goes_as_it_arrived_when_nothing_reads_it(
    env: dict[str, str], as_is: bool
) -> None:
    """`RawObjects`: the source line is the record's bytes, spacing, escapes and number
    spelling included, unless something needs the decoded document."""
    value = b'{"id": "a1",  "t": "\\u00e9", "n": 1E2, "s": "x"} '
    (action,) = all_actions(run(tolerant(**env), [msg(value, b"a1")]))
    assert (action.data.split(b"\n")[1] == value) is as_is
    (changed,) = all_actions(run(tolerant(**env), [msg(value, b"a1")], [lambda doc: doc]))
    assert changed.data.split(b"\n")[1] != value  # a transform always re-encodes


@pytest.mark.parametrize("routing_hash", ["murmur2", "crc32"])
@pytest.mark.parametrize(
    "env",
    [{}, {"ES_INDEX": "o-{yyyy.MM}"}, {"ES_INDEX_MAP": "orders:o2"}, {"DOC_ID": "coordinates"}],
    ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()) or "defaults",
)
def test_the_inlined_common_case_sends_what_build_raw_sends(
    routing_hash: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The processor writes the action of a value sent as it arrived with its ASCII key as
    id itself (`ActionBuilder.key_id_head`): the same partitions, ids, bytes and origins as
    through `build_raw`, in order, over keys JSON escapes, of 0, 1, 128, 129 and 513
    characters, non-ASCII, missing, in runs of two topics (one refused as an index) and
    partitions, into 3 and 4 sink partitions."""
    keys = [b"a", b'q"u', b"b\\s", b"c\x01\x1f", b"d\x7f", b"", b"x" * 128, b"y" * 129]
    keys += ["\u00e9".encode(), None, b"k2", b"k3", b"z" * 513]
    batch = [
        Message(topic=topic, partition=part, offset=i, key=k, value=b'{"n": %d}' % i,
                timestamp=(TIMESTAMP_CREATE_TIME, TS))
        for topic in (TOPIC, "Orders")
        for part in (3, 1)
        for i, k in enumerate(keys)
    ]  # fmt: skip
    s = tolerant(ES_SINK_ROUTING_HASH=routing_hash, **env)
    build_raw = ActionBuilder.build_raw
    calls: list[object] = []

    def counted(self: ActionBuilder, *args: Any) -> Action:
        calls.append(args[0])
        return build_raw(self, *args)

    monkeypatch.setattr(ActionBuilder, "build_raw", counted)

    def sent(out: list[tuple[str, Any]]) -> list[tuple[Any, ...]]:  # in order
        docs = [(p, a.id, a.data, a.origin) for p, c in chunks(out).items() for a in c]
        return docs + [(p, d.message, d.record.offset) for p, d in letters(out)]

    inlined = [sent(run(s, batch, parts=n)) for n in (3, PARTS)]
    lane = 2 * len(batch) - len(calls)
    monkeypatch.setattr(ActionBuilder, "key_id_head", lambda self, topic: None)
    assert inlined == [sent(run(s, batch, parts=n)) for n in (3, PARTS)]
    assert lane == (2 * 16 if env in ({}, {"ES_INDEX_MAP": "orders:o2"}) else 0)
    refused = "index name 'Orders' must be lower case"  # the name `{topic}` gives
    assert (refused in repr(inlined)) is ("ES_INDEX" not in env)


def test_an_index_name_json_cannot_hold_makes_dead_letters_not_a_crash() -> None:
    """A lone surrogate in ES_INDEX (an undecodable byte in the environment) passes the
    name rules, but JSON cannot hold it: each record is a dead letter at stage `index`,
    not an error out of the batch (`ActionBuilder.key_id_head` must not raise)."""
    out = run(tolerant(ES_INDEX="ab\udcff-{topic}"), [good("k1"), good("k2", 1)])
    assert not chunks(out)
    assert [(d.stage, d.record.offset) for _, d in letters(out)] == [("index", 0), ("index", 1)]


def test_a_duplicate_key_goes_as_it_arrived() -> None:
    """The difference `RawObjects` accepts: Elasticsearch, not orjson, reads the duplicate
    (and refuses it: `test_a_duplicate_key_is_refused_by_elasticsearch`); a transform sees
    orjson's document, whose last value wins."""
    value = b'{"a": 1, "a": 2}'
    (action,) = all_actions(run(tolerant(), [msg(value)]))
    assert action.data.endswith(b"\n" + value + b"\n")
    (changed,) = all_actions(run(tolerant(), [msg(value)], [lambda doc: doc]))
    assert action_lines(changed)[1] == {"a": 2}


@pytest.mark.parametrize(
    "value",
    [b'{"a": 18446744073709551616, "a": 1}', b'{"o": {"x": -9223372036854775809, "x": 0}}'],
)
def test_an_integer_beyond_64_bits_a_duplicate_key_replaces(value: bytes) -> None:
    """The one difference `IntsChecked` accepts: orjson keeps a duplicate key's last value,
    so the document holds no such integer; indexed without transforms (as it is), refused
    with them (the decoder reads the bytes)."""
    (action,) = all_actions(run(tolerant(), [msg(value)]))
    assert b"+" not in action.data and b"1844674" not in action.data
    out = run(tolerant(), [msg(value)], transforms=[lambda doc: doc])
    ((_, letter),) = letters(out)
    assert letter.stage == "deserialize" and "does not fit in 64 bits" in letter.message


def test_an_integer_beyond_64_bits_is_a_decode_error_before_an_action_error() -> None:
    """The decoder's error comes first, as when it checked the integers itself."""
    out = run(tolerant(DOC_ID="field:id"), [msg(b'{"n": 18446744073709551616}')])
    ((_, letter),) = letters(out)
    assert (letter.stage, letter.error_class) == ("deserialize", "flows.decode.DecodeError")
    assert "does not fit in 64 bits" in letter.message


@pytest.mark.parametrize(
    "value",
    [
        b'{"big": 1e+300, "small": -2.5e+17}',  # floats with an exponent: a `+`, no big int
        b'{"text": "+1 12345678901234567890123"}',  # digits in a string: the exact check
        b'{"n": 18446744073709551615, "m": -9223372036854775808}',  # the 64-bit extremes
    ],
)
def test_a_plus_without_a_big_integer_is_indexed(value: bytes) -> None:
    (action,) = all_actions(run(tolerant(), [msg(value)]))
    assert action_lines(action)[1] == orjson.loads(value)


def test_an_integer_beyond_64_bits_with_tolerance_none_stops_the_flow() -> None:
    out = run(settings(), [good("a", 0), msg(b'{"n": [-9223372036854775809]}', offset=1)])
    assert [a.id for a in all_actions(out)] == ["a"]
    error = held_error()
    assert (error.where, error.stage) == ("orders/5@1", "deserialize")
    assert "does not fit in 64 bits" in str(error)


# ------------------------------------------------------------------------- tombstones


def test_tombstone_ignored_by_default() -> None:
    assert run(settings(), [msg(None)]) == []


def test_tombstone_delete() -> None:
    out = run(settings(ON_NULL_VALUE="delete"), [msg(None, key=b"gone")])
    assert letters(out) == []
    (action,) = all_actions(out)
    assert action.id == "gone"
    assert action_lines(action) == [{"delete": {"_index": "orders", "_id": "gone"}}]
    assert list(chunks(out)) == [part_of("gone")]


def test_tombstone_dlq_is_routed_without_tripping_tolerance_none() -> None:
    s = settings(ON_NULL_VALUE="dlq", DLQ_TOPIC="dead")  # ERRORS_TOLERANCE=none
    out = run(s, [msg(None, key=b"k", headers=[("h", b"v")], partition=7), good("a", 1)])
    ((part, letter),) = letters(out)
    assert part == str(7 % PARTS)
    assert letter.stage == "deserialize"
    assert letter.error_class == "NullValue"
    assert "ON_NULL_VALUE=dlq" in letter.message
    assert letter.record.value is None
    assert letter.record.key == b"k"
    assert letter.record.headers == (("h", b"v"),)
    assert [a.id for a in all_actions(out)] == ["a"]


def test_tombstone_fail_is_held() -> None:
    out = run(settings(ON_NULL_VALUE="fail"), [good("a", 0), msg(None, offset=1)])
    assert [a.id for a in all_actions(out)] == ["a"]
    assert held_error().where == "orders/5@1"
    assert "ON_NULL_VALUE=fail" in str(held_error())


# ------------------------------------------------------------------------- transforms


def test_raising_python_transform_is_a_transform_dead_letter() -> None:
    s = tolerant(TRANSFORMS=f"{SAMPLE}:boom")
    out = run(s, [good("a", 0)])
    assert chunks(out) == {}
    ((_, letter),) = letters(out)
    assert letter.stage == "transform"
    assert letter.error_class == "builtins.RuntimeError"
    assert letter.message == "boom"
    assert letter.stacktrace is None


def test_transform_error_with_stacktrace() -> None:
    s = tolerant(TRANSFORMS=f"{SAMPLE}:boom", DLQ_STACKTRACE="true")
    ((_, letter),) = letters(run(s, [good("a", 0)]))
    assert letter.stacktrace is not None
    assert "RuntimeError: boom" in letter.stacktrace


def test_user_transform_raising_with_tolerance_none() -> None:
    def explode(doc: Doc) -> Doc:
        raise KeyError("missing")

    assert run(settings(), [good("a", 4)], [explode]) == []
    assert held_error().stage == "transform"
    assert "builtins.KeyError" in held_error().reason


def test_fan_out_makes_two_actions() -> None:
    s = settings(TRANSFORMS=f"{SAMPLE}:fan_out")
    out = run(s, [good("a", 0)])
    acts = all_actions(out)
    assert sorted(a.id or "" for a in acts) == ["a-0", "a-1"]
    for part, chunk in chunks(out).items():
        for a in chunk:
            assert part == part_of(a.id or "")
    bodies = sorted(action_lines(a)[1]["part"] for a in acts)
    assert bodies == [0, 1]
    assert acts[0].record is acts[1].record


def test_dropped_records_produce_nothing() -> None:
    out = run(settings(TRANSFORMS=f"{SAMPLE}:drop_everything"), [good("a"), good("b")])
    assert out == []


def test_transform_changes_reach_the_action() -> None:
    (action,) = all_actions(run(settings(TRANSFORMS=f"{SAMPLE}:modify"), [good("a")]))
    assert action_lines(action)[1] == {"id": "a", "modified": True}


# ----------------------------------------------------------------------- error policy


def test_consecutive_limit_across_batches() -> None:
    p = Processor(tolerant(DLQ_MAX_CONSECUTIVE="3"), [], PARTS)
    p([msg(b"x", offset=0), msg(b"x", offset=1)])
    p([msg(b"x", offset=2)])
    with pytest.raises(DeadLetterLimitError, match="4 records in a row"):
        p([msg(b"x", offset=3)])


def test_a_success_at_the_end_of_a_batch_resets_the_run() -> None:
    p = Processor(tolerant(DLQ_MAX_CONSECUTIVE="2"), [], PARTS)
    p([msg(b"x", offset=0), msg(b"x", offset=1), good("a", 2)])
    p([msg(b"x", offset=3), msg(b"x", offset=4)])
    with pytest.raises(DeadLetterLimitError):
        p([msg(b"x", offset=5)])


@pytest.mark.parametrize("split", [0, 3])
def test_a_run_ended_inside_a_batch_trips_the_limit(split: int) -> None:
    p = Processor(tolerant(DLQ_MAX_CONSECUTIVE="3"), [], PARTS)
    bad = [msg(b"x", offset=i) for i in range(4)]  # 4 failures in a row, then a success
    with pytest.raises(DeadLetterLimitError):
        if split:
            p(bad[:split])
        p([*bad[split:], good("a", 4)])


def _everything(out: list[tuple[str, Any]]) -> list[tuple[Any, ...]]:
    """What a batch sends, each action with its record in full, in order."""
    return [
        (p, a.id, a.data, record_of(a.origin))
        if isinstance(a, Action)
        else (p, a.stage, a.error_class, a.message, a.record)
        for p, item in out
        for a in (item if is_documents((p, item)) else [item])
    ]


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"DOC_ID": "coordinates"},
        {"DOC_ID": "none"},
        {"ES_INDEX": "orders-{yyyy.MM.dd}"},  # a date pattern: its name is never cached
        {"ES_INDEX_MAP": "orders:o-{yyyy.MM}", "ON_NULL_KEY": "dlq"},
        {"ERRORS_TOLERANCE": "log"},
        {"ERRORS_TOLERANCE": "none"},  # each partition stops on its first failure
    ],
    ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()) or "defaults",
)
def test_actions_without_a_record_are_those_with_one(env: dict[str, str]) -> None:
    """A JSON object sent as it arrived with an ASCII string key keeps its message as the
    action's origin (no `Record` made); the general path, which makes one, sends the same
    actions from the same records, the same dead letters and holds the same failures, over
    the fuzz inputs (keys null, empty, over 512 bytes, not UTF-8, non-ASCII; every bad
    value) in three partitions, with and without timestamps and headers."""
    cases = fuzz_inputs.generate(11, n_bad=800)
    records = [
        Record(TOPIC, i % 3, i, None if i % 7 == 0 else TS, c.key, c.value,
               tuple(c.headers) or ((("h", b"v"),) if i % 7 == 0 else ()))
        for i, c in enumerate(cases)
    ]  # fmt: skip
    batch = [
        msg(r.value, r.key, offset=r.offset, partition=r.partition, timestamp=r.timestamp,
            headers=list(r.headers) or None)
        for r in sorted(records, key=lambda r: r.partition)  # in runs of one partition
    ]  # fmt: skip
    s = settings(**env) if "ERRORS_TOLERANCE" in env else tolerant(**env)
    general = Processor(s, [], PARTS)
    general._loop = general._as_is  # every record through `record_of` and the key decoder
    want = _everything(general(batch))
    want_held = {k: (o, str(e)) for k, (o, e) in halt.HELD.items()}
    halt.clear()
    out = Processor(s, [], PARTS)(batch)
    assert _everything(out) == want
    assert {k: (o, str(e)) for k, (o, e) in halt.HELD.items()} == want_held
    assert all(row[-1] == records[row[-1].offset] for row in want)
    kept = [a.origin for a in all_actions(out)]
    assert sum(isinstance(o, Message) for o in kept) > len(kept) // 2  # the fast path ran
    if env.get("ERRORS_TOLERANCE") == "none":
        assert len(want_held) == 3
    else:
        assert any(isinstance(o, Record) for o in kept)  # and the general one
