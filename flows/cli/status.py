"""`es-sink status [--watch]`: what Kafka, Elasticsearch and the flow processes say now.

Per partition of the flow's topics (the flow's own look-up): log start, end offset, the
group's committed offset, the committed lag (end - committed: not yet written and
committed) and, where a process reports its position, the read lag (end - position); the
group's state; the documents
in the indices the flow writes (ES_INDEX / ES_INDEX_MAP, a dated one as its wildcard); the
dead-letter topic's size and its newest dead letter; and, where processes serve the
status API (`--api`, or API_PORT), their state, rates and last errors.
"""

from __future__ import annotations

import contextlib
import signal
import time
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Group as RenderGroup
from rich.live import Live
from rich.table import Table

from flows.cli import common, control
from flows.cli.dlq import parse

if TYPE_CHECKING:
    from collections.abc import Iterator

    from rich.console import RenderableType

    from flows.config import Settings


def group_state(settings: Settings, group: str) -> dict[str, Any]:
    """The consumer group's state and member count. A flow reads through `assign()`, so
    it is never a member: `empty` while it runs, too (the status API tells that)."""
    client = common.admin(settings)  # held: futures of a collected client are cancelled
    try:
        desc = client.describe_consumer_groups([group])[group].result(common.KAFKA_TIMEOUT_S)
    except Exception as e:
        return {"id": group, "state": None, "members": None, "error": str(e)}
    return {"id": group, "state": desc.state.name.lower(), "members": len(desc.members)}


def kafka_part(settings: Settings, topics: dict[str, list[int]]) -> dict[str, Any]:
    """Topics with per-partition offsets and the totals."""
    parts = common.offsets(settings, settings.group_id, topics)
    out_topics = []
    for topic in topics:
        mine = [p for p in parts if p.topic == topic]
        out_topics.append(
            {
                "topic": topic,
                "partitions": [p.as_json() for p in mine],
                "end": sum(p.end for p in mine),
                "committed": sum(p.committed or 0 for p in mine),
                "committed_lag": sum(p.committed_lag or 0 for p in mine),
            }
        )
    return {
        "group": group_state(settings, settings.group_id),
        "topics": out_topics,
        "totals": {
            "partitions": len(parts),
            "end": sum(p.end for p in parts),
            "committed_lag": sum(p.committed_lag or 0 for p in parts),
            "uncommitted_partitions": sum(p.committed is None for p in parts),
        },
    }


def es_part(settings: Settings, topics: list[str]) -> list[dict[str, Any]]:
    """Documents per target index (as Elasticsearch counts them now, no refresh)."""
    by_index: dict[str, list[str]] = {}
    for topic, index in common.index_patterns(settings, topics).items():
        by_index.setdefault(index, []).append(topic)
    client = common.es_client(settings)
    out = []
    for index, of in by_index.items():
        entry: dict[str, Any] = {"index": index, "topics": of, "docs": None, "error": None}
        try:
            answer = client.count(index=index, allow_no_indices=True, ignore_unavailable=True)
            entry["docs"] = int(answer["count"])
        except Exception as e:
            entry["error"] = str(common.es_problem(e, settings, f"counting {index}"))
        out.append(entry)
    return out


def dead_letter_part(settings: Settings, metadata: dict[str, Any]) -> dict[str, Any] | None:
    """The dead-letter topic's record count (end - log start, summed) and newest record."""
    from confluent_kafka import TopicPartition

    topic = settings.dlq_topic
    if not topic:
        return None
    parts = common.partitions_of(metadata, topic)
    if not parts:
        return {"topic": topic, "records": None, "newest": None, "error": "no such topic"}
    c = common.consumer(settings)
    records = 0
    newest: Any = None
    try:
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            records += high - low
            if high > low:
                c.assign([TopicPartition(topic, p, high - 1)])
                for m in c.consume(1, 5.0):
                    if m.error() is None and (newest is None or _ts(m) > _ts(newest)):
                        newest = m
    finally:
        c.close()
    last = parse(newest) if newest is not None else None
    return {
        "topic": topic,
        "partitions": len(parts),
        "records": records,
        "newest": None
        if last is None
        else {
            "at": common.iso(last.timestamp),
            "source": last.where,
            "stage": last.stage,
            "error_class": last.error_class,
            "reason": last.message,
        },
    }


def _ts(m: Any) -> int:
    return int(m.timestamp()[1])


def collect(settings: Settings, api: list[str] | None = None) -> dict[str, Any]:
    """The whole `status --json` document."""
    metadata = common.reachable_topics(settings)
    topics = common.flow_topics(settings)
    out = kafka_part(settings, topics)
    out["indices"] = es_part(settings, list(topics))
    out["dead_letters"] = dead_letter_part(settings, metadata)
    out["processes"] = [a.as_json() for a in control.statuses(settings, api)]
    add_read_lag(out)
    return out


