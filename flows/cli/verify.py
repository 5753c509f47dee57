"""`es-sink verify`: derive what the flow must have written and compare it with
Elasticsearch.

The records below the group's committed offset (or `--from-offset`/`--to-offset`) go
through the flow's own processor (decoding, the configured transforms, document ids,
indices, routing, the write method's action), so the expectation is the flow's, not a
guess. Per document (index, id, routing) the writes are replayed in order as
Elasticsearch applies them: `index` replaces, `create` keeps the first, `update`
(`doc_as_upsert`) merges, `delete` removes. Then:

- missing: a document that must exist does not;
- stale: it exists with other content (an older record's, or none of them);
- undeleted: its last write was a delete and it still exists;
- extra: an id in the written indices that no record of the topics produced (checked only
  over the whole topics, from their log start to their end);
- lost: a record the flow dead-letters (decoding, transforms, an action it cannot build)
  that is not in the dead-letter topic.

A document written by a record Elasticsearch refused (in the dead-letter topic, stage
`index`) is not compared: what the index holds then is an earlier write. With ES_PIPELINE
the ingest pipeline changes documents, and under WRITE_METHOD=script the script does, so
only their presence is compared (a scripted update creates a missing document only with
an upsert).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import typer
from rich.progress import Progress

from flows.cli import common
from flows.cli.common import PartitionOffsets, Usage
from flows.cli.dlq import parse, read
from flows.cli.replay import replay_settings

if TYPE_CHECKING:
    from flows.config import Settings
    from sinks.model import Action, Record

Coords = tuple[str, int, int]
DocKey = tuple[str, str, str | None]
"""(index, id, routing)"""
KINDS = ("missing", "stale", "undeleted", "extra", "lost")
EXAMPLES = 20


@dataclass
class Write:
    """One bulk action as the flow encodes it, decoded again."""

    op: str
    source: Any
    coords: Coords
    timestamp: int


@dataclass(frozen=True)
class Scripted:
    """A scripted update's effect, which only the script knows: the document exists
    afterwards if it did before, or if the update upserts (`upsert`, `scripted_upsert`)."""

    creates: bool


@dataclass
class Report:
    ranges: list[dict[str, Any]] = field(default_factory=list)
    records: int = 0
    documents: int = 0
    compared: int = 0
    refused_by_es: int = 0
    """Documents not compared: Elasticsearch refused a write to them (dead-lettered)."""
    failed_before_index: int = 0
    """Records the flow dead-letters before Elasticsearch (decoding, transforms, actions)."""
    in_flight: int = 0
    content_compared: bool = True
    found: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {k: [] for k in KINDS})

    @property
    def ok(self) -> bool:
        return not any(self.found.values())

    def add(self, kind: str, key: DocKey | None, coords: Coords | None, detail: str) -> None:
        index, doc_id, routing = key if key is not None else (None, None, None)
        self.found[kind].append(
            {
                "index": index,
                "id": doc_id,
                "routing": routing,
                "source": None if coords is None else f"{coords[0]}/{coords[1]}@{coords[2]}",
                "detail": detail,
            }
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "ranges": self.ranges,
            "records": self.records,
            "documents": self.documents,
            "compared": self.compared,
            "dead_lettered": self.refused_by_es,  # the former name of refused_by_es
            "refused_by_es": self.refused_by_es,
            "failed_before_index": self.failed_before_index,
            "in_flight": self.in_flight,
            "content_compared": self.content_compared,
            "counts": {k: len(v) for k, v in self.found.items()},
            "discrepancies": {k: v[:EXAMPLES] for k, v in self.found.items()},
        }

    def lines(self) -> list[str]:
        ranges = " ".join(
            f"{r['topic']}/{r['partition']}[{r['from']},{r['to']})" for r in self.ranges
        )
        out = [
            f"verified {ranges}: records={self.records} documents={self.documents} "
            f"compared={self.compared} refused_by_es={self.refused_by_es} "
            f"failed_before_index={self.failed_before_index} in_flight={self.in_flight}",
            " ".join(f"{k}={len(v)}" for k, v in self.found.items()),
        ]
        for kind, items in self.found.items():
            for item in items[:EXAMPLES]:
                where = f"{item['index']}/{item['id']}" if item["id"] is not None else ""
                out.append(f"  {kind:9} {where} ({item['source'] or '-'}): {item['detail']}")
        out.append("ok" if self.ok else "DISCREPANCIES FOUND")
        return out


def decode_action(action: Action) -> tuple[str, DocKey, Any]:
    """(op, (index, id, routing), body) of an encoded action (its NDJSON lines)."""
    lines = action.data.split(b"\n")
    ((op, meta),) = orjson.loads(lines[0]).items()
    body = orjson.loads(lines[1]) if op != "delete" else None
    if op == "update" and isinstance(body, dict):
        body = Scripted("upsert" in body) if "script" in body else body.get("doc")
    return op, (meta["_index"], meta.get("_id") or "", meta.get("routing")), body


def merged(base: Any, doc: Any) -> Any:
    """`doc_as_upsert`: objects merge recursively, everything else is replaced."""
    if not isinstance(base, dict) or not isinstance(doc, dict):
        return doc
    out = dict(base)
    for k, v in doc.items():
        out[k] = merged(out.get(k), v) if isinstance(v, dict) else v
    return out


def final_state(writes: list[Write]) -> list[tuple[Write, Any]]:
    """`writes` in the order Elasticsearch applies them, each with the document after it
    (None: absent); the last is the final state. One partition orders by offset; writes to
    one document from several partitions by record timestamp."""
    one_partition = len({(w.coords[0], w.coords[1]) for w in writes}) == 1
    ordered = sorted(
        writes,
        key=(lambda w: w.coords[2]) if one_partition else (lambda w: (w.timestamp, w.coords)),
    )
    state: Any = None
    out: list[tuple[Write, Any]] = []
    for w in ordered:
        if w.op == "index":
            state = w.source
        elif w.op == "create":
            state = w.source if state is None else state
        elif w.op == "update" and isinstance(w.source, Scripted):
            state = {} if state is None and w.source.creates else state
        elif w.op == "update":
            state = merged(state or {}, w.source)
        elif w.op == "delete":
            state = None
        out.append((w, state))
    return out


def verify(
    settings: Settings,
    topic: str | None = None,
    partition: int | None = None,
    from_offset: int | None = None,
    to_offset: int | None = None,
    sample: int | None = None,
    progress: bool = False,
) -> Report:
    """See the module docstring."""
    from flows.process import Processor

    if settings.doc_id == "none":
        raise Usage("DOC_ID: none: Elasticsearch generates the ids, so nothing can be matched")
    if settings.es_data_stream:
        raise Usage("ES_DATA_STREAM: verify compares documents by id, not data streams")
    parts = common.flow_partitions(settings, topic, partition)
    topics = {p.topic for p in parts}
    whole = partition is None and from_offset is None and to_offset is None and sample is None
    report = Report(content_compared=not settings.es_pipeline and settings.write_method != "script")
    plan: list[tuple[PartitionOffsets, int, int]] = []
    for p in parts:
        start = max(from_offset if from_offset is not None else p.low, p.low)
        stop = to_offset if to_offset is not None else (p.committed or start)
        stop = max(min(stop, p.end), start)
        plan.append((p, start, stop))
        report.ranges.append(
            {"topic": p.topic, "partition": p.partition, "from": start, "to": stop}
        )
    # Reading to the end: records above the committed offset may be indexed already, and
    # their ids are no extra documents.
    # A document's state comes from every committed record (those past `--to-offset` too:
    # they overwrite it); past the committed offset, records may or may not be written yet:
    # documents they touch are not compared (in flight), and they are read only over the
    # whole topics, so that their ids are no extra documents.
    state_to = {(p.topic, p.partition): max(stop, p.committed or 0) for p, _, stop in plan}
    read_to = {(p.topic, p.partition): p.end if whole else state_to[(p.topic, p.partition)]
               for p, _, _ in plan}  # fmt: skip
    processor = Processor(replay_settings(settings), (), 1)
    seen = _Seen()
    total = sum(read_to[(p.topic, p.partition)] - start for p, start, _ in plan)
    c = common.consumer(settings)
    try:
        with Progress(disable=not progress, transient=True, console=common.err) as bar:
            task = bar.add_task("reading records", total=total)
            for p, start, stop in plan:
                end = read_to[(p.topic, p.partition)]
                limits = (start, stop, state_to[(p.topic, p.partition)])
                batch: list[Any] = []
                records = common.read_range(
                    c, p.topic, p.partition, start, end, 30.0, "KAFKA_TOPICS"
                )
                for msg in records:
                    batch.append(msg)
                    if len(batch) >= 1000:
                        seen.process(processor, batch, limits, report)
                        bar.advance(task, len(batch))
                        batch = []
                seen.process(processor, batch, limits, report)
                bar.advance(task, len(batch))
    finally:
        c.close()
    report.failed_before_index = len(seen.failed)
    dead = _dead_lettered(settings, topics) if settings.dlq_topic else {}
    for coords, why in seen.failed.items():
        if coords not in dead:
            why = f"dead-lettered by the flow ({why}) but not in DLQ_TOPIC"
            report.add("lost", None, coords, why)
    keys = [k for k in seen.in_range if k not in seen.in_flight]
    report.in_flight = len(seen.in_range) - len(keys)
    _compare(settings, seen.writes, keys, dead, sample, report)
    if whole:
        _extra(settings, seen.ids, report)
    return report


@dataclass
class _Seen:
    """What the records read say the flow must have written."""

    writes: dict[DocKey, list[Write]] = field(default_factory=dict)
    in_range: dict[DocKey, None] = field(default_factory=dict)
    """Documents written by a record of the verified range (in order)."""
    in_flight: set[DocKey] = field(default_factory=set)
    """Documents written by a record past the committed offset."""
    failed: dict[Coords, str] = field(default_factory=dict)
    ids: dict[str, set[str]] = field(default_factory=dict)
    """Every id the records read produce, by index."""

    def process(
        self, processor: Any, batch: list[Any], limits: tuple[int, int, int], report: Report
    ) -> None:
        """Run the flow's processor on `batch`; `limits` = (start, stop, committed state end)."""
        from flows.process import is_documents

        start, stop, state_to = limits
        if not batch:
            return
        for item in processor(batch):
            if not is_documents(item):
                failed: Record = item[1].record
                if failed.offset < stop:
                    where = (failed.topic, failed.partition, failed.offset)
                    self.failed[where] = f"stage {item[1].stage}"
                continue
            for action in item[1]:
                op, key, body = decode_action(action)
                self.ids.setdefault(key[0], set()).add(key[1])
                rec: Record = action.record
                if rec.offset >= state_to:
                    self.in_flight.add(key)
                    continue
                coords = (rec.topic, rec.partition, rec.offset)
                self.writes.setdefault(key, []).append(Write(op, body, coords, rec.timestamp or 0))
                if start <= rec.offset < stop:
                    self.in_range[key] = None
        report.records += sum(1 for m in batch if int(m.offset() or 0) < stop)


