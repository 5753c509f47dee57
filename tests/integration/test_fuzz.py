"""Bad-input fuzzing end to end: over 10,000 bad records (tests/support/fuzz_inputs.py) mixed
with good ones, against the real broker and node.

With ERRORS_TOLERANCE=all every bad record must end in the dead-letter topic, once, with its
original key, value and headers and a reason at the right stage, every good record must be
indexed as it was sent, the flow must exit 0 and commit the end offsets. With `none` the flow
must stop at the first bad record, name it, and commit nothing past it.

Inputs the product gets wrong have their own strict-xfail tests at the end; set
ES_SINK_FUZZ_SEED to explore other seeds.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Sequence

import orjson
import pytest

from tests.support import fuzz_inputs
from tests.support.flows import (
    committed_offsets,
    consume_all,
    count_docs,
    create_topic,
    run_flow,
    search_all,
    start_flow,
)
from tests.support.fuzz_inputs import Case

pytestmark = pytest.mark.integration

P = "__connect.errors."
OWN = (P, "__es_sink.")  # the headers a dead letter gets beside the original ones
SEED = int(os.environ.get("ES_SINK_FUZZ_SEED", "20240501"))


# ------------------------------------------------------------------------------ helpers


def _produce_cases(
    kafka: str, topic: str, cases: Sequence[Case], partitions: int = 1, **conf: object
) -> dict[tuple[int, int], Case]:
    """Produce the cases round-robin over the partitions, in order; map (partition, offset)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": kafka,
            "linger.ms": 20,
            "enable.idempotence": True,
            "message.max.bytes": 16777216,
            **conf,
        }
    )
    where: dict[tuple[int, int], Case] = {}
    errors: list[object] = []

    def delivered(case: Case):
        def cb(err, msg):
            if err is not None:
                errors.append((case.kind, err))
            else:
                where[msg.partition(), msg.offset()] = case

        return cb

    for i, case in enumerate(cases):
        while True:
            try:
                producer.produce(
                    topic,
                    key=case.key,
                    value=case.value,
                    headers=list(case.headers),
                    partition=i % partitions,
                    on_delivery=delivered(case),
                )
                break
            except BufferError:
                producer.poll(0.5)
        producer.poll(0)
    assert producer.flush(120) == 0
    assert not errors, errors[:5]
    assert len(where) == len(cases)
    return where


