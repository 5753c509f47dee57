"""The end-of-run audit: the index, the dead-letter topic and the committed offsets.

Everything is compared with the ground truth from `chaos.workload`, never with what the
flow says about itself: documents by id, `_source` and `_version` (= the offset of the last
good write), dead letters by the coordinates in their `__connect.errors.*` headers.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from chaos.workload import SEQ_HEADER, Expected, Rec

_P = "__connect.errors."
MAX_DETAILS = 20


@dataclass
class AuditResult:
    """Counts for the summary line, plus a few examples of each problem."""

    lost: int = 0
    wrong: int = 0
    extra: int = 0
    dlq_expected: int = 0
    dlq_found: int = 0
    dlq_duplicates: int = 0
    dlq_good: int = 0
    """Dead letters whose coordinates are a good record (must be 0)."""
    dlq_unknown: int = 0
    """Dead letters without coordinates of this run's topic (must be 0)."""
    dlq_mismatch: int = 0
    """Dead letters of bad records whose bytes, headers or stage differ (must be 0)."""
    commit_mismatch: int = 0
    """Partitions whose committed offset is not the end offset (must be 0)."""
    details: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.details) < MAX_DETAILS:
            self.details.append(text)

    @property
    def ok(self) -> bool:
        return (
            self.lost == self.wrong == self.extra == 0
            and self.dlq_found >= self.dlq_expected
            and self.dlq_good == self.dlq_unknown == self.dlq_mismatch == 0
            and self.commit_mismatch == 0
        )


def audit(
    *,
    es: Any,
    bootstrap: str,
    topic: str,
    index: str,
    dlq_topic: str,
    group: str,
    recs: list[Rec],
    exp: Expected,
) -> AuditResult:
    """Run every check; the result says what is wrong, with examples."""
    result = AuditResult(dlq_expected=len(exp.bad))
    _audit_index(result, es, index, recs, exp)
    _audit_dead_letters(result, bootstrap, topic, dlq_topic, recs, exp)
    _audit_offsets(result, bootstrap, topic, group, exp)
    return result


def _audit_index(result: AuditResult, es: Any, index: str, recs: list[Rec], exp: Expected) -> None:
    from elasticsearch.helpers import scan

    es.indices.refresh(index=index)
    seen: set[str] = set()
    for hit in scan(es, index=index, query={"query": {"match_all": {}}}, size=5000, version=True):
        doc_id = hit["_id"]
        want = exp.docs.get(doc_id)
        if want is None:
            result.extra += 1
            result.note(f"extra document {doc_id!r}: {_short(hit.get('_source'))}")
            continue
        seen.add(doc_id)
        offset, i = want
        source = orjson.loads(recs[i].value or b"")
        if hit["_source"] != source or hit.get("_version") != offset:
            result.wrong += 1
            result.note(
                f"wrong document {doc_id!r}: _version={hit.get('_version')} "
                f"_source={_short(hit['_source'])}; expected _version={offset} "
                f"(partition {recs[i].partition}) _source={_short(source)}"
            )
    for doc_id in exp.docs.keys() - seen:
        result.lost += 1
        offset, i = exp.docs[doc_id]
        result.note(
            f"lost document {doc_id!r}: last good write at partition {recs[i].partition} "
            f"offset {offset}"
        )


