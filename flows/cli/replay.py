"""`es-sink dlq replay`: send selected dead letters through the flow again, once the user
fixed what failed (the mapping, a transform).

Every replayed record goes through the flow's own processor (`flows.process.Processor`:
decoding, the configured transforms, document ids and actions) and the flow's own sink
partition (`EsSinkPartition`: bulks, classification, retries), so documents get the ids,
indices and routing the flow gives them. The record is rebuilt with its original
coordinates, key, value and headers and its original timestamp (the dead letter's
`__es_sink.timestamp` header; for dead letters written before it existed, read back from
the source topic while it still holds it, one pass per stretch of a partition), plus the
replay-count header: a record that fails again goes back to the dead-letter topic, through
the flow's dead-letter producer, with that header and fresh error headers.

A dead letter of a source record already seen in this run (an at-least-once re-read
dead-letters a record again) is counted as a duplicate and replayed once. A dry run
decodes, transforms and encodes, and asks Elasticsearch nothing: what would be sent is
`unverified`, never `replayed`.

A replay commits its progress in its own consumer group on the dead-letter topic after
each batch is durable (written to Elasticsearch, failures confirmed by Kafka), so an
interrupted replay resumes where it stopped. The group is named after KAFKA_GROUP_ID and
the selection, so different selections keep apart; `--group` names it, `--restart` starts
over from the beginning of the topic.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer

from flows.cli import common
from flows.cli.dlq import (
    REPLAY_COUNT_HEADER,
    DeadLetterRecord,
    GrepOpt,
    Selection,
    SinceOpt,
    StageOpt,
    TopicOpt,
    UntilOpt,
    dlq_app,
    dlq_topic,
    parse,
    read,
    selection,
)
from sinks.dead_letter.config import DeadLetterConfig
from sinks.dead_letter.producer import DeadLetterProducer
from sinks.model import DeadLetter

if TYPE_CHECKING:
    from flows.config import Settings

BATCH = 500
GAP = 5000
"""Source offsets of dead letters without a timestamp header closer than this are read in
one pass (reading the records between them is cheaper than seeking again)."""
BUDGET_S = 120.0
"""A replay does not wait forever on an unreachable service (the flow's default): when
ES_RETRY_BUDGET_S / DLQ_RETRY_BUDGET_S are 0 it gives up after this long."""


@dataclass
class Summary:
    """What a replay did; `line()` is its summary line."""

    group: str
    replayed: int = 0
    unverified: int = 0
    """Dry run: would go to Elasticsearch, which a dry run does not ask."""
    failed: int = 0
    skipped: int = 0
    duplicates: int = 0
    """Dead letters of a source record already replayed in this run."""
    read: int = 0
    dry_run: bool = False
    to_topic: bool = False
    failures: dict[str, int] = field(default_factory=dict)
    """Records that failed again, by the stage of their first failure (sums to `failed`)."""

    def line(self) -> str:
        done = f"unverified={self.unverified}" if self.dry_run else f"replayed={self.replayed}"
        head = "dry-run: " if self.dry_run else ""
        return (
            f"{head}{done} failed={self.failed} skipped={self.skipped} duplicates={self.duplicates}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "dry_run": self.dry_run,
            "to_topic": self.to_topic,
            "read": self.read,
            "replayed": self.replayed,
            "unverified": self.unverified,
            "failed": self.failed,
            "skipped": self.skipped,
            "duplicates": self.duplicates,
            "failed_by_stage": self.failures,
        }


def replay_group(settings: Settings, chosen: Selection) -> str:
    """`<KAFKA_GROUP_ID>.replay`, plus a digest of the selection when there is one."""
    parts = (
        chosen.stage,
        chosen.topic,
        chosen.since,
        chosen.until,
        chosen.grep.pattern if chosen.grep else None,
    )
    base = f"{settings.group_id}.replay"
    if all(p is None for p in parts):
        return base
    digest = hashlib.sha256(repr(parts).encode()).hexdigest()[:10]
    return f"{base}.{digest}"


def replay_settings(settings: Settings) -> Settings:
    """The flow's settings, with every failure a dead letter (an operator replays on
    purpose: nothing stops on a record) and bounded waits."""
    return settings.model_copy(
        update={
            "errors_tolerance": "all",
            "dlq_max_consecutive": 0,
            "dlq_max_ratio": 0.0,
            "es_retry_budget_s": settings.es_retry_budget_s or BUDGET_S,
            "dlq_retry_budget_s": settings.dlq_retry_budget_s or BUDGET_S,
        }
    )


@dataclass(frozen=True, slots=True)
class OriginalMessage:
    """A dead letter as the Kafka message it was, for the flow's processor (which reads
    confluent-kafka Messages through these methods)."""

    _topic: str
    _partition: int
    _offset: int
    _timestamp: int | None
    _key: bytes | None
    _value: bytes | None
    _headers: list[tuple[str, bytes | None]]

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE

        if self._timestamp is None:
            return (TIMESTAMP_NOT_AVAILABLE, -1)
        return (TIMESTAMP_CREATE_TIME, self._timestamp)

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes | None]]:
        return self._headers


def original(dl: DeadLetterRecord, timestamp: int | None) -> OriginalMessage:
    """The record `dl` was made from, carrying the replay count it will have if it fails."""
    headers = [*dl.original_headers, (REPLAY_COUNT_HEADER, str(dl.replay_count + 1).encode())]
    return OriginalMessage(dl.topic, dl.partition, dl.offset, timestamp, dl.key, dl.value, headers)


def original_timestamps(
    settings: Settings, letters: Sequence[DeadLetterRecord]
) -> dict[tuple[str, int, int], int]:
    """The source records' own timestamps (dated indices and timestamp transforms see what
    the flow saw): from the dead letters' header, else read back where the source topic
    still holds them, one pass per stretch of offsets closer than GAP."""
    found: dict[tuple[str, int, int], int] = {}
    wanted: dict[tuple[str, int], set[int]] = {}
    for dl in letters:
        if dl.original_timestamp is not None:
            found[dl.source] = dl.original_timestamp
        elif dl.offset >= 0:
            wanted.setdefault((dl.topic, dl.partition), set()).add(dl.offset)
    if wanted:
        found.update(_read_timestamps(settings, wanted))
    return found


def _read_timestamps(
    settings: Settings, wanted: dict[tuple[str, int], set[int]]
) -> dict[tuple[str, int, int], int]:
    from confluent_kafka import KafkaException, TopicPartition

    found: dict[tuple[str, int, int], int] = {}
    c = common.consumer(settings)
    try:
        for (topic, partition), offsets in wanted.items():
            try:
                low, high = c.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=common.KAFKA_TIMEOUT_S
                )
            except KafkaException:  # the topic is gone: the timestamps are too
                continue
            for begin, end in _stretches(sorted(o for o in offsets if low <= o < high)):
                try:
                    for m in common.read_range(
                        c, topic, partition, begin, end, 5.0, "KAFKA_TOPICS"
                    ):
                        ts_type, ts = m.timestamp()
                        offset = int(m.offset() or 0)
                        if offset in offsets and ts_type and ts >= 0:
                            found[(topic, partition, offset)] = ts
                except common.Problem:  # deleted meanwhile: replayed without its timestamp
                    continue
    finally:
        c.close()
    return found


def _stretches(offsets: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted offsets as `[begin, end)` ranges, a new one where the gap exceeds GAP."""
    out: list[tuple[int, int]] = []
    for o in offsets:
        if out and o - out[-1][1] < GAP:
            out[-1] = (out[-1][0], o + 1)
        else:
            out.append((o, o + 1))
    return out