def _end_offsets(kafka: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "fuzz-watermarks"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def _fuzz_env(topic: str, dlq: str, tolerance: str = "all", **extra: str) -> dict[str, str]:
    """Dead-letter everything that can be (null keys and tombstones too), breaker off."""
    return {
        "KAFKA_TOPICS": topic,
        "KAFKA_GROUP_ID": topic,
        "DLQ_TOPIC": dlq,
        "ERRORS_TOLERANCE": tolerance,
        "ON_NULL_KEY": "dlq",
        "ON_NULL_VALUE": "dlq",
        "DLQ_MAX_CONSECUTIVE": "0",
        "DLQ_MAX_RATIO": "0",
        "BYTEWAX_DATAFLOW_API_ENABLED": "",
        **extra,
    }


def _check_dead_letters(
    kafka: str, dlq: str, topic: str, where: dict[tuple[int, int], Case]
) -> list[str]:
    """Every bad case dead-lettered exactly once, as it should be; problems as text."""
    problems: list[str] = []
    letters = consume_all(kafka, dlq, timeout=120)
    seen: Counter[tuple[int, int]] = Counter()
    for m in letters:
        headers = list(m.headers() or [])
        ctx = {k[len(P) :]: v.decode() for k, v in headers if k.startswith(P)}
        try:
            coord = (int(ctx["partition"]), int(ctx["offset"]))
        except (KeyError, ValueError):
            problems.append(f"dead letter without coordinates: {ctx}")
            continue
        seen[coord] += 1
        case = where.get(coord)
        if case is None:
            problems.append(f"dead letter for unknown record {coord}")
            continue
        label = f"{case.kind} at {coord} (value {(case.value or b'')[:60]!r})"
        if case.stage is None:
            problems.append(f"good record dead-lettered: {label}: {ctx}")
            continue
        if ctx.get("topic") != topic:
            problems.append(f"{label}: topic header {ctx.get('topic')!r}")
        if ctx.get("stage") != case.stage:
            problems.append(f"{label}: stage {ctx.get('stage')!r}, expected {case.stage!r}")
        message = ctx.get("exception.message", "")
        if not message.strip():
            problems.append(f"{label}: empty exception.message")
        elif case.reason.lower() not in message.lower():
            problems.append(f"{label}: message {message[:200]!r} lacks {case.reason!r}")
        if case.error_class not in ctx.get("exception.class.name", ""):
            problems.append(
                f"{label}: class {ctx.get('exception.class.name')!r}, expected {case.error_class!r}"
            )
        if m.key() != case.key:
            problems.append(f"{label}: key {m.key()!r:.80} is not the original")
        if m.value() != case.value:
            problems.append(f"{label}: value is not the original bytes")
        original = [(k, v) for k, v in headers if not k.startswith(OWN)]
        if original != list(case.headers):
            problems.append(f"{label}: original headers {original} != {list(case.headers)}")
    for coord, n in seen.items():
        if n > 1:
            problems.append(f"{where[coord].kind} at {coord} dead-lettered {n} times")
    for coord, case in where.items():
        if case.stage is not None and coord not in seen:
            problems.append(
                f"bad record not dead-lettered: {case.kind} at {coord} "
                f"(value {(case.value or b'')[:80]!r})"
            )
    return problems


def _check_indexed(es: object, index: str, where: dict[tuple[int, int], Case]) -> list[str]:
    """Every good case indexed under its key with its source; nothing else indexed."""
    problems: list[str] = []
    docs = search_all(es, index) if es.indices.exists(index=index) else {}  # type: ignore[attr-defined]
    good = {c.key.decode(): c for c in where.values() if c.stage is None and c.key is not None}
    for doc_id, case in good.items():
        if doc_id not in docs:
            problems.append(f"good record not indexed: {case.kind} {doc_id[:60]!r}")
        elif docs[doc_id] != case.expected_source():
            problems.append(f"{case.kind} {doc_id[:60]!r}: source differs from what was sent")
    by_key = {c.key: c for c in where.values() if c.key is not None}
    for doc_id in docs.keys() - good.keys():
        case = by_key.get(doc_id.encode())
        kind = case.kind if case else "?"
        problems.append(f"indexed but should not be: {kind} {doc_id[:60]!r}")
    return problems


def _summary(problems: list[str], limit: int = 40) -> str:
    return f"{len(problems)} problems, the first {limit}:\n" + "\n".join(problems[:limit])


# ------------------------------------------------------------------------------ tolerance all


def test_fuzz_generator_is_deterministic_and_self_consistent():
    cases = fuzz_inputs.generate(SEED, n_bad=10_000)
    assert cases == fuzz_inputs.generate(SEED, n_bad=10_000)
    assert cases != fuzz_inputs.generate(SEED + 1, n_bad=10_000)
    for case in cases:
        fuzz_inputs.check(case)
    assert sum(c.bad for c in cases) >= 10_000
    assert {c.kind for c in cases} == {k.name for k in fuzz_inputs.KINDS} | {"good"}
    assert len({c.key for c in cases if c.stage is None}) == sum(c.stage is None for c in cases)


def test_fuzz_every_bad_record_is_dead_lettered_and_every_good_one_indexed(services, es, names):
    topic = names("fuzz")
    dlq = names("fuzz-dlq")
    create_topic(services.kafka, topic, 3)
    create_topic(services.kafka, dlq, 2)
    es.indices.create(
        index=topic, mappings=fuzz_inputs.MAPPING, settings=fuzz_inputs.INDEX_SETTINGS
    )
    cases = fuzz_inputs.generate(SEED, n_bad=10_000)
    where = _produce_cases(services.kafka, topic, cases, partitions=3)

    run = run_flow(services, _fuzz_env(topic, dlq), timeout=240)
    assert run.returncode == 0, run.output[-5000:]

    problems = _check_dead_letters(services.kafka, dlq, topic, where)
    problems += _check_indexed(es, topic, where)
    assert not problems, _summary(problems)
    assert committed_offsets(services.kafka, topic, topic) == _end_offsets(services.kafka, topic, 3)


# ------------------------------------------------------------------------------ tolerance none

NONE_CASES = [
    ("invalid_utf8", True),
    ("trailing_garbage", True),
    ("deep_nesting", True),
    ("int_beyond_64_bits", True),
    ("key_invalid_utf8", True),
    ("null_key", True),
    ("key_too_long", True),
    ("deep_nesting_es", False),
    ("reserved_field", False),
    ("type_conflict", False),
    ("reserved_field", True),
    ("type_conflict", True),
    ("deep_nesting_es", True),
]


@pytest.mark.parametrize(("kind", "later_bad"), NONE_CASES)
def test_fuzz_errors_tolerance_none_stops_at_the_first_bad_record(
    services, es, names, kind, later_bad
):
    """The first bad record at offset 6 of one partition, good ones around it, and with
    `later_bad` a second (undecodable) one at offset 11, in the same consume batch: the flow
    stops on offset 6 even when only Elasticsearch refuses it (see flows/halt.py)."""
    prefix = f"fuzz-none-{kind.replace('_', '-')}{'-2' if later_bad else ''}"
    topic, dlq = names(prefix), names(f"{prefix}-dlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)
    es.indices.create(
        index=topic, mappings=fuzz_inputs.MAPPING, settings=fuzz_inputs.INDEX_SETTINGS
    )
    rng = random.Random(f"{SEED}-{kind}")
    first_bad = 6
    cases = [
        Case("good", f"g-{i}".encode(), orjson.dumps({"i": i}), None) for i in range(first_bad)
    ]
    cases.append(fuzz_inputs.make_case(kind, rng, 1000))
    cases += [Case("good", f"h-{i}".encode(), orjson.dumps({"i": i}), None) for i in range(4)]
    if later_bad:
        cases.append(fuzz_inputs.make_case("invalid_json", rng, 2000))
    cases += [Case("good", f"j-{i}".encode(), orjson.dumps({"i": i}), None) for i in range(4)]
    _produce_cases(services.kafka, topic, cases)

    run = run_flow(services, _fuzz_env(topic, dlq, "none"), timeout=120)
    assert run.returncode > 0, run.output[-3000:]  # an error exit, not killed by a signal
    stage = cases[first_bad].stage
    assert f"record {topic}/0@{first_bad} failed at stage {stage}" in run.output, run.output[-3000:]
    raised = [ln for ln in run.output.splitlines() if "RecordFailedError: record" in ln]
    assert raised, run.output[-3000:]
    assert f"{topic}/0@{first_bad} failed" in raised[-1], raised  # the error the flow stopped on
    committed = committed_offsets(services.kafka, topic, topic)[0]
    assert committed == -1001 or 0 <= committed <= first_bad, committed


# ------------------------------------------------------------------------------ avro


AVRO_SCHEMA = orjson.dumps(
    {
        "type": "record",
        "name": "Fuzz",
        "namespace": "test",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": "string"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
    }
).decode()


def test_fuzz_avro_unknown_schema_ids_and_bad_framing_are_dead_lettered(
    services, es, names, registry
):
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = names("fuzz-avro")
    dlq = names("fuzz-avro-dlq")
    none_topic = names("fuzz-avro-none")
    none_dlq = names("fuzz-avro-none-dlq")
    for t in (topic, dlq, none_topic, none_dlq):
        create_topic(services.kafka, t, 2 if t == topic else 1)
    client = registry.client()
    ctx = SerializationContext(topic, MessageField.VALUE)
    record_ser = AvroSerializer(client, AVRO_SCHEMA)
    string_ser = AvroSerializer(client, '"string"')
    first = record_ser({"id": -1, "name": "probe", "tags": []}, ctx)
    known_id = int.from_bytes(first[1:5], "big")
    cases = fuzz_inputs.avro_cases(
        lambda d: record_ser(d, ctx), lambda s: string_ser(s, ctx), known_id, SEED
    )
    where = _produce_cases(services.kafka, topic, cases, partitions=2)
    env = _fuzz_env(topic, dlq, VALUE_FORMAT="avro", SCHEMA_REGISTRY_URL=registry.url)
    run = run_flow(services, env, timeout=180)
    assert run.returncode == 0, run.output[-5000:]

    # ERRORS_TOLERANCE=none: an unknown schema id stops the flow at that record.
    unknown = b"\x00" + (987654).to_bytes(4, "big") + b"\x02\x04"
    none_cases = [
        Case("avro_good", b"a", record_ser({"id": 1, "name": "a", "tags": []}, ctx), None),
        Case("avro_bad", b"b", unknown, "deserialize"),
        Case("avro_good", b"c", record_ser({"id": 2, "name": "c", "tags": []}, ctx), None),
    ]
    _produce_cases(services.kafka, none_topic, none_cases)
    none_env = _fuzz_env(
        none_topic, none_dlq, "none", VALUE_FORMAT="avro", SCHEMA_REGISTRY_URL=registry.url
    )
    none_run = run_flow(services, none_env, timeout=120)

    problems = _check_dead_letters(services.kafka, dlq, topic, where)
    problems += _check_indexed(es, topic, where)
    assert not problems, _summary(problems)
    assert committed_offsets(services.kafka, topic, topic) == _end_offsets(services.kafka, topic, 2)

    assert none_run.returncode > 0, none_run.output[-3000:]
    assert f"record {none_topic}/0@1 failed at stage deserialize" in none_run.output
    assert "schema id 987654" in none_run.output
    committed = committed_offsets(services.kafka, none_topic, none_topic)[0]
    assert committed == -1001 or 0 <= committed <= 1, committed


def test_a_duplicate_key_is_refused_by_elasticsearch(services, es, names):
    """Without transforms a valid JSON object goes to Elasticsearch as it arrived
    (`flows.decode.json.RawObjects`), so Elasticsearch, not orjson, reads a duplicate key,
    a number over 1,000 characters and a number written with an exponent in a date field
    (orjson wrote 1.7E12 as 1700000000000.0, which epoch_millis reads): it refuses the
    document, which is dead-lettered with its reason; the rest is indexed."""
    long_number = Case(
        "long_number", b"long-number", b'{"f": 0.' + b"0" * 1000 + b"1}", "index",
        fuzz_inputs.ES_PARSE_ERROR, "Number value length",
    )  # fmt: skip
    dup = Case(
        "duplicate_key", b"dup", b'{"i": 1, "s": "x", "i": 2}', "index",
        fuzz_inputs.ES_PARSE_ERROR, "Duplicate field 'i'",
    )  # fmt: skip
    nested = Case(
        "duplicate_key", b"dup-nested", b'{"o": {"x": "a", "x": "b"}}', "index",
        fuzz_inputs.ES_PARSE_ERROR, "Duplicate field 'x'",
    )  # fmt: skip
    exponent_date = Case(
        "exponent_date", b"exponent-date", b'{"d": 1.7E12}', "index",
        fuzz_inputs.ES_PARSE_ERROR, "failed to parse field [d] of type [date]",
    )  # fmt: skip
    cases = [*_goods(3), dup, nested, long_number, exponent_date]
    topic, dlq, where = _small_run(services, es, names, "fuzz-dup", cases)
    run = run_flow(services, _fuzz_env(topic, dlq), timeout=120)
    assert run.returncode == 0, run.output[-3000:]
    problems = _check_dead_letters(services.kafka, dlq, topic, where)
    assert not problems, _summary(problems)
    assert count_docs(es, topic) == 3


# ------------------------------------------------------------------------------ product bugs
#
# Each input below is valid or dead-letterable, and the product mishandles it. They run on
# their own (not in the 10,000-record mix) so that one bug cannot hide the others.


def _small_run(services, es, names, prefix: str, cases: list[Case], **conf: object):
    topic, dlq = names(prefix), names(f"{prefix}-dlq")
    create_topic(services.kafka, topic)
    create_topic(services.kafka, dlq)
    es.indices.create(
        index=topic, mappings=fuzz_inputs.MAPPING, settings=fuzz_inputs.INDEX_SETTINGS
    )
    where = _produce_cases(services.kafka, topic, cases, **conf)
    return topic, dlq, where


def _goods(n: int, prefix: str = "g") -> list[Case]:
    return [Case("good", f"{prefix}-{i}".encode(), orjson.dumps({"i": i}), None) for i in range(n)]


def test_fuzz_valid_documents_255_to_1000_levels_deep_are_indexed(services, es, names):
    deep = [
        Case("deep_ok", f"deep-{d}".encode(), fuzz_inputs._nest(d, kind), None)
        # Elasticsearch's parser allows 1,000 levels including the outer object: 999 arrays.
        for d, kind in [(255, "array"), (300, "array"), (600, "array"), (999, "array")]
    ]
    topic, dlq, where = _small_run(services, es, names, "fuzz-deep", _goods(2) + deep)
    run = run_flow(services, _fuzz_env(topic, dlq), timeout=120)
    assert run.returncode == 0, run.output[-3000:]
    problems = _check_dead_letters(services.kafka, dlq, topic, where)
    assert not problems, _summary(problems)
    es.indices.refresh(index=topic)
    ids = {h["_id"] for h in es.search(index=topic, source=False, size=100)["hits"]["hits"]}
    assert ids == {c.key.decode() for c in where.values()}


def test_fuzz_deep_document_with_a_long_digit_string_is_not_refused_by_the_decoder(
    services, es, names
):
    value = fuzz_inputs._nest(995, "array", b'"12345678901234567890"')
    case = Case("deep_digits", b"deep-digits", value, None)
    topic, dlq, _where = _small_run(services, es, names, "fuzz-digits", [*_goods(2), case])
    run = run_flow(services, _fuzz_env(topic, dlq), timeout=120)
    assert run.returncode == 0, run.output[-3000:]
    letters = consume_all(services.kafka, dlq, timeout=5)
    stages = [dict(m.headers() or []).get(P + "stage") for m in letters]
    assert b"deserialize" not in stages, "a valid document refused by the decoder"
    assert count_docs(es, topic) + len(letters) == 3, [dict(m.headers() or []) for m in letters]


def test_fuzz_document_over_the_indexing_pressure_limit_is_dead_lettered(
    services, es, names, tmp_path
):

    stats = es.nodes.stats(metric="indexing_pressure")["nodes"]
    limit = min(n["indexing_pressure"]["memory"]["limit_in_bytes"] for n in stats.values())
    # Elasticsearch counts a document about 5 times (coordinating + 4x primary operation).
    size = int(limit / 5 * 1.15)
    assert size < 16_000_000, f"indexing pressure limit {limit} too large to provoke via Kafka"
    head = b'{"blob": "'
    big = Case("pressure", b"pressure", head + b"p" * (size - len(head) - 2) + b'"}', "index")
    cases = [*_goods(3, "a"), big, *_goods(3, "b")]
    topic, dlq, _where = _small_run(services, es, names, "fuzz-pressure", cases)
    log = tmp_path / "flow.log"
    proc = start_flow(services, _fuzz_env(topic, dlq), log=log)
    try:
        finished = proc.wait(30) == 0
    except Exception:
        finished = False
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert finished, "the flow did not finish within 30 s:\n" + log.read_text()[-2000:]
    letters = consume_all(services.kafka, dlq, timeout=10)
    assert [(m.key(), m.value()) for m in letters] == [(big.key, big.value)]
    ctx = {k[len(P) :]: v.decode() for k, v in letters[0].headers() if k.startswith(P)}
    assert ctx["stage"] == "index" and "rejected" in ctx["exception.message"], ctx
    assert count_docs(es, topic) == 6
    assert committed_offsets(services.kafka, topic, topic) == {0: 7}


def test_fuzz_document_over_http_max_content_length_is_dead_lettered(services, es, names):
    """A single document over Elasticsearch's http.max_content_length (100mb on the test
    node): 413, so it must be dead-lettered at stage index with its original bytes. It
    travels through Kafka gzip-compressed (the broker's 16 MB limit applies after
    compression), as a record that large would in production."""
    big = Case("oversized", b"oversized", fuzz_inputs.oversized_document(), "index")
    cases = [*_goods(2, "a"), big, *_goods(2, "b")]
    topic, dlq, _where = _small_run(
        services,
        es,
        names,
        "fuzz-413",
        cases,
        **{"compression.type": "gzip", "message.max.bytes": 200_000_000},
    )
    run = run_flow(services, _fuzz_env(topic, dlq), timeout=180)
    assert run.returncode == 0, run.output[-3000:]
    letters = consume_all(services.kafka, dlq, timeout=30)
    assert [m.key() for m in letters] == [big.key]
    assert letters[0].value() == big.value
    ctx = {k[len(P) :]: v.decode() for k, v in letters[0].headers() if k.startswith(P)}
    assert ctx["stage"] == "index", ctx
    assert "413" in ctx["exception.message"] or "too large" in ctx["exception.message"], ctx
    assert count_docs(es, topic) == 4
    assert committed_offsets(services.kafka, topic, topic) == {0: 5}