def _audit_dead_letters(
    result: AuditResult,
    bootstrap: str,
    topic: str,
    dlq_topic: str,
    recs: list[Rec],
    exp: Expected,
) -> None:
    per_coords: Counter[tuple[int, int]] = Counter()
    for msg in consume_all(bootstrap, dlq_topic):
        headers: dict[str, bytes | None] = {}
        for name, value in msg.headers() or ():
            headers.setdefault(name, value)  # the first: original headers precede ours
        try:
            src_topic = (headers[_P + "topic"] or b"").decode()
            coords = (int(headers[_P + "partition"] or b""), int(headers[_P + "offset"] or b""))
        except (KeyError, ValueError):
            result.dlq_unknown += 1
            result.note(f"dead letter without coordinates at offset {msg.offset()}: {headers}")
            continue
        stage = (headers.get(_P + "stage") or b"").decode()
        why = (headers.get(_P + "exception.message") or b"")[:200].decode(errors="replace")
        if src_topic != topic:
            result.dlq_unknown += 1
            result.note(f"dead letter from another topic {src_topic!r} {coords}")
        elif coords in exp.good:
            result.dlq_good += 1
            result.note(f"good record {coords} dead-lettered at stage {stage}: {why}")
        elif coords not in exp.bad:
            result.dlq_unknown += 1
            result.note(f"dead letter for unknown coordinates {coords}")
        else:
            per_coords[coords] += 1
            rec = recs[exp.bad[coords]]
            seq = headers.get(SEQ_HEADER)
            problems = []
            if msg.value() != rec.value:
                problems.append("value bytes differ")
            if msg.key() != rec.key:
                problems.append(f"key {msg.key()!r} != {rec.key!r}")
            if seq != str(exp.bad[coords]).encode():
                problems.append(f"original header {SEQ_HEADER}={seq!r} missing or changed")
            if stage != rec.stage:
                problems.append(f"stage {stage!r}, expected {rec.stage!r} ({why})")
            if problems:
                result.dlq_mismatch += 1
                result.note(f"dead letter {coords} ({rec.kind}): {'; '.join(problems)}")
    result.dlq_found = len(per_coords)
    result.dlq_duplicates = sum(per_coords.values()) - len(per_coords)
    missing = [c for c in exp.bad if c not in per_coords]
    for coords in sorted(missing)[:MAX_DETAILS]:
        rec = recs[exp.bad[coords]]
        result.note(f"missing dead letter {coords} ({rec.kind}, stage {rec.stage})")


def _audit_offsets(
    result: AuditResult, bootstrap: str, topic: str, group: str, exp: Expected
) -> None:
    committed = committed_offsets(bootstrap, group, topic)
    ends = end_offsets(bootstrap, topic)
    for p, end in sorted(ends.items()):
        want = exp.end_offsets.get(p, 0)
        if committed.get(p) != end or end != want:
            result.commit_mismatch += 1
            result.note(
                f"partition {p}: committed {committed.get(p)} but end offset {end} "
                f"(records produced up to {want})"
            )


def _short(value: Any, limit: int = 300) -> str:
    text = orjson.dumps(value).decode() if value is not None else "None"
    return text if len(text) <= limit else text[:limit] + "..."


# -- Kafka helpers


def partitions_of(bootstrap: str, topic: str) -> list[int]:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=15)
    info = meta.topics.get(topic)
    if info is None or info.error is not None:
        return []
    return sorted(info.partitions)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """High watermarks per partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-{uuid.uuid4()}"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1]
            for p in partitions_of(bootstrap, topic)
        }
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets (negative when none)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        tps = [TopicPartition(topic, p) for p in partitions_of(bootstrap, topic)]
        return {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=15)}
    finally:
        consumer.close()


def consume_all(bootstrap: str, topic: str, timeout_s: float = 120.0) -> list[Any]:
    """Every message of `topic` up to its current end offsets."""
    from confluent_kafka import Consumer, TopicPartition

    ends = end_offsets(bootstrap, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chaos-audit-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    out: list[Any] = []
    try:
        todo = {p: end for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in todo])
        position = dict.fromkeys(todo, 0)
        deadline = time.monotonic() + timeout_s
        while any(position[p] < todo[p] for p in todo):
            if time.monotonic() > deadline:
                msg = f"reading {topic} took over {timeout_s:.0f}s: at {position} of {todo}"
                raise TimeoutError(msg)
            for m in consumer.consume(1000, 0.5):
                if m.error() is None:
                    out.append(m)
                    position[int(m.partition() or 0)] = int(m.offset() or 0) + 1
    finally:
        consumer.close()
    return out
