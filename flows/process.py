"""Decode, transform and encode one batch of Kafka records; failures become dead letters.

This is the per-record hot path, so it runs once per batch (`op.flat_map_batch`): the
decoders, transforms and action builder are compiled on the first batch, counters are
bumped once per batch, and each document leaves as bytes already encoded for `_bulk`,
grouped by sink partition so the exchange to the sink moves one item per partition.
Without transforms a JSON value's 64-bit integer check, which reads every byte, runs only
when its encoded action holds a `+` (`flows.decode.json.IntsChecked`); when the action
reads no field of the document either, a valid JSON object is not decoded at all and goes
to Elasticsearch as it arrived (`flows.decode.json.RawObjects`), and when its key is an
ASCII string (KEY_FORMAT=string) no `Record` is made for it: its action keeps the
consumed message (`sinks.model.Action.origin`). Where that key is the id, the loop writes
the action's bytes and places it itself (`ActionBuilder.key_id_head`): the calls it saves
are a fifth of a small record's processing (docs/benchmarks.md, "Figures behind the code").

A document goes to the sink partition where Kafka's partitioner would put its id as a key
(`sink_partition`, ES_SINK_ROUTING_HASH): when the ids are the string keys and the sink
partition count divides the topic's, each Kafka partition's documents go to one sink
partition, so its run in a batch fills one buffer. Bytewax gives that sink partition to the
worker that reads the Kafka partition (nothing crosses between processes) only where both
kinds of partition sort by name alike: one topic of at most 10 partitions (docs/architecture.md).

With ERRORS_TOLERANCE=none a failed record is held (`flows.halt`), not raised, so that a
record before it that Elasticsearch refuses is the one the flow stops on. With `log` the
policy logs each failed record and the batch drops it (one flag read per batch). Each batch also
records how far it examined each Kafka partition, so that a source snapshot never passes a
record not examined yet (`flows.halt.EXAMINED`).
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, cast

import orjson
from confluent_kafka import Message
from murmurhash2 import murmurhash2

from flows import halt, metrics
from flows.config import Settings
from flows.decode import DecodeError, build_decoder
from flows.decode.json import RawObjects, json_ints_checked_later
from flows.errors import RecordFailedError
from flows.record import DeadLetter, Doc, Record
from flows.transforms import Transform, build_transforms, compile_transforms
from flows.transforms.cdc import tombstone_topics
from sinks import failing
from sinks.dead_letter.policy import ErrorPolicy
from sinks.elasticsearch.actions import ID_END, SHORT_ID_CHARS, ActionBuilder, ActionError
from sinks.model import Action, Actions, record_of

Routed = tuple[str, Any]
"""`(sink partition number, Actions)` for Elasticsearch or `(number, DeadLetter)`."""

MURMUR2_SEED = 0x9747B28C
"""The seed of Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`)."""


def sink_partition(doc_id: str, partitions: int, routing_hash: str) -> int:
    """The sink partition of a document id: every write to one document goes through it.

    `murmur2` places it as the Java client's default partitioner places a key (its hash's
    31 low bits, modulo the count), `crc32` as librdkafka's `consistent_random` does.
    `Processor` inlines this twice, to save a Python call per record: on an ASCII
    key's bytes, and on any other id; the tests hold both to librdkafka's partitioners."""
    key = doc_id.encode()
    if routing_hash == "murmur2":
        return (murmurhash2(key, MURMUR2_SEED) & 0x7FFFFFFF) % partitions
    return zlib.crc32(key) % partitions


class Processor:
    """The `flat_map_batch` mapper: Kafka messages in, routed chunks and dead letters out."""

    def __init__(
        self, settings: Settings, transforms: Sequence[Transform], partitions: int
    ) -> None:
        """Compile decoders, transforms and the action builder now, so invalid settings
        fail when the flow is built; none of them does I/O here (a Schema Registry client
        is created on first use)."""
        self._partitions = partitions
        self._murmur2 = settings.es_sink_routing_hash == "murmur2"
        self._value = build_decoder(settings, "value")
        self._key = build_decoder(settings, "key")
        self._transforms = build_transforms(settings.transforms) + list(transforms)
        # The chain as one generated function (`flows.transforms.compiled`).
        self._chain = compile_transforms(self._transforms)
        # Without transforms each decoded value is encoded whole into its action, so JSON
        # values leave their integer check until then (`flows.decode.json.IntsChecked`).
        self._check_ints: Callable[[bytes], None] | None = None
        later = None if self._transforms else json_ints_checked_later(settings)
        if later is not None:
            self._value, self._check_ints = later
        # Topics whose null values are Debezium's tombstones: the debezium transform, not
        # ON_NULL_VALUE, decides what they mean (checked only for records with a null value).
        self._cdc_tombstone = tombstone_topics(self._transforms)
        self._actions = ActionBuilder(settings.es_documents)
        # ...and when the action reads no field either, a value simdjson accepts goes to
        # Elasticsearch as it arrived, never decoded (`flows.decode.json.RawObjects`).
        as_is = later is not None and settings.json_as_is and self._actions.takes_raw_sources
        self._raw = RawObjects() if as_is else None
        # ...and with a string key (ASCII: the decoder's UTF-8 check is moot) no Record.
        self._text_keys = settings.key_format == "string"
        self._policy = ErrorPolicy(settings.error_tolerance, "decode/transform")
        self._null_value = settings.on_null_value
        # ON_NULL_KEY=fail, as Kafka Connect's sink: a tombstone without a key names no
        # document to delete, so it is skipped (not a failed record).
        self._keyless_deletes_skip = settings.doc_id == "key" and settings.on_null_key == "fail"
        self._trace = settings.dlq_stacktrace

    @failing.on_error
    def __call__(self, batch: list[Message]) -> list[Routed]:
        """Process one batch in order; see the module docstring."""
        decode_value, decode_key = self._value, self._key
        transforms, build = self._transforms, self._actions.build
        chain = self._chain
        build_source = self._actions.build_source
        policy, trace = self._policy, self._trace
        check_ints = self._check_ints
        raw = None if self._raw is None else self._raw.accepts()
        build_raw, text_keys = self._actions.build_raw, self._text_keys
        # The common case, a JSON object sent as it arrived with an ASCII string key as its
        # id, is `build_raw`'s bytes and `sink_partition` inlined: no call per record.
        key_id_head = self._actions.key_id_head if raw is not None and text_keys else None
        head: bytes | None = None
        join, dumps = b"".join, orjson.dumps
        n_parts = self._partitions
        murmur2, crc32, seed = (murmurhash2 if self._murmur2 else None), zlib.crc32, MURMUR2_SEED
        chunks: defaultdict[int, Actions] = defaultdict(Actions)
        failures: list[DeadLetter] = []
        routed: list[DeadLetter] = []
        ok = skipped = 0
        run = policy.consecutive
        tolerate = policy.tolerate
        halted = bool(halt.HELD)
        # A batch holds runs of records of one Kafka partition (Bytewax concatenates what
        # the worker's source partitions emitted); at the end of each run, record how far
        # that partition has been examined (see flows.halt). Per record this costs one
        # comparison; the held check is made once per run, not per record.
        examined = halt.EXAMINED
        run_topic: Any = None
        run_part = -1
        last: Any = None  # the previous message: its offset ends a run
        stopped = False  # this run's partition has a held failure: nothing more from it
        for msg in cast(list[Any], batch):  # Message getters are typed Optional
            t, p = msg.topic(), msg.partition()
            if p != run_part or t != run_topic:
                if last is not None:
                    examined[(run_topic, run_part)] = last.offset() + 1
                run_topic, run_part = t, p
                stopped = halted and (t, p) in halt.HELD
                head = None if key_id_head is None else key_id_head(t)
            last = msg
            if stopped:
                continue  # after a held failure (ERRORS_TOLERANCE=none): nothing more
            dead: DeadLetter | None = None
            actions: Sequence[Action]
            value = msg.value()
            as_is = raw is not None and value is not None and raw(value)
            if as_is and text_keys and (k := msg.key()) is not None and k.isascii():
                # A JSON object sent as it arrived, with a string key. No Record is made:
                # the action keeps the message (`Action.origin`).
                if head is not None and 0 < len(k) <= SHORT_ID_CHARS:  # the key is the id
                    doc_id = k.decode()
                    action = Action(doc_id, join((head, dumps(doc_id), ID_END, value, b"\n")), msg)
                    if murmur2 is not None:  # on the key's bytes: the id's, as it is ASCII
                        part = (murmur2(k, seed) & 0x7FFFFFFF) % n_parts
                    else:
                        part = crc32(k) % n_parts
                    chunks[part].append(action)
                    ok += 1
                    run = 0
                    continue
                try:
                    actions = (build_raw(msg, t, value, k.decode()),)
                except ActionError as e:
                    dead = DeadLetter.from_exception(record_of(msg), "index", e, trace)
            else:
                rec = record_of(msg)
                doc: Doc | None = None
                try:
                    key = None if rec.key is None else decode_key(rec)
                    if rec.value is None:
                        tomb = self._tombstone(rec, key)
                        if tomb is None:
                            skipped += 1
                            continue
                        if isinstance(tomb, DeadLetter):  # ON_NULL_VALUE=dlq: routed
                            routed.append(tomb)
                            continue
                        doc = tomb
                    elif transforms:
                        doc = Doc(rec, decode_value(rec), key)
                    elif not as_is:  # no transforms: the decoded value goes to its action
                        source = decode_value(rec)
                except DecodeError as e:
                    dead = DeadLetter.from_exception(rec, "deserialize", e, trace)
                except RecordFailedError as e:  # ON_NULL_VALUE=fail
                    halt.hold(t, p, msg.offset(), e)
                    halted = stopped = True
                    continue
                if dead is None and doc is not None and transforms:
                    try:
                        docs = chain(doc)
                    except Exception as e:  # any error in user code dead-letters the record
                        dead = DeadLetter.from_exception(rec, "transform", e, trace)
                    else:
                        if not docs:
                            skipped += 1
                            run = 0
                            continue
                if dead is None:
                    try:
                        if as_is:  # valid, and sent as it arrived: nothing decoded
                            actions = (build_raw(rec, t, value, key),)
                        elif doc is None:  # no Doc made: what `build(Doc(rec, source, key))` does
                            try:
                                action = build_source(rec, source, key)
                            except ActionError:
                                if check_ints is not None:  # decoding's error comes first
                                    check_ints(value)
                                raise
                            if check_ints is not None and 0x2B in action.data:  # `+`, by memchr
                                check_ints(value)
                            actions = (action,)
                        elif not transforms:
                            actions = (build(doc),)
                        else:
                            actions = [build(d) for d in docs]
                    except ActionError as e:
                        dead = DeadLetter.from_exception(rec, "index", e, trace)
                    except DecodeError as e:  # check_ints
                        dead = DeadLetter.from_exception(rec, "deserialize", e, trace)
            if dead is not None:
                if not tolerate:
                    halt.hold(t, p, msg.offset(), policy.stop_error(dead))
                    halted = stopped = True
                    continue
                run += 1
                policy.failed(dead, run)
                failures.append(dead)
                continue
            for action in actions:  # sink_partition(), inlined
                if (doc_id := action.id) is None:
                    part = p % n_parts
                elif murmur2 is not None:
                    part = (murmur2(doc_id.encode(), seed) & 0x7FFFFFFF) % n_parts
                else:
                    part = crc32(doc_id.encode()) % n_parts
                chunks[part].append(action)
            ok += 1
            run = 0
        if last is not None:
            examined[(run_topic, run_part)] = last.offset() + 1
        metrics.RECORDS_IN.inc(len(batch))
        if skipped:
            metrics.SKIPPED.labels("dropped").inc(skipped)
        policy.end_batch(ok, len(failures), run, failures[-1] if failures else None)
        out: list[Routed] = [(str(p), c) for p, c in chunks.items()]
        if not policy.skips:  # ERRORS_TOLERANCE=log: failed() logged them; nothing to send
            out.extend((str(f.record.partition % n_parts), f) for f in failures)
        out.extend((str(f.record.partition % n_parts), f) for f in routed)
        return out

    def _tombstone(self, rec: Record, key: Any) -> Doc | DeadLetter | None:
        cdc = self._cdc_tombstone
        if cdc is not None and cdc(rec.topic):  # the debezium transform drops or deletes it
            return Doc(rec, None, key)
        policy = self._null_value
        if policy == "ignore":
            return None
        if policy == "delete":
            if key is None and self._keyless_deletes_skip:
                return None
            return Doc(rec, None, key, delete=True)
        if policy == "fail":
            raise RecordFailedError(
                f"{rec.topic}/{rec.partition}@{rec.offset}",
                "deserialize",
                "null value (ON_NULL_VALUE=fail)",
            )
        return DeadLetter(rec, "deserialize", "NullValue", "null value (ON_NULL_VALUE=dlq)")


def is_documents(item: Routed) -> bool:
    """Route predicate: True for Elasticsearch chunks, False for dead letters."""
    return type(item[1]) is Actions