class Replayer:
    """The flow's processor, sink partition and dead-letter producer, run by hand."""

    def __init__(self, settings: Settings, dry_run: bool) -> None:
        from flows.process import Processor
        from sinks.elasticsearch.client import make_client
        from sinks.elasticsearch.partition import EsSinkPartition

        self._settings = settings
        self._dry_run = dry_run
        self._processor = Processor(settings, (), 1)
        self._dlq: _Counting | None = None
        self._sink: EsSinkPartition | None = None
        self.failed_again: list[DeadLetter] = []
        if not dry_run:
            config = settings.dead_letter_config
            assert config is not None  # replay needs DLQ_TOPIC (checked before)
            self._dlq = _Counting(config, self.failed_again)
            es = settings.es_sink_config
            client = make_client(es.connection)
            self._sink = EsSinkPartition(es, "replay", client, self._dlq)

    def run(self, messages: list[OriginalMessage]) -> tuple[int, int]:
        """Process and write one batch; (records sent to Elasticsearch, records dropped
        by the transforms or the tombstone policy). Failures land in `failed_again`."""
        from flows.process import is_documents

        routed = self._processor(messages)  # type: ignore[arg-type]  # Message-like
        chunks = [item[1] for item in routed if is_documents(item)]
        letters: list[DeadLetter] = [item[1] for item in routed if not is_documents(item)]
        sent = {(r.topic, r.partition, r.offset) for c in chunks for r in [a.record for a in c]}
        failed = {(d.record.topic, d.record.partition, d.record.offset) for d in letters}
        dropped = len(messages) - len(sent) - len(failed)
        if self._dry_run:
            self.failed_again.extend(letters)
            return len(sent), dropped
        assert self._sink is not None and self._dlq is not None
        if letters:
            self._dlq.send(letters)
        if chunks:
            self._sink.write_batch(chunks)
        self._sink.snapshot()  # everything written (or dead-lettered) before the commit
        return len(sent), dropped

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()


