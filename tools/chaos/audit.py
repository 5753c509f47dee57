"""The end-of-run audit: the index, the dead-letter topic and the committed offsets.

Everything is compared with the ground truth (`tools.chaos.truth`, from the broker's delivery
reports), never with what the flow says about itself: each document by id, `_source`,
`_version` (= the `seq` of its last good write, under VERSION=header:chaos-seq) and `_routing`
(ES_ROUTING=key), dead letters by the coordinates in their `__connect.errors.*` headers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from tools.chaos.truth import Truth
from tools.chaos.workload import ABORTED_SEQ, SEQ_HEADER, Rec
from tools.devkit import kafka
from tools.devkit.es import hits_by_id

_P = "__connect.errors."
MAX_DETAILS = 20


@dataclass
class AuditResult:
    """Counts for the summary line, plus a few examples of each problem."""

    lost: int = 0
    wrong: int = 0
    extra: int = 0
    undeleted: int = 0
    """Documents that survived their tombstone (ON_NULL_VALUE=delete; must be 0)."""
    aborted_seen: int = 0
    """Documents or dead letters of records from aborted transactions (must be 0)."""
    dlq_expected: int = 0
    dlq_found: int = 0
    dlq_duplicates: int = 0
    dlq_good: int = 0
    """Dead letters whose coordinates are a good record (must be 0)."""
    dlq_unknown: int = 0
    """Dead letters without coordinates of this run's topic, or any under
    ERRORS_TOLERANCE=none (must be 0)."""
    dlq_mismatch: int = 0
    """Dead letters of bad records whose bytes, headers or stage differ (must be 0)."""
    commit_mismatch: int = 0
    """Partitions whose committed offset is not the end offset, or under
    ERRORS_TOLERANCE=none past the partition's first bad record (must be 0)."""
    details: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.details) < MAX_DETAILS:
            self.details.append(text)

    @property
    def ok(self) -> bool:
        return (
            self.lost == self.wrong == self.extra == self.undeleted == self.aborted_seen == 0
            and self.dlq_found >= self.dlq_expected
            and self.dlq_good == self.dlq_unknown == self.dlq_mismatch == 0
            and self.commit_mismatch == 0
        )


@dataclass
class Expect:
    """How the run was configured, hence what the audit may demand."""

    versioned: bool = True
    """VERSION=header:chaos-seq: `_version` is the `seq` of the record that wrote the
    document (its place in the workload, in offset order per key)."""
    routed: bool = False
    """ES_ROUTING=key: a keyed document's `_routing` is its key."""
    counted: bool = False
    """`tools.chaos.modes.COUNTING_SCRIPT`: the record's JSON plus `applied` and `writes`, the
    count of the document's writes since its last deletion."""
    strict: bool = False
    """ERRORS_TOLERANCE=none: no dead letters; the run ends stopped on a bad record."""
    bounds: dict[int, tuple[int, int]] = field(default_factory=dict)
    """partition -> (low, high) for `Truth.allowed`; missing: the end offset, both."""
    ends: dict[int, int] = field(default_factory=dict)
    """The topic's end offsets once everything was produced (control records included)."""
    aborted: dict[tuple[int, int], Rec] = field(default_factory=dict)


def audit(
    *,
    es: Any,
    bootstrap: str,
    truth: Truth,
    index: str,
    dlq_topic: str,
    group: str,
    expect: Expect,
) -> AuditResult:
    """Run every check; the result says what is wrong, with examples."""
    result = AuditResult(dlq_expected=0 if expect.strict else len(truth.bad))
    _audit_index(result, es, index, truth, expect)
    _audit_dead_letters(result, bootstrap, dlq_topic, truth, expect)
    _audit_offsets(result, bootstrap, group, truth, expect)
    return result


def audit_documents(*, es: Any, truth: Truth, index: str, expect: Expect) -> AuditResult:
    """The index alone (`lost`, `wrong`, `extra`, `undeleted`, `aborted_seen`): for a
    system with no dead-letter topic of ours to read (`chaos.compare`)."""
    result = AuditResult()
    _audit_index(result, es, index, truth, expect)
    return result


def scan_index(es: Any, index: str, source: bool | list[str] = True) -> dict[str, dict[str, Any]]:
    """Every document of `index` by id: the hit with `_source`, `_version`, `_routing`."""
    return hits_by_id(es, index, source=source, version=True, missing_ok=True)


def seq_of(hit: dict[str, Any]) -> int:
    """The `seq` a document carries: the index of the record that wrote it (-1: none)."""
    seq = (hit.get("_source") or {}).get("seq")
    return seq if isinstance(seq, int) else -1


def _audit_index(result: AuditResult, es: Any, index: str, truth: Truth, expect: Expect) -> None:
    recs = truth.recs
    docs = scan_index(es, index)
    for doc_id, hit in docs.items():
        seq = seq_of(hit)
        if seq >= ABORTED_SEQ:
            result.aborted_seen += 1
            result.note(f"document {doc_id!r} from an aborted transaction: {_short(hit)}")
            continue
        if doc_id not in truth.ops:
            result.extra += 1
            result.note(f"extra document {doc_id!r}: {_short(hit.get('_source'))}")
            continue
        low, high = _bounds(truth, doc_id, expect)
        allowed = truth.allowed(doc_id, low, high)
        problem = _mismatch(hit, seq, allowed.recs, truth, expect)
        if problem is None:
            continue
        if not allowed.recs and allowed.absent:
            deleted = any(recs[i].value is None for i in truth.ops[doc_id])
            if deleted and truth.deletes:
                result.undeleted += 1
                result.note(f"document {doc_id!r} survived its tombstone: {_short(hit)}")
            else:
                result.extra += 1
                result.note(f"document {doc_id!r} must not exist yet: {_short(hit)}")
            continue
        result.wrong += 1
        want = [f"{recs[i].partition}@{recs[i].offset}" for i in sorted(allowed.recs)][-3:]
        result.note(f"wrong document {doc_id!r}: {problem}; expected the write of {want}")
    for doc_id in truth.ops.keys() - docs.keys():
        low, high = _bounds(truth, doc_id, expect)
        if not truth.allowed(doc_id, low, high).absent:
            result.lost += 1
            i = truth.last(doc_id)
            result.note(
                f"lost document {doc_id!r}: last write at partition {recs[i].partition} "
                f"offset {recs[i].offset}"
            )


