"""Decode, transform and encode one batch of Kafka records; failures become dead letters.

This is the per-record hot path, so it runs once per batch (`op.flat_map_batch`): the
decoders, transforms, action builder and the per-record loop itself are chosen when the
processor is built, counters are bumped once per batch, and each document leaves as bytes
already encoded for `_bulk`, grouped by sink partition so the exchange to the sink moves one
item per partition.
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
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message
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


class _Batch:
    """What one batch has produced so far; its runs (`Processor.__call__`) add to it."""

    __slots__ = ("chunks", "failures", "mark", "ok", "routed", "run", "skipped")

    def __init__(self, run: int) -> None:
        self.chunks: defaultdict[int, Actions] = defaultdict(Actions)
        self.failures: list[DeadLetter] = []
        self.routed: list[DeadLetter] = []
        self.ok = 0
        """Records sent (the loops keep it in a local and write it back)."""
        self.skipped = 0
        self.run = run
        """Failures in a row as of the last failure (at first, as the last batch ended)."""
        self.mark = 0
        """`ok` when `run` was counted (-1 after a drop): any success since ends the run,
        so the loops need not reset it per record."""


RunLoop = Callable[[list[Any], str, int, _Batch], None]
"""A processor's loop over one run of a batch: messages of one topic and partition."""


