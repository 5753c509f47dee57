"""`es-sink preview`: N records of the configured topics through the flow's own processor
(`flows.process.Processor`: decoding, the transforms, routing, document ids and action
encoding), each printed as the action, index, id and document the flow would send, or the
stage and reason it would fail with, or that a transform drops it.

Nothing is written anywhere and nothing is committed: the records are read by assignment
with a throw-away consumer group that never commits (`common.consumer`). Like Vector's
`tap`, before a deployment or after a transform change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import typer

from flows.cli import common

if TYPE_CHECKING:
    from flows.config import Settings

Coords = tuple[str, int, int]


@dataclass(frozen=True)
class Entry:
    """What the flow would do with one record (a fanned-out record has several)."""

    topic: str
    partition: int
    offset: int
    action: str | None = None
    """index, create, update or delete; None when the record fails or is dropped."""
    index: str | None = None
    id: str | None = None
    routing: str | None = None
    document: Any = None
    stage: str | None = None
    """The stage it fails at (deserialize, transform, index)."""
    error_class: str | None = None
    reason: str | None = None

    @property
    def where(self) -> str:
        return f"{self.topic}/{self.partition}@{self.offset}"

    @property
    def outcome(self) -> str:
        return "failed" if self.stage else "dropped" if self.action is None else "document"

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.where, "outcome": self.outcome}
        if self.action is not None:
            out |= {"action": self.action, "index": self.index, "id": self.id}
            out |= {"routing": self.routing, "document": self.document}
        if self.stage is not None:
            out |= {"stage": self.stage, "error_class": self.error_class, "reason": self.reason}
        return out


def read(
    settings: Settings, limit: int, from_offset: int | None, partition: int | None
) -> list[Any]:
    """Up to `limit` records of the flow's topics, partition by partition, from
    `from_offset` (or each partition's first record)."""
    from confluent_kafka import TopicPartition

    topics = common.flow_topics(settings)
    chosen = [(t, p) for t, ps in topics.items() for p in ps if partition in (None, p)]
    if not chosen:
        raise common.Usage(f"--partition: no partition {partition} in {', '.join(topics)}")
    c = common.consumer(settings)
    out: list[Any] = []
    try:
        for topic, p in chosen:
            low, high = c.get_watermark_offsets(
                TopicPartition(topic, p), timeout=common.KAFKA_TIMEOUT_S
            )
            begin = max(low, from_offset if from_offset is not None else low)
            end = min(high, begin + limit - len(out))
            if begin < end:
                out += common.read_range(c, topic, p, begin, end, 30.0, "KAFKA_TOPICS")
            if len(out) >= limit:
                break
    finally:
        c.close()
    return out


def preview(settings: Settings, messages: list[Any]) -> list[Entry]:
    """What the flow's processor makes of `messages`, in their order."""
    from flows.cli.replay import replay_settings
    from flows.cli.verify import decode_action
    from flows.process import Processor, is_documents

    found: dict[Coords, list[Entry]] = {}
    if messages:
        for item in Processor(replay_settings(settings), (), 1)(messages):
            if is_documents(item):
                for action in item[1]:
                    op, (index, doc_id, routing), body = decode_action(action)
                    rec = action.record
                    entry = Entry(
                        rec.topic, rec.partition, rec.offset, op, index, doc_id or None,
                        routing, body,
                    )  # fmt: skip
                    found.setdefault((rec.topic, rec.partition, rec.offset), []).append(entry)
            else:
                dl = item[1]
                rec = dl.record
                entry = Entry(
                    rec.topic, rec.partition, rec.offset,
                    stage=dl.stage, error_class=dl.error_class, reason=dl.message,
                )  # fmt: skip
                found.setdefault((rec.topic, rec.partition, rec.offset), []).append(entry)
    out: list[Entry] = []
    for m in messages:
        coords = (m.topic(), m.partition(), m.offset())
        out += found.get(coords) or [Entry(*coords)]  # none: a transform dropped it
    return out


def preview_command(
    limit: int = typer.Option(10, "--limit", min=1, help="How many records to read."),
    from_offset: int | None = typer.Option(
        None, "--from-offset", min=0, help="Start at this offset (default: the first record)."
    ),
    partition: int | None = typer.Option(None, "--partition", min=0, help="Only this partition."),
    json_out: bool = common.JsonOpt,
) -> None:
    """Show what the flow would send for N records: nothing is written or committed."""
    with common.errors_as_exits():
        settings = common.load_settings()
        messages = read(settings, limit, from_offset, partition)
        entries = preview(settings, messages)
    counts = {k: sum(e.outcome == k for e in entries) for k in ("document", "failed", "dropped")}
    if json_out:
        common.emit_json(
            {"read": len(messages), **counts, "records": [e.as_json() for e in entries]}
        )
        return
    for e in entries:
        _print(e)
    common.out.print(
        f"read={len(messages)} documents={counts['document']} failed={counts['failed']} "
        f"dropped={counts['dropped']}",
        highlight=False,
    )


def _print(e: Entry) -> None:
    if e.stage is not None:
        line = f"{e.where}  FAILED at {e.stage}: {e.error_class}: {e.reason}"
    elif e.action is None:
        line = f"{e.where}  dropped by a transform"
    else:
        routing = f" routing={e.routing}" if e.routing else ""
        doc = "" if e.document is None else orjson.dumps(e.document, default=str).decode()
        line = f"{e.where}  {e.action} {e.index} id={e.id}{routing}\n  {doc}".rstrip()
    common.out.print(line, highlight=False, markup=False, soft_wrap=True)