def _bounds(truth: Truth, doc_id: str, expect: Expect) -> tuple[dict[int, int], dict[int, int]]:
    """`Truth.allowed`'s (low, high) per partition of the document: `expect.bounds`, else
    the end offset, both (a completed run: exactly its newest write, moved or not)."""
    low: dict[int, int] = {}
    high: dict[int, int] = {}
    for p in truth.partitions(doc_id):
        end = expect.ends.get(p, 0)
        low[p], high[p] = expect.bounds.get(p, (end, end))
    return low, high


def _mismatch(
    hit: dict[str, Any], seq: int, allowed: set[int], truth: Truth, expect: Expect
) -> str | None:
    """Why `hit` is not the document of one of the `allowed` records (None: it is)."""
    if seq not in allowed:
        return f"written by record seq={seq} ({_short(hit)})"
    rec = truth.recs[seq]
    source = dict(hit.get("_source") or {})
    if expect.counted:
        source.pop("applied", None)
        writes = source.pop("writes", None)
        want = truth.writes(truth.doc_id(rec), seq)
        if writes != want:
            return f"writes={writes}, expected {want} ({_short(hit)})"
    if source != orjson.loads(rec.value or b""):
        return f"_source {_short(hit.get('_source'))} differs from record {seq}"
    if expect.versioned and hit.get("_version") != seq:
        return f"_version {hit.get('_version')} != seq {seq}"
    if expect.routed and rec.key is not None and hit.get("_routing") != rec.key.decode():
        return f"_routing {hit.get('_routing')!r} != key {rec.key.decode()!r}"
    return None


def _audit_dead_letters(
    result: AuditResult, bootstrap: str, dlq_topic: str, truth: Truth, expect: Expect
) -> None:
    recs, topic = truth.recs, truth.topic
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
        elif coords in expect.aborted:
            result.aborted_seen += 1
            result.note(f"dead letter of an aborted transaction's record {coords}: {why}")
        elif coords in truth.good:
            result.dlq_good += 1
            result.note(f"good record {coords} dead-lettered at stage {stage}: {why}")
        elif coords not in truth.bad:
            result.dlq_unknown += 1
            result.note(f"dead letter for unknown coordinates {coords}")
        elif expect.strict:
            result.dlq_unknown += 1
            result.note(f"dead letter {coords} although ERRORS_TOLERANCE=none: {why}")
        else:
            per_coords[coords] += 1
            rec = recs[truth.bad[coords]]
            seq = headers.get(SEQ_HEADER)
            problems = []
            if msg.value() != rec.value:
                problems.append("value bytes differ")
            if msg.key() != rec.key:
                problems.append(f"key {msg.key()!r} != {rec.key!r}")
            if seq != str(truth.bad[coords]).encode():
                problems.append(f"original header {SEQ_HEADER}={seq!r} missing or changed")
            if stage != rec.stage:
                problems.append(f"stage {stage!r}, expected {rec.stage!r} ({why})")
            if problems:
                result.dlq_mismatch += 1
                result.note(f"dead letter {coords} ({rec.kind}): {'; '.join(problems)}")
    result.dlq_found = len(per_coords)
    result.dlq_duplicates = sum(per_coords.values()) - len(per_coords)
    if expect.strict:
        return
    missing = [c for c in truth.bad if c not in per_coords]
    for coords in sorted(missing)[:MAX_DETAILS]:
        rec = recs[truth.bad[coords]]
        result.note(f"missing dead letter {coords} ({rec.kind}, stage {rec.stage})")


def _audit_offsets(
    result: AuditResult, bootstrap: str, group: str, truth: Truth, expect: Expect
) -> None:
    committed = committed_offsets(bootstrap, group, truth.topic)
    ends = end_offsets(bootstrap, truth.topic)
    for p, end in sorted(ends.items()):
        want = expect.ends.get(p, 0)
        got = committed.get(p, -1)
        if expect.strict:
            limit = truth.first_bad.get(p, end)
            if got > limit:
                result.commit_mismatch += 1
                result.note(f"partition {p}: committed {got}, past its first bad record {limit}")
        elif got != end or end != want:
            result.commit_mismatch += 1
            result.note(
                f"partition {p}: committed {got} but end offset {end} (produced up to {want})"
            )


def _short(value: Any, limit: int = 300) -> str:
    text = orjson.dumps(value).decode() if value is not None else "None"
    return text if len(text) <= limit else text[:limit] + "..."


# -- Kafka helpers


def partitions_of(bootstrap: str, topic: str) -> list[int]:
    """The partitions of `topic` ([] if none)."""
    return kafka.partitions_of(bootstrap, topic, timeout=15)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """High watermarks per partition."""
    return kafka.end_offsets(bootstrap, topic, timeout=15)


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets (negative when none)."""
    return kafka.committed_offsets(bootstrap, group, topic, timeout=15)


def consume_all(bootstrap: str, topic: str, timeout_s: float = 120.0) -> list[Any]:
    """Every message of `topic` up to its current end offsets (TimeoutError if slower)."""
    return kafka.consume_all(bootstrap, topic, timeout_s, strict=True)