class _Counting(DeadLetterProducer):
    """The flow's dead-letter producer, also keeping what it sent (to count failures)."""

    def __init__(self, config: DeadLetterConfig, sent: list[DeadLetter]) -> None:
        super().__init__(config)
        self._sent = sent

    def send(self, letters: Sequence[DeadLetter]) -> None:
        super().send(letters)
        self._sent.extend(letters)


def replay(
    settings: Settings,
    chosen: Selection,
    *,
    group: str | None = None,
    restart: bool = False,
    dry_run: bool = False,
    to_topic: bool = False,
    limit: int | None = None,
) -> Summary:
    """Replay the selected dead letters; see the module docstring."""
    from confluent_kafka import TopicPartition

    topic = dlq_topic(settings)
    settings = replay_settings(settings)
    summary = Summary(group or replay_group(settings, chosen), dry_run=dry_run, to_topic=to_topic)
    committer = common.consumer(settings, summary.group)
    start: dict[int, int] = {}
    if not restart:
        meta = common.reachable_topics(settings)
        tps = [TopicPartition(topic, p) for p in common.partitions_of(meta, topic)]
        for tp in committer.committed(tps, timeout=common.KAFKA_TIMEOUT_S):
            if tp.offset >= 0:
                start[tp.partition] = tp.offset
    replayer = None if to_topic else Replayer(settings, dry_run)
    producer = None if (dry_run or not to_topic) else _producer(settings)
    batch: list[DeadLetterRecord] = []
    positions: dict[int, int] = {}
    seen: set[tuple[str, int, int]] = set()

    def flush() -> None:
        _replay_batch(settings, batch, summary, replayer, producer, dry_run)
        if not dry_run and positions:
            done = [TopicPartition(topic, p, o) for p, o in positions.items()]
            committer.commit(offsets=done, asynchronous=False)
        batch.clear()

    try:
        picked = 0
        for msg in read(settings, since=chosen.since, start=start):
            dl = parse(msg)
            summary.read += 1
            if limit is not None and picked >= limit:
                summary.read -= 1
                break
            positions[dl.dlq_partition] = dl.dlq_offset + 1
            if not chosen.matches(dl):
                summary.skipped += 1
                continue
            if dl.value_omitted or dl.offset < 0:
                summary.skipped += 1  # the dead letter does not hold the original value
                continue
            if dl.source in seen:
                summary.duplicates += 1
                continue
            seen.add(dl.source)
            picked += 1
            batch.append(dl)
            if len(batch) >= BATCH:
                flush()
        flush()
    finally:
        if replayer is not None:
            replayer.close()
        committer.close()
    return summary


