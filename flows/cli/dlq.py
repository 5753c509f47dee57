"""`es-sink dlq inspect`, and reading the dead-letter topic for every subcommand.

A dead letter is the original key, value and headers plus Kafka Connect's context headers
(`sinks.dead_letter.headers`): source topic, partition, offset, stage, exception class and
message. `inspect` groups them by stage, exception class and reason, the reason
normalised (`normalise`) so that one mapping error on many documents is one group.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from flows.cli import common
from sinks.dead_letter.headers import TIMESTAMP_HEADER

if TYPE_CHECKING:
    from confluent_kafka import Message

    from flows.config import Settings

P = "__connect.errors."
REPLAY_COUNT_HEADER = "__es_sink.replay.count"
"""How many times `es-sink dlq replay` sent this record through the sink again (set on a
dead letter that failed again in a replay)."""
_OWN_HEADERS = (P, "__es_sink.")  # error context, value-omitted note, replay count

STAGES = ("deserialize", "transform", "index")


@dataclass(frozen=True)
class DeadLetterRecord:
    """One record of the dead-letter topic, its context headers parsed."""

    dlq_partition: int
    dlq_offset: int
    timestamp: int | None
    """When it was dead-lettered (the dead-letter record's timestamp, epoch ms)."""
    key: bytes | None
    value: bytes | None
    original_headers: tuple[tuple[str, bytes | None], ...]
    """The original record's headers (the dead-letter context headers removed)."""
    topic: str
    partition: int
    offset: int
    stage: str
    error_class: str
    message: str
    replay_count: int = 0
    value_omitted: bool = False
    original_timestamp: int | None = None
    """The source record's timestamp (epoch ms), from the dead letter's header; None when
    the record had none or the dead letter predates the header."""

    @property
    def where(self) -> str:
        return f"{self.topic}/{self.partition}@{self.offset}"

    @property
    def source(self) -> tuple[str, int, int]:
        """The source record's coordinates: equal for the duplicates of one dead letter."""
        return (self.topic, self.partition, self.offset)


def parse(msg: Message) -> DeadLetterRecord:
    """A dead-letter topic record as the flow wrote it (missing headers read as empty)."""
    context: dict[str, str] = {}
    original: list[tuple[str, bytes | None]] = []
    replays = 0
    omitted = False
    stamp: int | None = None
    headers: list[tuple[str, bytes | None]] = msg.headers() or []  # type: ignore[assignment]
    for name, value in headers:
        text = (value or b"").decode("utf-8", "replace")
        if name.startswith(P):
            context[name[len(P) :]] = text
        elif name == REPLAY_COUNT_HEADER:
            replays = int(text) if text.isdigit() else 0
        elif name == TIMESTAMP_HEADER:
            stamp = int(text) if text.isdigit() else None
        elif name.startswith("__es_sink."):
            omitted = omitted or name.endswith("value.omitted")
        else:
            original.append((name, value))
    ts_type, ts = msg.timestamp()
    return DeadLetterRecord(
        dlq_partition=int(msg.partition() or 0),
        dlq_offset=int(msg.offset() or 0),
        timestamp=ts if ts_type and ts >= 0 else None,
        key=msg.key(),
        value=msg.value(),
        original_headers=tuple(original),
        topic=context.get("topic", ""),
        partition=_int(context.get("partition")),
        offset=_int(context.get("offset")),
        stage=context.get("stage", ""),
        error_class=context.get("exception.class.name", ""),
        message=context.get("exception.message", ""),
        replay_count=replays,
        value_omitted=omitted,
        original_timestamp=stamp,
    )


def _int(text: str | None) -> int:
    try:
        return int(text or "")
    except ValueError:
        return -1


# ------------------------------------------------------------------ selection


@dataclass(frozen=True)
class Selection:
    """The filters every dead-letter subcommand takes (all must match)."""

    stage: str | None = None
    topic: str | None = None
    since: int | None = None
    until: int | None = None
    grep: re.Pattern[str] | None = None

    def matches(self, dl: DeadLetterRecord) -> bool:
        if self.stage is not None and dl.stage != self.stage:
            return False
        if self.topic is not None and dl.topic != self.topic:
            return False
        ts = dl.timestamp
        if self.since is not None and (ts is None or ts < self.since):
            return False
        if self.until is not None and (ts is None or ts > self.until):
            return False
        if self.grep is not None:
            text = f"{dl.error_class} {dl.message} {common.show_bytes(dl.value, 100_000) or ''}"
            return self.grep.search(text) is not None
        return True


def selection(
    stage: str | None, topic: str | None, since: str | None, until: str | None, grep: str | None
) -> Selection:
    """The options as a Selection (Usage naming the option when one is invalid)."""
    if stage is not None and stage not in STAGES:
        raise common.Usage(f"--stage: expected one of {', '.join(STAGES)}, got {stage!r}")
    try:
        pattern = re.compile(grep) if grep is not None else None
    except re.error as e:
        raise common.Usage(f"--grep: invalid regular expression: {e}") from None
    return Selection(
        stage=stage,
        topic=topic,
        since=common.parse_time(since, "--since") if since else None,
        until=common.parse_time(until, "--until") if until else None,
        grep=pattern,
    )


StageOpt = typer.Option(None, "--stage", help="Only this stage: deserialize, transform, index.")
TopicOpt = typer.Option(None, "--topic", help="Only dead letters of this source topic.")
SinceOpt = typer.Option(None, "--since", help="Dead-lettered at or after this ISO-8601 time.")
UntilOpt = typer.Option(None, "--until", help="Dead-lettered at or before this ISO-8601 time.")
GrepOpt = typer.Option(None, "--grep", help="Regex searched in the class, reason and value.")


def dlq_topic(settings: Settings) -> str:
    if not settings.dlq_topic:
        raise common.Usage("DLQ_TOPIC: not set; the dead letters are read from it")
    return settings.dlq_topic


def read(
    settings: Settings,
    since: int | None = None,
    start: dict[int, int] | None = None,
    timeout: float = 30.0,
) -> Iterator[Message]:
    """Every record of the dead-letter topic up to its end offsets at the call, partition by
    partition; from `start` (partition -> offset), else from the first at or after `since`,
    else from the beginning."""
    from confluent_kafka import TopicPartition

    topic = dlq_topic(settings)
    meta = common.reachable_topics(settings)
    parts = common.partitions_of(meta, topic)
    if not parts:
        raise common.Problem(f"DLQ_TOPIC: no topic {topic} on {settings.bootstrap_servers}")
    c = common.consumer(settings)
    try:
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            begin = max(low, (start or {}).get(p, low))
            if since is not None and (start is None or p not in start):
                found = c.offsets_for_times([TopicPartition(topic, p, since)], timeout=10)[0]
                begin = high if found.offset < 0 else max(begin, found.offset)
            if begin >= high:
                continue
            yield from common.read_range(c, topic, p, begin, high, timeout, "DLQ_TOPIC")
    finally:
        c.close()


# ------------------------------------------------------------------ grouping

_TOKENS = re.compile(
    r"(?P<bracket>\[[^\]]*\])"
    r"|(?P<single>'(?:[^'\\]|\\.)*')"
    r"|(?P<double>\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<uuid>\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)"
    r"|(?P<hex>\b0x[0-9a-fA-F]+\b)"
    r"|(?P<number>(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]))"
)
_POSITION = re.compile(r"\[[\d\s:.,-]*\]")
_PAYLOAD = re.compile(r"(payload starts|Preview of field's value:)\s.*$", re.DOTALL)


def normalise(reason: str) -> str:
    """The reason with what differs per record taken out: quoted values, numbers, ids and
    the payload snippet become placeholders; `[bracketed]` names (fields, types, indices in
    Elasticsearch's reasons) stay, so different mapping errors stay apart."""

    def sub(m: re.Match[str]) -> str:
        kind = m.lastgroup
        if kind == "bracket":  # a name stays; a position such as [1:30] does not
            text = m.group(0)
            return re.sub(r"\d+", "N", text) if _POSITION.fullmatch(text) else text
        if kind == "single":
            return "'…'"
        if kind == "double":
            return '"…"'
        return "N" if kind == "number" else "<id>"

    text = _PAYLOAD.sub(lambda m: f"{m.group(1)} …", reason.strip())
    text = _TOKENS.sub(sub, text)
    return re.sub(r"\s+", " ", text)


@dataclass
class Group:
    """Dead letters of one stage, exception class and normalised reason."""

    stage: str
    error_class: str
    reason: str
    count: int = 0
    first: DeadLetterRecord | None = None
    last: DeadLetterRecord | None = None
    topics: dict[str, int] = field(default_factory=dict)
    sources: set[tuple[str, int, int]] = field(default_factory=set)
    """The distinct source records (an at-least-once re-read dead-letters one again)."""

    @property
    def records(self) -> int:
        return len(self.sources)

    def add(self, dl: DeadLetterRecord) -> None:
        self.count += 1
        self.sources.add(dl.source)
        self.topics[dl.topic] = self.topics.get(dl.topic, 0) + 1
        if self.first is None or _order(dl) < _order(self.first):
            self.first = dl
        if self.last is None or _order(dl) > _order(self.last):
            self.last = dl

    def as_json(self, value_chars: int = 200) -> dict[str, Any]:
        sample = self.first
        return {
            "stage": self.stage,
            "error_class": self.error_class,
            "reason": self.reason,
            "count": self.count,
            "records": self.records,
            "topics": self.topics,
            "first": _point(self.first),
            "last": _point(self.last),
            "sample": None
            if sample is None
            else {
                "source": sample.where,
                "key": common.show_bytes(sample.key, value_chars),
                "value": common.show_bytes(sample.value, value_chars),
                "message": sample.message,
            },
        }


def _order(dl: DeadLetterRecord) -> tuple[int, str, int, int]:
    """By the time of the dead letter, then by the source record."""
    return (dl.timestamp or 0, dl.topic, dl.partition, dl.offset)


def _point(dl: DeadLetterRecord | None) -> dict[str, Any] | None:
    if dl is None:
        return None
    return {
        "dlq_partition": dl.dlq_partition,
        "dlq_offset": dl.dlq_offset,
        "at": common.iso(dl.timestamp),
        "source": dl.where,
    }


def group(letters: Sequence[DeadLetterRecord] | Iterator[DeadLetterRecord]) -> list[Group]:
    """Group by (stage, class, normalised reason), largest groups first."""
    groups: dict[tuple[str, str, str], Group] = {}
    for dl in letters:
        key = (dl.stage, dl.error_class, normalise(dl.message))
        g = groups.get(key)
        if g is None:
            g = groups[key] = Group(*key)
        g.add(dl)
    return sorted(groups.values(), key=lambda g: (-g.count, g.stage, g.error_class, g.reason))


# ------------------------------------------------------------------ the command

dlq_app = typer.Typer(help="Inspect and replay the dead-letter topic.", no_args_is_help=True)


@dlq_app.command("inspect")
def inspect(
    stage: str | None = StageOpt,
    topic: str | None = TopicOpt,
    since: str | None = SinceOpt,
    until: str | None = UntilOpt,
    grep: str | None = GrepOpt,
    value_chars: int = typer.Option(80, "--value-chars", min=0, help="Sample value length."),
    json_out: bool = common.JsonOpt,
) -> None:
    """Group the dead letters by stage, exception class and reason."""
    with common.errors_as_exits():
        settings = common.load_settings()
        chosen = selection(stage, topic, since, until, grep)
        scanned = 0
        picked: list[DeadLetterRecord] = []
        for msg in read(settings, since=chosen.since):
            scanned += 1
            dl = parse(msg)
            if chosen.matches(dl):
                picked.append(dl)
        groups = group(picked)
        records = len({dl.source for dl in picked})
        if json_out:
            common.emit_json(
                {
                    "topic": settings.dlq_topic,
                    "scanned": scanned,
                    "matched": len(picked),
                    "records": records,
                    "groups": [g.as_json(value_chars) for g in groups],
                }
            )
            return
        if common.out.width < WIDE:
            print_groups(settings.dlq_topic or "", groups, value_chars)
        else:
            common.out.print(inspect_table(settings.dlq_topic or "", groups, value_chars))
        common.out.print(
            f"{len(picked)} of {scanned} dead letters ({records} source records) "
            f"in {len(groups)} groups",
            highlight=False,
        )


WIDE = 120
"""Below this many columns (80 in a pipe) the groups are listed, not tabled."""


def print_groups(topic: str, groups: Sequence[Group], value_chars: int) -> None:
    """The groups one block each, every field on its own line (narrow terminals, pipes)."""
    common.out.print(f"dead letters in {topic}", highlight=False, markup=False)
    for g in groups:
        first = g.first
        lines = [
            "",
            f"{g.count} dead letters, {g.records} source records: {g.stage} {g.error_class}",
            f"  reason: {g.reason}",
            f"  first:  {_cell(g.first).replace(chr(10), ' ')}",
            f"  last:   {_cell(g.last).replace(chr(10), ' ')}",
        ]
        if first is not None:
            lines.append(f"  key:    {common.show_bytes(first.key, 40)}")
            lines.append(f"  value:  {common.show_bytes(first.value, value_chars)}")
        for line in lines:
            common.out.print(line, highlight=False, markup=False, soft_wrap=True)


def inspect_table(topic: str, groups: Sequence[Group], value_chars: int) -> Table:
    """The groups as a table (the text form of `dlq inspect`)."""
    table = Table(
        "count",
        "records",
        "stage",
        "exception",
        "reason",
        "first",
        "last",
        "sample key",
        "sample value",
        title=f"dead letters in {topic}",
        title_justify="left",
    )
    for g in groups:
        first = g.first
        row = (
            g.count,
            g.records,
            g.stage,
            g.error_class,
            g.reason,
            _cell(g.first),
            _cell(g.last),
            common.show_bytes(first.key, 40) if first else "",
            common.show_bytes(first.value, value_chars) if first else "",
        )
        table.add_row(*map(common.cell, row))
    return table


def _cell(dl: DeadLetterRecord | None) -> str:
    if dl is None:
        return ""
    return f"{dl.where}\n{common.iso(dl.timestamp) or ''}"