def add_read_lag(found: dict[str, Any]) -> None:
    """Each partition's read lag (end - position) as the process reading it reports it
    (None when none does), and the topic and overall sums of those known."""
    reported: dict[tuple[str, int], int | None] = {}
    for answer in found["processes"]:
        for p in (answer.get("status") or {}).get("partitions", []):
            reported[(p["topic"], p["partition"])] = p.get("lag")
    known = 0
    for t in found["topics"]:
        for p in t["partitions"]:
            p["lag"] = reported.get((t["topic"], p["partition"]))
        t["lag"] = sum(p["lag"] or 0 for p in t["partitions"])
        known += t["lag"]
    found["totals"]["lag"] = known


def render(found: dict[str, Any]) -> RenderableType:
    """The text form: partitions, indices, dead letters, processes."""
    group = found["group"]
    parts = Table(
        "topic",
        "partition",
        "end",
        "committed",
        "committed lag",
        "read lag",
        title=f"group {group['id']} ({group.get('state')})",
        title_justify="left",
    )
    for t in found["topics"]:
        for p in t["partitions"]:
            row = (t["topic"], p["partition"], p["end"], p["committed"], p["committed_lag"],
                   p.get("lag"))  # fmt: skip
            parts.add_row(*(common.cell("-" if v is None else v) for v in row))
    totals = found["totals"]
    row = ("total", "", totals["end"], "", totals["committed_lag"], totals.get("lag", ""))
    parts.add_row(*map(common.cell, row))
    indices = Table("index", "topics", "documents", title="Elasticsearch", title_justify="left")
    for i in found["indices"]:
        docs = i["docs"] if i["error"] is None else i["error"]
        indices.add_row(*map(common.cell, (i["index"], ", ".join(i["topics"]), docs)))
    items: list[RenderableType] = [parts, indices]
    dl = found["dead_letters"]
    if dl is not None:
        newest = dl.get("newest")
        line = f"dead letters in {dl['topic']}: {dl.get('records')}"
        if newest:
            line += (
                f"; newest {newest['at']} {newest['source']} {newest['stage']} "
                f"{newest['error_class']}: {common.truncate(newest['reason'], 160)}"
            )
        items.append(common.cell(line))
    if found["processes"]:
        items.append(_processes(found["processes"]))
    return RenderGroup(*items)


def _processes(answers: list[dict[str, Any]]) -> Table:
    table = Table(
        "process", "state", "records in/s", "docs/s", "last error", title="flow processes",
        title_justify="left",
    )  # fmt: skip
    for a in answers:
        s = a["status"]
        if s is None:
            table.add_row(common.cell(a["url"]), common.cell(a["error"]), "", "", "")
            continue
        rates = s.get("rates") or {}
        errors = [p["last_error"] for p in s.get("partitions", []) if p.get("last_error")]
        halted = s.get("halted")
        last = halted["reason"] if halted else (errors[-1]["reason"] if errors else "")
        state = str(s.get("state"))
        if s.get("paused") and state == "paused":
            state += f" since {s.get('paused_since')} by {s.get('paused_by')}"
        row = (
            f"{s.get('process', {}).get('id')} {a['url']}",
            state,
            f"{rates.get('records_in_per_s', 0):.0f}",
            f"{rates.get('docs_indexed_per_s', 0):.0f}",
            common.truncate(str(last), 120),
        )
        table.add_row(*map(common.cell, row))
    return table


def status(
    json_out: bool = common.JsonOpt,
    watch: bool = typer.Option(False, "--watch", help="Redraw every --interval seconds."),
    interval: float = typer.Option(5.0, "--interval", min=0.5, help="Seconds between redraws."),
    api: list[str] | None = control.ApiOpt,
) -> None:
    """Offsets and lag per partition, documents per index, dead letters, processes."""
    with common.errors_as_exits():
        settings = common.load_settings()
        if not watch:
            found = collect(settings, api)
            if json_out:
                common.emit_json(found)
            else:
                common.out.print(render(found))
            return
        with _until_stopped():
            _watch(settings, api, interval, json_out)


def _watch(settings: Settings, api: list[str] | None, interval: float, json_out: bool) -> None:
    if json_out:  # one document a line, every interval
        while True:
            common.emit_json_line(collect(settings, api))
            time.sleep(interval)
    if not common.out.is_terminal:  # a pipe or a file: a report per interval, as it comes
        while True:
            found = collect(settings, api)
            now = common.iso(int(time.time() * 1000))
            common.out.print(f"status at {now}", highlight=False, markup=False)
            common.out.print(render(found))
            time.sleep(interval)
    with Live(render(collect(settings, api)), console=common.out, auto_refresh=False) as live:
        while True:
            time.sleep(interval)
            live.update(render(collect(settings, api)), refresh=True)


class _Stopped(Exception):
    """SIGTERM during a watch."""


@contextlib.contextmanager
def _until_stopped() -> Iterator[None]:
    """A watch ends by SIGTERM or SIGINT (Ctrl-C) with status 0: it is how a watch stops
    (`timeout 600 es-sink status --watch > status.log`), not an error."""

    def stop(signum: int, frame: object) -> None:
        raise _Stopped

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except (_Stopped, KeyboardInterrupt):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