def _dead_lettered(settings: Settings, topics: set[str]) -> dict[Coords, str]:
    out: dict[Coords, str] = {}
    for msg in read(settings):
        dl = parse(msg)
        if dl.topic in topics:
            out[(dl.topic, dl.partition, dl.offset)] = dl.stage
    return out


def _compare(
    settings: Settings,
    writes: dict[DocKey, list[Write]],
    keys: list[DocKey],
    dead: dict[Coords, str],
    sample: int | None,
    report: Report,
) -> None:
    report.documents = len(keys)
    skipped = {k for k in keys if any(w.coords in dead for w in writes[k])}
    report.refused_by_es = len(skipped)
    keys = [k for k in keys if k not in skipped]
    if sample is not None and sample < len(keys):
        keys = random.sample(keys, sample)
    client = common.es_client(settings)
    for chunk in _chunks(keys, 500):
        docs = [
            {"_index": i, "_id": d, **({"routing": r} if r is not None else {})}
            for i, d, r in chunk
        ]
        try:
            answer = client.mget(docs=docs, realtime=True)
        except Exception as e:
            raise common.es_problem(e, settings, "reading the documents") from None
        for key, hit in zip(chunk, answer["docs"], strict=True):
            report.compared += 1
            _judge(key, writes[key], hit, report)