def _replay_batch(
    settings: Settings,
    batch: list[DeadLetterRecord],
    summary: Summary,
    replayer: Replayer | None,
    producer: Any,
    dry_run: bool,
) -> None:
    if not batch:
        return
    if replayer is None:  # --to-topic
        if not dry_run:
            _produce(producer, batch)
        summary.replayed += len(batch)
        return
    stamps = original_timestamps(settings, batch)
    messages = [original(dl, stamps.get((dl.topic, dl.partition, dl.offset))) for dl in batch]
    before = len(replayer.failed_again)
    _, dropped = replayer.run(messages)
    stages: dict[tuple[str, int, int], str] = {}
    for d in replayer.failed_again[before:]:  # a fanned-out record may fail more than once
        stages.setdefault((d.record.topic, d.record.partition, d.record.offset), d.stage)
    for stage in stages.values():
        summary.failures[stage] = summary.failures.get(stage, 0) + 1
    summary.failed += len(stages)
    summary.skipped += dropped
    done = len(batch) - len(stages) - dropped
    if dry_run:
        summary.unverified += done
    else:
        summary.replayed += done


def _producer(settings: Settings) -> Any:
    from confluent_kafka import Producer

    return Producer(
        settings.librdkafka(
            "producer", defaults={"linger.ms": 5}, **{"enable.idempotence": True, "acks": "all"}
        )
    )


def _produce(producer: Any, batch: list[DeadLetterRecord]) -> None:
    """The original key, value and headers to the original topic and partition, confirmed."""
    errors: list[Any] = []
    for dl in batch:
        producer.produce(
            dl.topic,
            key=dl.key,
            value=dl.value,
            headers=list(dl.original_headers),
            partition=dl.partition,
            on_delivery=lambda e, _m: errors.append(e) if e is not None else None,
        )
        producer.poll(0)
    if producer.flush(60) or errors:
        raise common.Problem(f"--to-topic: {len(errors) or 'some'} records were not confirmed")


@dlq_app.command("replay")
def replay_command(
    stage: str | None = StageOpt,
    topic: str | None = TopicOpt,
    since: str | None = SinceOpt,
    until: str | None = UntilOpt,
    grep: str | None = GrepOpt,
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Decode, transform and encode; write nothing. Elasticsearch is not asked: "
        "what it would be sent is counted as unverified.",
    ),
    to_topic: bool = typer.Option(
        False, "--to-topic", help="Re-produce the originals to their topic instead."
    ),
    group: str | None = typer.Option(None, "--group", help="The replay's own consumer group."),
    restart: bool = typer.Option(False, "--restart", help="Start from the topic's beginning."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Replay at most N records."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Send the selected dead letters through decoding, transforms and the sink again."""
    with common.errors_as_exits():
        settings = common.load_settings()
        chosen = selection(stage, topic, since, until, grep)
        summary = replay(
            settings,
            chosen,
            group=group,
            restart=restart,
            dry_run=dry_run,
            to_topic=to_topic,
            limit=limit,
        )
        if json_out:
            common.emit_json({**summary.as_json(), "summary": summary.line()})
        else:
            common.out.print(summary.line(), highlight=False)
            if summary.unverified:
                common.out.print(
                    "unverified: decoded, transformed and encoded, not sent: Elasticsearch "
                    "may still refuse them (a mapping); replay without --dry-run to know",
                    highlight=False,
                )
        if summary.failed:
            raise typer.Exit(common.PROBLEM)