class Processor:
    """The `flat_map_batch` mapper: Kafka messages in, routed chunks and dead letters out.

    Its per-record loop is chosen once, when it is built, from what the settings need (a
    method per kind of work: `_as_is_string_keys`, `_as_is`, `_decoded`, `_transformed`),
    so that no loop reads a setting per record."""

    def __init__(
        self, settings: Settings, transforms: Sequence[Transform], partitions: int
    ) -> None:
        """Compile decoders, transforms and the action builder now, so invalid settings
        fail when the flow is built; none of them does I/O here (a Schema Registry client
        is created on first use)."""
        self._partitions = partitions
        # `sink_partition` inlined: the hash, its seed and the bits kept, per ES_SINK_ROUTING_HASH
        # (zlib.crc32's second argument is its starting value, 0 by default).
        murmur2 = settings.es_sink_routing_hash == "murmur2"
        self._hash: Callable[[bytes, int], int] = murmurhash2 if murmur2 else zlib.crc32
        self._seed = MURMUR2_SEED if murmur2 else 0
        self._mask = 0x7FFFFFFF if murmur2 else 0xFFFFFFFF
        self._value = build_decoder(settings, "value")
        self._key = build_decoder(settings, "key")
        self._transforms = build_transforms(settings.transforms) + list(transforms)
        # The chain as one generated function (`flows.transforms.compiled`).
        self._chain = compile_transforms(self._transforms)
        # Without transforms each decoded value is encoded whole into its action, so JSON
        # values leave their integer check until then (`flows.decode.json.IntsChecked`).
        self._check_ints: Callable[[bytes], None] = _no_check
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
        self._policy = ErrorPolicy(settings.error_tolerance, "decode/transform")
        self._null_value = settings.on_null_value
        # ON_NULL_KEY=fail, as Kafka Connect's sink: a tombstone without a key names no
        # document to delete, so it is skipped (not a failed record).
        self._keyless_deletes_skip = settings.doc_id == "key" and settings.on_null_key == "fail"
        self._trace = settings.dlq_stacktrace
        self._loop: RunLoop
        if self._transforms:
            self._loop = self._transformed
        elif as_is:
            # ...and with a string key (ASCII: the decoder's UTF-8 check is moot) no Record.
            string_keys = settings.key_format == "string"
            self._loop = self._as_is_string_keys if string_keys else self._as_is
        else:
            self._loop = self._decoded

    @failing.on_error
    def __call__(self, batch: list[Message]) -> list[Routed]:
        """Process one batch in order; see the module docstring.

        A batch holds runs of records of one Kafka partition (Bytewax concatenates what the
        worker's source partitions emitted): each run goes to the loop whole, unless its
        partition has a held failure (ERRORS_TOLERANCE=none: nothing more from it), and
        at its end, how far that partition has been examined is recorded (see flows.halt)."""
        policy = self._policy
        out = _Batch(policy.consecutive)
        run_topic: Any = None
        run_part = -1
        start = 0
        for i, msg in enumerate(cast(list[Any], batch)):  # Message getters are typed Optional
            t, p = msg.topic(), msg.partition()
            if p != run_part or t != run_topic:
                if i:
                    self._run(batch, start, i, run_topic, run_part, out)
                start, run_topic, run_part = i, t, p
        if batch:
            self._run(batch, start, len(batch), run_topic, run_part, out)
        metrics.RECORDS_IN.inc(len(batch))
        if out.skipped:
            metrics.SKIPPED.labels("dropped").inc(out.skipped)
        failures = out.failures
        run = out.run if out.mark == out.ok else 0
        policy.end_batch(out.ok, len(failures), run, failures[-1] if failures else None)
        n_parts = self._partitions
        routed: list[Routed] = [(str(p), c) for p, c in out.chunks.items()]
        if not policy.skips:  # ERRORS_TOLERANCE=log: failed() logged them; nothing to send
            routed.extend((str(f.record.partition % n_parts), f) for f in failures)
        routed.extend((str(f.record.partition % n_parts), f) for f in out.routed)
        return routed

    def _run(self, batch: list[Any], start: int, end: int, t: str, p: int, out: _Batch) -> None:
        if not (halt.HELD and (t, p) in halt.HELD):
            self._loop(batch[start:end], t, p, out)
        halt.EXAMINED[(t, p)] = batch[end - 1].offset() + 1

    def _as_is_string_keys(self, msgs: list[Any], t: str, p: int, out: _Batch) -> None:
        """The common case: JSON objects sent as they arrived, with ASCII string keys. No
        Record is made: the action keeps the message (`Action.origin`). Where the key is the
        id, `build_raw`'s bytes and `sink_partition` are written here: no call per record."""
        accepts = cast(RawObjects, self._raw).accepts()
        head = self._actions.key_id_head(t)
        build_raw, join, dumps = self._actions.build_raw, b"".join, orjson.dumps
        hash_, seed, mask, n_parts = self._hash, self._seed, self._mask, self._partitions
        chunks, ok = out.chunks, out.ok
        for msg in msgs:
            value = msg.value()
            as_is = value is not None and accepts(value)
            if not as_is or (k := msg.key()) is None or not k.isascii():
                out.ok = ok
                if self._general(msg, t, p, out, as_is):
                    return
                ok = out.ok
                continue
            doc_id = k.decode()
            if head is not None and 0 < len(k) <= SHORT_ID_CHARS:  # the key is the id
                # On the key's bytes: the id's, as it is ASCII.
                chunks[(hash_(k, seed) & mask) % n_parts].append(
                    Action(doc_id, join((head, dumps(doc_id), ID_END, value, b"\n")), msg)
                )
                ok += 1
                continue
            try:
                action = build_raw(msg, t, value, doc_id)
            except ActionError as e:
                dead = DeadLetter.from_exception(record_of(msg), "index", e, self._trace)
                if self._failed(dead, msg, t, p, out, ok):
                    return
                continue
            self._place(action, p, chunks)
            ok += 1
        out.ok = ok

    def _as_is(self, msgs: list[Any], t: str, p: int, out: _Batch) -> None:
        """JSON objects sent as they arrived, with keys of another format (decoded)."""
        accepts, general = cast(RawObjects, self._raw).accepts(), self._general
        for msg in msgs:
            value = msg.value()
            if general(msg, t, p, out, value is not None and accepts(value)):
                return

    def _decoded(self, msgs: list[Any], t: str, p: int, out: _Batch) -> None:
        """No transforms, each value decoded (another format, or an action that reads it)."""
        general = self._general
        for msg in msgs:
            if general(msg, t, p, out, False):
                return

    def _general(self, msg: Any, t: str, p: int, out: _Batch, as_is: bool) -> bool:
        """One record without transforms, through a `Record` and the decoders; `as_is`: its
        value goes as it arrived. True when it is held (nothing more from its partition)."""
        rec = record_of(msg)
        value = rec.value
        try:
            key = None if rec.key is None else self._key(rec)
            if value is None:
                doc = self._tombstone(rec, key, out)
                if doc is None:
                    return False
                action = self._actions.build(doc)
            elif as_is:  # valid, and sent as it arrived: nothing decoded
                action = self._actions.build_raw(rec, t, value, key)
            else:  # what `build(Doc(rec, source, key))` does, without the Doc
                source = self._value(rec)
                try:
                    action = self._actions.build_source(rec, source, key)
                except ActionError:
                    self._check_ints(value)  # decoding's error comes first
                    raise
                if 0x2B in action.data:  # `+`, by memchr
                    self._check_ints(value)
        except DecodeError as e:
            dead = DeadLetter.from_exception(rec, "deserialize", e, self._trace)
            return self._failed(dead, msg, t, p, out, out.ok)
        except ActionError as e:
            dead = DeadLetter.from_exception(rec, "index", e, self._trace)
            return self._failed(dead, msg, t, p, out, out.ok)
        except RecordFailedError as e:  # ON_NULL_VALUE=fail
            halt.hold(t, p, msg.offset(), e)
            return True
        self._place(action, p, out.chunks)
        out.ok += 1
        return False

    def _transformed(self, msgs: list[Any], t: str, p: int, out: _Batch) -> None:
        """Each value decoded into a `Doc` and through the compiled chain."""
        decode_key, decode_value, chain = self._key, self._value, self._chain
        build, trace, no_time = self._actions.build, self._trace, TIMESTAMP_NOT_AVAILABLE
        hash_, seed, mask, n_parts = self._hash, self._seed, self._mask, self._partitions
        chunks, ok = out.chunks, out.ok
        actions: Sequence[Action]
        for msg in msgs:
            ts_type, ts = msg.timestamp()
            headers = msg.headers()
            k, value = msg.key(), msg.value()
            rec = Record(  # record_of(msg), inlined: the topic and partition are the run's
                t, p, msg.offset(), None if ts_type == no_time else ts, k, value,
                tuple(headers) if headers else (),
            )  # fmt: skip
            try:
                key = None if k is None else decode_key(rec)
                if value is None:
                    doc = self._tombstone(rec, key, out)
                    if doc is None:
                        continue
                else:
                    doc = Doc(rec, decode_value(rec), key)
            except DecodeError as e:
                dead = DeadLetter.from_exception(rec, "deserialize", e, trace)
                if self._failed(dead, msg, t, p, out, ok):
                    return
                continue
            except RecordFailedError as e:  # ON_NULL_VALUE=fail
                out.ok = ok
                halt.hold(t, p, msg.offset(), e)
                return
            try:
                docs = chain(doc)
            except Exception as e:  # any error in user code dead-letters the record
                dead = DeadLetter.from_exception(rec, "transform", e, trace)
                if self._failed(dead, msg, t, p, out, ok):
                    return
                continue
            if not docs:
                out.skipped += 1
                out.mark = -1  # a drop ends a run of failures, as a success does
                continue
            try:
                actions = (build(docs[0]),) if len(docs) == 1 else [build(d) for d in docs]
            except ActionError as e:
                dead = DeadLetter.from_exception(rec, "index", e, trace)
                if self._failed(dead, msg, t, p, out, ok):
                    return
                continue
            for action in actions:  # `_place`, inlined
                doc_id = action.id
                if doc_id is None:
                    chunks[p % n_parts].append(action)
                else:
                    chunks[(hash_(doc_id.encode(), seed) & mask) % n_parts].append(action)
            ok += 1
        out.ok = ok

    def _place(self, action: Action, p: int, chunks: defaultdict[int, Actions]) -> None:
        """Append `action` to the chunk of its sink partition (`sink_partition`; without an
        id, the Kafka partition's)."""
        doc_id = action.id
        if doc_id is None:
            chunks[p % self._partitions].append(action)
        else:
            h = self._hash(doc_id.encode(), self._seed) & self._mask
            chunks[h % self._partitions].append(action)

    def _failed(self, dead: DeadLetter, msg: Any, t: str, p: int, out: _Batch, ok: int) -> bool:
        """Account a failed record, `ok` records into the batch: a dead letter, or (with
        ERRORS_TOLERANCE=none) held. True when held (nothing more from its partition)."""
        out.ok = ok
        policy = self._policy
        if not policy.tolerate:
            halt.hold(t, p, msg.offset(), policy.stop_error(dead))
            return True
        run = out.run + 1 if out.mark == ok else 1
        out.run, out.mark = run, ok
        policy.failed(dead, run)
        out.failures.append(dead)
        return False

    def _tombstone(self, rec: Record, key: Any, out: _Batch) -> Doc | None:
        """The Doc of a null value, or None when it is skipped or routed as a dead letter."""
        cdc = self._cdc_tombstone
        if cdc is not None and cdc(rec.topic):  # the debezium transform drops or deletes it
            return Doc(rec, None, key)
        policy = self._null_value
        if policy == "ignore":
            out.skipped += 1
            return None
        if policy == "delete":
            if key is None and self._keyless_deletes_skip:
                out.skipped += 1
                return None
            return Doc(rec, None, key, delete=True)
        if policy == "fail":
            raise RecordFailedError(
                f"{rec.topic}/{rec.partition}@{rec.offset}",
                "deserialize",
                "null value (ON_NULL_VALUE=fail)",
            )
        out.routed.append(
            DeadLetter(rec, "deserialize", "NullValue", "null value (ON_NULL_VALUE=dlq)")
        )
        return None


def _no_check(value: bytes) -> None:
    """The integer check of a value whose decoder made it already (or has none to make)."""


def is_documents(item: Routed) -> bool:
    """Route predicate: True for Elasticsearch chunks, False for dead letters."""
    return type(item[1]) is Actions