def _judge(key: DocKey, ws: list[Write], hit: dict[str, Any], report: Report) -> None:
    steps = final_state(ws)
    last, state = steps[-1]
    there = bool(hit.get("found"))
    if state is None:
        # After a scripted update of a missing document only the script knows.
        if there and not isinstance(last.source, Scripted):
            report.add("undeleted", key, last.coords, "its last write is a delete, yet it exists")
        return
    if not there:
        report.add("missing", key, last.coords, "not in Elasticsearch")
        return
    actual = hit.get("_source")
    # A script (WRITE_METHOD=script, or a per-record `script` action) made the content.
    scripted = any(isinstance(w.source, Scripted) for w in ws)
    if report.content_compared and not scripted and actual != state:
        older = next((w.coords for w, after in reversed(steps) if after == actual), None)
        why = (
            f"holds the document of {older[0]}/{older[1]}@{older[2]}"
            if older
            else "content differs"
        )
        report.add("stale", key, last.coords, why)


def _extra(settings: Settings, produced: dict[str, set[str]], report: Report) -> None:
    from elasticsearch import NotFoundError
    from elasticsearch.helpers import scan

    client = common.es_client(settings)
    for index, ids in produced.items():
        try:
            for hit in scan(client, index=index, query={"_source": False}, size=5000):
                if hit["_id"] not in ids:
                    key = (hit["_index"], hit["_id"], hit.get("_routing"))
                    report.add("extra", key, None, "no record of the topics produced it")
        except NotFoundError:
            continue
        except Exception as e:
            raise common.es_problem(e, settings, f"listing the ids of {index}") from None


def _chunks(items: list[DocKey], n: int) -> Iterable[list[DocKey]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def verify_command(
    topic: str | None = typer.Option(None, "--topic", help="Only this topic."),
    partition: int | None = typer.Option(None, "--partition", min=0, help="Only this partition."),
    from_offset: int | None = typer.Option(None, "--from-offset", min=0, help="First offset."),
    to_offset: int | None = typer.Option(
        None, "--to-offset", min=0, help="End offset (exclusive); default: the committed one."
    ),
    sample: int | None = typer.Option(None, "--sample", min=1, help="Compare N random documents."),
    json_out: bool = common.JsonOpt,
) -> None:
    """Compare what the flow must have written with Elasticsearch."""
    with common.errors_as_exits():
        settings = common.load_settings()
        report = verify(
            settings, topic, partition, from_offset, to_offset, sample,
            progress=not json_out and common.err.is_terminal,
        )  # fmt: skip
        if json_out:
            common.emit_json(report.as_json())
        else:
            for line in report.lines():
                common.out.print(line, highlight=False, markup=False)
        if not report.ok:
            raise typer.Exit(common.PROBLEM)
